"""Opening a connection for :mod:`krt.kube.http11`: TCP, an optional proxy tunnel, TLS.

Part of :mod:`krt.kube.http11`. The whole opening (TCP connect, proxy ``CONNECT``, TLS
handshake) runs under one deadline, as client-go bounds its dial and TLS handshake, so a
server that accepts and never answers fails the request instead of hanging it. Every
failure is one :class:`~krt.kube.http11_errors.TransportError` that names the server (and
the proxy) and says in words what went wrong; a half-open socket is never left behind.
"""

from __future__ import annotations

import ssl
from collections.abc import Sequence

import h11
import trio

from krt.kube.http11_connection import RECEIVE_BYTES, Connection
from krt.kube.http11_errors import BROKEN, TransportError, describe_failure
from krt.kube.http11_framing import Origin
from krt.tls_stream import TlsStream

__all__ = ["open_connection"]


async def open_connection(
    origin: Origin,
    *,
    ssl_context: ssl.SSLContext | None,
    server_hostname: str,
    proxy: Origin | None,
    proxy_headers: Sequence[tuple[str, str]],
    connect_timeout: float,
) -> Connection:
    """Open one connection to ``origin`` within ``connect_timeout`` seconds.

    Args:
        origin: the server.
        ssl_context: the TLS context (required for an ``https`` origin).
        server_hostname: the TLS server name (SNI and certificate check).
        proxy: an ``http://`` proxy to tunnel through with ``CONNECT``, or None.
        proxy_headers: the ``CONNECT`` request's headers (``Host``, maybe
            ``Proxy-Authorization``), checked beforehand.
        connect_timeout: seconds (> 0) for TCP connect, proxy tunnel and TLS handshake
            together.

    Returns:
        The connection; the caller owns it.

    Raises:
        TransportError: ``cannot connect to <authority>[ via proxy <authority>]: <why>``,
            e.g. connection refused, the host name does not resolve, the proxy refused the
            tunnel, the TLS handshake failed, or no answer within ``connect_timeout``.
    """
    via = f" via proxy {proxy.authority}" if proxy is not None else ""
    try:
        with trio.move_on_after(connect_timeout):
            return await _open(origin, ssl_context, server_hostname, proxy, proxy_headers)
    except TransportError as exc:
        raise TransportError(f"cannot connect to {origin.authority}{via}: {exc}") from exc
    except BROKEN as exc:
        why = describe_failure(exc)
        raise TransportError(f"cannot connect to {origin.authority}{via}: {why}") from exc
    steps = "TCP connect and TLS handshake" if origin.tls else "TCP connect"
    raise TransportError(
        f"cannot connect to {origin.authority}{via}: no answer within "
        f"{connect_timeout:g} s ({steps})"
    )


async def _open(
    origin: Origin,
    ssl_context: ssl.SSLContext | None,
    server_hostname: str,
    proxy: Origin | None,
    proxy_headers: Sequence[tuple[str, str]],
) -> Connection:
    if proxy is None:
        tcp = await trio.open_tcp_stream(origin.host, origin.port)
    else:
        tcp = await trio.open_tcp_stream(proxy.host, proxy.port)
        try:
            await _tunnel(tcp, origin, proxy_headers)
        except BaseException:
            tcp.socket.close()
            raise
    stream: trio.abc.Stream = tcp
    if origin.tls:
        assert ssl_context is not None
        tls = TlsStream(tcp, ssl_context, server_side=False, server_hostname=server_hostname)
        try:
            await tls.do_handshake()
        except BROKEN as exc:
            tcp.socket.close()
            raise TransportError(f"TLS handshake failed: {describe_failure(exc)}") from exc
        except BaseException:
            tcp.socket.close()
            raise
        stream = tls
    return Connection(stream, tcp.socket)


async def _tunnel(
    tcp: trio.SocketStream, origin: Origin, headers: Sequence[tuple[str, str]]
) -> None:
    """Ask the proxy for a tunnel to the origin (``CONNECT host:port``).

    Raises:
        TransportError: the proxy refused, closed, or answered malformed.
        OSError, trio.BrokenResourceError: from the stream.
    """
    connection = h11.Connection(h11.CLIENT)
    request = h11.Request(method="CONNECT", target=origin.authority, headers=list(headers))
    await tcp.send_all(connection.send(request) + connection.send(h11.EndOfMessage()))
    while True:
        try:
            event = connection.next_event()
        except h11.RemoteProtocolError as exc:
            raise TransportError(f"the proxy's answer to CONNECT is malformed: {exc}") from exc
        if event is h11.NEED_DATA:
            data = await tcp.receive_some(RECEIVE_BYTES)
            if not data:
                raise TransportError("the proxy closed the connection during CONNECT")
            connection.receive_data(data)
        elif isinstance(event, h11.Response):
            if not 200 <= event.status_code < 300:
                raise TransportError(
                    f"the proxy answered {event.status_code} to CONNECT {origin.authority}"
                )
            if connection.trailing_data[0]:
                raise TransportError("the proxy sent data before the tunnel was used")
            return
