"""Pure-Python gRPC plumbing shared by the gateway, runtimed and the Runtime Servers.

* :mod:`krt.grpc.client`: :class:`~krt.grpc.client.GrpcConnection`, one HTTP/2 connection
  carrying unary calls whose cancellation resets the stream (purerpc's sans-IO core, trio I/O).
* :mod:`krt.grpc.server`: :class:`~krt.grpc.server.CallHandler`, purerpc's server connection
  handler with per-call cancel scopes, ``grpc-timeout`` and bounded status messages.
* :mod:`krt.grpc.unary_server`: the connection loop CallHandler uses when every method is
  unary (all of ``executor.v1``): no per-stream queues, a call's task starts with its request.
* :mod:`krt.grpc.status_messages`: bounded ``grpc-message`` trailers and error statuses.
* :mod:`krt.grpc.hpack_encoding`: the HPACK encoder of both sides (plain literals, an indexed
  static table, credentials never indexed).
* :mod:`krt.grpc.closed_streams`: bounds h2's per-connection memory of closed streams (both
  sides use it; h2's default grows ~150 bytes per call up to ~10 MiB per connection).
* :mod:`krt.grpc.header_checks`: h2's header rules in one pass (inbound requests on the
  server, outbound metadata on the client) in place of h2's generator chains.
* :mod:`krt.grpc.direct_writes`: on plain TCP, a call's bytes are written by the task that
  queued them (no writer-task wakeup per request or answer).
* :mod:`krt.grpc.direct_reads`: on plain TCP, one read system call after a readiness wait.
* :mod:`krt.grpc.event_translation`: purerpc's sans-IO connection with type dispatch,
  one-frame messages and repeated header blocks parsed once (both sides use it).
* :mod:`krt.grpc.unreadable_messages`: a received message over the size limit or not
  decompressible fails only its own call (RESOURCE_EXHAUSTED, INTERNAL, UNIMPLEMENTED),
  never the connection (both server loops and the client use it).
* :mod:`krt.grpc.read_buffers`: purerpc's message read buffer with gRPC's gzip format and
  decompression bounded by the message limit.

Imports only purerpc, h2, hpack, protobuf, anyio and trio; never a component package.
"""
