"""A stand-in for the Runtime gateway: hypercorn on trio, TLS from a trustme CA.

It answers ``POST .../functions/{uid}:invoke`` the way docs/gateway.md describes: the
status is chosen by the request's ``X-Kruntime-Invocation-ID`` (``status-503``,
``status-500-HandlerError``, ...); any other ID (or none) gets a 200 echoing the request
body, with ``X-Kruntime-Outputs``. Every request is recorded (headers, body, SNI-visible
host) so tests can check what ``krt invoke`` sent.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio
import trustme
from hypercorn.config import Config
from hypercorn.trio import serve

REASONS = {
    400: "InvalidJSON",
    401: "Unauthorized",
    403: "Forbidden",
    404: "FunctionNotFound",
    413: "RequestTooLarge",
    415: "UnsupportedMediaType",
    429: "TooManyRequests",
    500: "InternalError",
    503: "FunctionUnavailable",
    504: "InvocationTimeout",
}
GATEWAY_HOST = "runtime-gateway.kruntimes-system.svc"


@dataclass
class FakeGateway:
    """A running fake gateway.

    Attributes:
        port: the HTTPS port on 127.0.0.1.
        ca_pem: the CA that signed its certificate (for ``status.endpoint.caBundle``).
        requests: every request received: ``{"path", "headers", "body"}``.
    """

    port: int
    ca_pem: bytes
    requests: list[dict[str, Any]] = field(default_factory=list)


async def _read_body(receive: Any) -> bytes:
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body


def _app(gateway: FakeGateway) -> Any:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        body = await _read_body(receive)
        gateway.requests.append({"path": scope["path"], "headers": headers, "body": body})
        invocation = headers.get("x-kruntime-invocation-id") or "generated-0001"
        out_headers = [(b"x-kruntime-invocation-id", invocation.encode())]
        if invocation.startswith("status-"):
            _, code_text, *rest = invocation.split("-")
            code = int(code_text)
            reason = rest[0] if rest else REASONS[code]
            if code in (429, 503):
                out_headers.append((b"retry-after", b"3"))
            payload = {
                "error": {
                    "code": code,
                    "reason": reason,
                    "message": f"fake {reason}",
                    "invocationId": invocation,
                }
            }
            status, content = code, json.dumps(payload).encode()
        else:
            status, content = 200, json.dumps({"echo": json.loads(body)}).encode()
            out_headers.append((b"x-kruntime-outputs", b'{"summary":"done"}'))
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json"), *out_headers],
            }
        )
        await send({"type": "http.response.body", "body": content})

    return app


@asynccontextmanager
async def running_gateway(tmp: Path) -> AsyncIterator[FakeGateway]:
    """Serve a fake gateway on 127.0.0.1 (port 0) whose certificate names
    :data:`GATEWAY_HOST` and 127.0.0.1."""
    ca = trustme.CA()
    cert = ca.issue_cert(GATEWAY_HOST, "127.0.0.1")
    cert_path = tmp / "gateway.pem"
    cert.private_key_and_cert_chain_pem.write_to_path(str(cert_path))
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.certfile = str(cert_path)
    config.keyfile = str(cert_path)
    config.accesslog = None
    config.errorlog = None
    gateway = FakeGateway(port=0, ca_pem=ca.cert_pem.bytes())
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(serve, _app(gateway), config)
        gateway.port = int(binds[0].rsplit(":", 1)[1])
        try:
            yield gateway
        finally:
            nursery.cancel_scope.cancel()
