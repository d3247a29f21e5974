"""A minimal HTTP CONNECT proxy for tests: tunnels to any host, counts tunnels, checks auth."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import h11
import trio


class ConnectProxy:
    """Answers ``CONNECT host:port`` with 200 and pipes bytes both ways.

    Attributes:
        port: where it listens on 127.0.0.1.
        tunnels: the CONNECT targets seen, in order.
        authorizations: the ``Proxy-Authorization`` values seen (None when absent).
        refuse: answer every CONNECT with this status instead (e.g. 407).
    """

    def __init__(self) -> None:
        self.port = 0
        self.tunnels: list[str] = []
        self.authorizations: list[str | None] = []
        self.refuse: int | None = None

    async def _pipe(self, source: trio.SocketStream, sink: trio.SocketStream) -> None:
        try:
            while data := await source.receive_some(65536):
                await sink.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            await trio.aclose_forcefully(sink)

    async def handle(self, client: trio.SocketStream) -> None:
        connection = h11.Connection(h11.SERVER)
        request: h11.Request | None = None
        while request is None:
            event = connection.next_event()
            if event is h11.NEED_DATA:
                data = await client.receive_some(65536)
                if not data:
                    return
                connection.receive_data(data)
            elif isinstance(event, h11.Request):
                request = event
        target = request.target.decode()
        self.tunnels.append(target)
        self.authorizations.append(
            next((v.decode() for k, v in request.headers if k == b"proxy-authorization"), None)
        )
        if self.refuse is not None:
            await client.send_all(
                f"HTTP/1.1 {self.refuse} No\r\nContent-Length: 0\r\n\r\n".encode()
            )
            await trio.aclose_forcefully(client)
            return
        host, _, port = target.rpartition(":")
        upstream = await trio.open_tcp_stream(host.strip("[]"), int(port))
        await client.send_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._pipe, client, upstream)
            nursery.start_soon(self._pipe, upstream, client)


@asynccontextmanager
async def connect_proxy() -> AsyncIterator[ConnectProxy]:
    """Run a :class:`ConnectProxy` on 127.0.0.1 for the duration of the context."""
    proxy = ConnectProxy()
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(trio.serve_tcp, proxy.handle, 0)
        proxy.port = listeners[0].socket.getsockname()[1]
        yield proxy
        nursery.cancel_scope.cancel()
