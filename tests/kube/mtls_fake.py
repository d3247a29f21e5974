"""A tiny HTTPS "API server" that requires a TLS client certificate (localkube does not).

It answers every GET with 200 and a JSON body (``/version`` with a version document) over
keep-alive HTTP/1.1 (h11), and records the common name of each client certificate it
accepted, so a test can prove which certificate the client presented.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import h11
import trio
import trustme

VERSION = {"major": "1", "minor": "32", "gitVersion": "v1.32.0"}


@dataclass
class MtlsServer:
    """A running server: its URL, the CA that signs its certificate, accepted client names."""

    url: str
    server_ca: trustme.CA
    client_names: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)


def _common_name(certificate: dict[str, object]) -> str:
    for rdn in certificate.get("subject", ()):  # type: ignore[attr-defined]
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return ""


async def _serve_one(
    stream: trio.SocketStream, context: ssl.SSLContext, server: MtlsServer
) -> None:
    tls = trio.SSLStream(stream, context, server_side=True)
    try:
        await tls.do_handshake()
        server.client_names.append(_common_name(tls.getpeercert() or {}))
        connection = h11.Connection(h11.SERVER)
        while True:
            event = connection.next_event()
            if event is h11.NEED_DATA:
                data = await tls.receive_some()
                if not data:
                    return
                connection.receive_data(data)
                continue
            if isinstance(event, h11.Request):
                path = event.target.decode()
                server.requests.append(path)
                body = json.dumps(
                    VERSION if path.rstrip("/") == "/version" else {"path": path}
                ).encode()
                headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
                await tls.send_all(connection.send(h11.Response(status_code=200, headers=headers)))
                await tls.send_all(connection.send(h11.Data(data=body)))
                await tls.send_all(connection.send(h11.EndOfMessage()))
            elif isinstance(event, h11.EndOfMessage):
                connection.start_next_cycle()
            elif isinstance(event, h11.ConnectionClosed):
                return
    except (trio.BrokenResourceError, trio.ClosedResourceError, h11.RemoteProtocolError):
        return
    finally:
        await trio.aclose_forcefully(tls)


@asynccontextmanager
async def mtls_server(client_ca: trustme.CA) -> AsyncIterator[MtlsServer]:
    """Serve on 127.0.0.1 (port 0) accepting only client certificates from ``client_ca``."""
    server_ca = trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ca.issue_cert("127.0.0.1").configure_cert(context)
    client_ca.configure_trust(context)
    context.verify_mode = ssl.CERT_REQUIRED
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    server = MtlsServer(url=f"https://127.0.0.1:{port}", server_ca=server_ca)

    async def handle(stream: trio.SocketStream) -> None:
        await _serve_one(stream, context, server)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.serve_listeners, handle, listeners)
        try:
            yield server
        finally:
            nursery.cancel_scope.cancel()
