"""Names on the invoke wire: the gateway's HTTP headers and the gRPC metadata behind it.

Seed 000, "Invoke Contract" (docs/gateway.md is the user-facing table). The CLI sends and
reads the HTTP headers, the gateway checks them; the gateway sends the gRPC metadata and
runtimed checks it. Header names are compared case-insensitively (HTTP); they are spelled
here as documented, and HTTP/2, ASGI and gRPC carry them lowercase (:func:`wire_name`).
"""

from __future__ import annotations

from typing import Final

#: Request and response header: the caller's (or the gateway's generated) invocation ID.
INVOCATION_ID_HEADER: Final = "X-Kruntime-Invocation-ID"
#: Request header: the invocation timeout in milliseconds.
TIMEOUT_HEADER: Final = "X-Kruntime-Timeout"
#: Response header: the invocation's outputs as compact JSON.
OUTPUTS_HEADER: Final = "X-Kruntime-Outputs"

#: gRPC metadata the gateway sends with ``InvokeFunction``: the Run's namespace and Runtime
#: (runtimed authorizes the exact Run with them).
NAMESPACE_METADATA: Final = "x-kruntime-namespace"
RUNTIME_METADATA: Final = "x-kruntime-runtime"


def wire_name(header: str) -> bytes:
    """``header`` as HTTP/2 and ASGI carry it: lowercase ASCII bytes."""
    return header.lower().encode("ascii")
