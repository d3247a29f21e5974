"""The listener of runtimed's Service port: purerpc framing, per-call cancellation, peer identity.

Connections are served by the Runtime Servers' :class:`krt.grpc.server.CallHandler`
(purerpc 0.8's stock handler ignores ``RST_STREAM`` and connection loss; that handler runs
each call in its own cancel scope, cancelled by its stream's reset or the connection
closing, and enforces ``grpc-timeout``). It is reused rather than copied. The one addition
here records, per connection, whether the TLS client presented a certificate the server
verified (:func:`runtimed.dataplane.peer.peer_verified`), which gates the hop marker.

With peer TLS configured the port speaks TLS only (ALPN ``h2``); without it, plaintext h2c
(development clusters without the installation's peer Secret; peer hops are then off).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import anyio
import anyio.abc
import trio
from anyio.streams.tls import TLSListener
from purerpc import Service

from krt.grpc.server import CallHandler
from runtimed.dataplane.peer import (
    PeerTLS,
    connection_has_verified_peer,
    reset_peer_verified,
    set_peer_verified,
)

__all__ = ["serve_grpc"]

log = logging.getLogger(__name__)


class _PeerAwareHandler(CallHandler):
    """:class:`CallHandler` that publishes the connection's peer verification to its calls."""

    async def __call__(self, sock: anyio.abc.ByteStream) -> None:  # type: ignore[override]
        token = set_peer_verified(connection_has_verified_peer(sock))
        try:
            await super().__call__(sock)  # type: ignore[arg-type]  # any byte stream works
        finally:
            reset_peer_verified(token)


async def serve_grpc(
    services: Mapping[str, Service],
    *,
    host: str,
    port: int,
    tls: PeerTLS | None,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``services`` on ``host:port`` until cancelled.

    Args:
        services: ``{"executor.v1.FunctionRuntime": servicer.service}``.
        host: address to bind ("" for every interface).
        port: TCP port (0 picks a free one).
        tls: peer TLS contexts (TLS listener), or ``None`` for plaintext.
        task_status: receives the bound port once listening.

    Raises:
        OSError: the address cannot be bound.
    """
    tcp = await anyio.create_tcp_listener(local_host=host or None, local_port=port)
    bound = int(tcp.extra(anyio.abc.SocketAttribute.local_port))
    listener: anyio.abc.Listener[anyio.abc.ByteStream] = tcp
    if tls is not None:
        listener = TLSListener(tcp, tls.server, standard_compatible=False)
    async with listener:
        log.info(
            "FunctionRuntime proxy listening",
            extra={"host": host or "*", "port": bound, "tls": tls is not None},
        )
        task_status.started(bound)
        await listener.serve(_PeerAwareHandler(services))
