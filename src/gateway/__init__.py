"""The Runtime gateway: HTTPS invoke front door that forwards to runtimed over gRPC.

Seed 000 "Runtime Gateway" and "Invoke Contract", seed 001 "Runtime Gateway", issue 8. A
stateless process (``krt-gateway``, :mod:`gateway.__main__`): hypercorn serves the ASGI app
(:mod:`gateway.app`) over TLS; each invoke request is validated (:mod:`gateway.validation`)
and becomes one ``FunctionRuntime.InvokeFunction`` call (:mod:`gateway.invoke`) over a pooled
HTTP/2 connection (:mod:`gateway.pool`, :mod:`krt.grpc.client`) to the Runtime's Service
(:mod:`gateway.targets`); the gRPC status decides the HTTP answer (:mod:`gateway.mapping`).
docs/gateway.md is the user-facing contract.

It may import :mod:`krt.api` (including :mod:`krt.api.naming`, the Service naming
convention), :mod:`krt.proto` and :mod:`krt.grpc`. It never talks to the Kubernetes API (routing and authorization
are runtimed's job), never imports ``runtimed``, ``servers`` or ``localkube``, and never logs
or stores a caller's token.
"""
