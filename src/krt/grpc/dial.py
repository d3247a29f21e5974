"""Opening the byte stream under a gRPC connection: TCP, then TLS with ALPN ``h2``.

Shared by the gateway's connection pool and runtimed's peer and Runtime Server channels, so
both bound the same steps and word a failure the same way ("TLS handshake failed: ...",
"no answer within 5 s (TCP connect)").
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Final

import trio

from krt.kube.http11_errors import describe_failure

#: What a dial can raise besides cancellation: name resolution and connect errors
#: (``OSError``), a broken TLS handshake, and the caller's deadline.
DIAL_ERRORS = (OSError, trio.TooSlowError, trio.BrokenResourceError)


#: How a TLS handshake the peer cut short reads in :func:`describe_failure`: the TCP
#: connection was accepted (a Service proxy, or a server going down), then closed or reset.
_CLOSED_DURING_HANDSHAKE: Final = frozenset(
    {
        "the server closed the connection",
        "the server reset the connection",
        "unexpected eof while reading",
    }
)
#: :func:`dial_failure`'s words for such a close: no certificate problem, nothing serves yet.
CLOSED_DURING_HANDSHAKE_TEXT: Final = "the connection closed before the TLS handshake completed"


@dataclass
class DialProgress:
    """The step a dial has reached, for the failure text (``step`` is free text)."""

    step: str = "TCP connect"


async def open_stream(
    host: str,
    port: int,
    *,
    ssl_context: ssl.SSLContext | None,
    server_hostname: str,
    progress: DialProgress,
) -> trio.abc.Stream:
    """Connect to ``host:port`` and, with ``ssl_context``, complete a TLS handshake.

    The caller bounds the whole dial with a cancel scope (``trio.fail_after``).

    Args:
        host, port: the address (an IP or a name; port 1-65535).
        ssl_context: client TLS settings, or None for plaintext (h2c).
        server_hostname: the name the server certificate must carry (SNI too).
        progress: updated to the step in progress ("TCP connect", "TLS handshake").

    Returns:
        The connected stream (a ``trio.SSLStream`` when TLS is used).

    Raises:
        OSError: resolution or connect failed.
        trio.BrokenResourceError: the TLS handshake failed (the TCP stream is closed).
    """
    progress.step = "TCP connect"
    stream = await trio.open_tcp_stream(host, port)
    if ssl_context is None:
        return stream
    tls = trio.SSLStream(stream, ssl_context, server_hostname=server_hostname)
    progress.step = "TLS handshake"
    try:
        await tls.do_handshake()
    except BaseException:
        await trio.aclose_forcefully(stream)
        raise
    return tls


def dial_failure(exc: BaseException, progress: DialProgress, timeout_seconds: float) -> str:
    """Why a dial failed, in words, e.g. ``TLS handshake failed: certificate verify failed``.

    Args:
        exc: one of :data:`DIAL_ERRORS`.
        progress: the dial's progress when it failed.
        timeout_seconds: the caller's deadline (seconds), named when it expired.
    """
    if isinstance(exc, trio.TooSlowError):
        return f"no answer within {timeout_seconds:g} s ({progress.step})"
    if closed_during_handshake(exc, progress):
        return f"{CLOSED_DURING_HANDSHAKE_TEXT} (is the peer restarting?)"
    if progress.step == "TLS handshake":
        return f"TLS handshake failed: {describe_failure(exc)}"
    return describe_failure(exc)


def closed_during_handshake(exc: BaseException, progress: DialProgress) -> bool:
    """Whether the peer closed or reset the connection during the TLS handshake.

    Such a close is no certificate problem (those read ``TLS handshake failed: certificate
    verify failed ...``): something accepted the TCP connection but nothing served TLS on
    it, typically a server restarting behind a Service address.
    """
    return progress.step == "TLS handshake" and describe_failure(exc) in _CLOSED_DURING_HANDSHAKE
