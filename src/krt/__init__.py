"""kruntimes core library: API types, Kubernetes access, generated gRPC stubs and the krt CLI.

Also the machinery every component shares, so each concept has one implementation:
:mod:`krt.grpc` (gRPC client connection and server call handler), :mod:`krt.logs` (JSON log
lines), :mod:`krt.metrics_server` (``/metrics`` and ``/healthz``), :mod:`krt.asgi`, and
:mod:`krt.kube.events` (Kubernetes Events).

Never imports localkube, runtimed, gateway or the Runtime Servers (tests/test_import_boundaries.py)."""
