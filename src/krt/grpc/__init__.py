"""Pure-Python gRPC plumbing shared by the gateway, runtimed and the Runtime Servers.

* :mod:`krt.grpc.client`: :class:`~krt.grpc.client.GrpcConnection`, one HTTP/2 connection
  carrying unary calls whose cancellation resets the stream (purerpc's sans-IO core, trio I/O).
* :mod:`krt.grpc.server`: :class:`~krt.grpc.server.CallHandler`, purerpc's server connection
  handler with per-call cancel scopes, ``grpc-timeout`` and bounded status messages.
* :mod:`krt.grpc.closed_streams`: bounds h2's per-connection memory of closed streams (both
  sides use it; h2's default grows ~150 bytes per call up to ~10 MiB per connection).

Imports only purerpc, h2, protobuf and trio; never a component package.
"""
