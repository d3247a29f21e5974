"""localkube: an embedded single-machine Kubernetes for tests and the quick start.

Never imported by production code (krt core, runtimed, gateway, servers); a test enforces it."""
