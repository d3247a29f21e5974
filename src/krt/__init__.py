"""kruntimes core library: API types, Kubernetes access, generated gRPC stubs and the krt CLI.

Never imports localkube, runtimed, gateway or the Runtime Servers."""
