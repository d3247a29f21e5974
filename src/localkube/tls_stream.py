"""The API server's TLS stream: :class:`krt.tls_stream.TlsStream` on the server side.

The stream itself (why it replaces ``trio.SSLStream``, what it keeps and leaves out) lives
in :mod:`krt.tls_stream`, shared with the Kubernetes client's connection pool, so both ends
of a status write or a watch event pay the same lean path.
"""

from __future__ import annotations

import ssl

import trio

from krt.tls_stream import RECEIVE_BYTES, TlsStream

__all__ = ["RECEIVE_BYTES", "ServerTlsStream"]


class ServerTlsStream(TlsStream):
    """Server-side TLS over one accepted connection; takes ownership of it.

    Args:
        transport: the accepted connection (a ``trio.SocketStream``, or any stream).
        context: the server TLS context (certificate, protocols, ALPN).

    Call :meth:`do_handshake` first (see :class:`krt.tls_stream.TlsStream`).
    """

    def __init__(self, transport: trio.abc.Stream, context: ssl.SSLContext) -> None:
        super().__init__(transport, context, server_side=True)
