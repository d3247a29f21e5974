"""What a failed API server exchange raises, and how the failure reads to a person.

Part of :mod:`krt.kube.http11` (import :class:`TransportError` from there). Below HTTP a
failure arrives as an ``OSError``, an ``ssl.SSLError`` or one of trio's stream errors, often
wrapped (trio raises ``BrokenResourceError`` *from* the socket or TLS error, and
``OSError("all attempts to connect ... failed")`` *from* a group of per-address errors).
Their ``repr`` is what Python programmers read, not what ``krt`` users should see, so
:func:`describe_failure` walks the cause chain to the error that says what happened and
words it ("connection refused", "the server closed the connection", "certificate verify
failed: ..."). Exception types stay as they were: callers still catch
:class:`TransportError` (and :class:`~krt.kube.errors.ConnectionFailed` above it).
"""

from __future__ import annotations

import socket
import ssl
from typing import Final

import trio

__all__ = ["BROKEN", "TransportError", "describe_failure"]


class TransportError(Exception):
    """The exchange failed below HTTP: connect, TLS, proxy, reset, EOF or a malformed answer."""


#: What a broken connection raises below HTTP (ssl.SSLError is an OSError; trio wraps TLS
#: failures in BrokenResourceError; a pool closed under a request gives ClosedResourceError).
BROKEN: Final = (OSError, trio.BrokenResourceError, trio.ClosedResourceError)

#: Wording per OSError subclass, most specific first (checked with isinstance).
_OS_ERROR_WORDS: Final[tuple[tuple[type[OSError], str], ...]] = (
    (ConnectionRefusedError, "connection refused"),
    (ConnectionResetError, "the server reset the connection"),
    (BrokenPipeError, "the server closed the connection"),
    (ConnectionAbortedError, "the connection was aborted"),
    (TimeoutError, "the connection timed out"),
)

#: How deep :func:`describe_failure` follows ``__cause__`` (a guard against cycles).
_MAX_DEPTH: Final = 8


def describe_failure(exc: BaseException) -> str:
    """Word a transport failure for an error message (no exception reprs).

    Args:
        exc: what the socket, TLS or trio stream layer raised (any exception is accepted).

    Returns:
        Lower-case words without a final period, e.g. ``"connection refused"``,
        ``"the server closed the connection"``, ``"certificate verify failed: unable to get
        local issuer certificate"``, ``"cannot resolve the host name (name or service not
        known)"``. Several different per-address failures are joined with ``"; "``.
    """
    return _describe(exc, 0)


def _describe(exc: BaseException, depth: int) -> str:
    if depth < _MAX_DEPTH:
        if isinstance(exc, BaseExceptionGroup):
            return _describe_group(exc, depth)
        if isinstance(exc, trio.BrokenResourceError | trio.ClosedResourceError):
            cause = exc.__cause__
            if cause is not None:
                return _describe(cause, depth + 1)
            if isinstance(exc, trio.ClosedResourceError):
                return "this client closed the connection (it was shut down during the exchange)"
            return "the server closed the connection"
        if isinstance(exc, ssl.SSLError):
            return _describe_tls(exc)
        if isinstance(exc, socket.gaierror):
            return f"cannot resolve the host name ({_words(exc.strerror or str(exc))})"
        if isinstance(exc, OSError):
            for kind, words in _OS_ERROR_WORDS:
                if isinstance(exc, kind):
                    return words
            if exc.__cause__ is not None:  # trio: OSError("all attempts ...") from a group
                return _describe(exc.__cause__, depth + 1)
            if exc.strerror:
                where = f": {exc.filename}" if exc.filename is not None else ""
                return _words(exc.strerror) + where
        elif exc.__cause__ is not None:  # httpx/httpcore wrap the OSError they caught
            return _describe(exc.__cause__, depth + 1)
    text = str(exc).strip()
    return _words(text) if text else f"unexpected {type(exc).__name__}"


def _describe_group(group: BaseExceptionGroup[BaseException], depth: int) -> str:
    """Distinct descriptions of a group's members (e.g. one per address tried), in order."""
    seen: list[str] = []
    for inner in group.exceptions:
        words = _describe(inner, depth + 1)
        if words not in seen:
            seen.append(words)
    return "; ".join(seen) if seen else _words(group.message)


def _describe_tls(exc: ssl.SSLError) -> str:
    if isinstance(exc, ssl.SSLCertVerificationError):
        detail = exc.verify_message or "the server's certificate is not trusted"
        return f"certificate verify failed: {_words(str(detail))}"
    if isinstance(exc, ssl.SSLEOFError | ssl.SSLZeroReturnError):
        return "the server closed the connection"
    reason = getattr(exc, "reason", None)
    if isinstance(reason, str) and reason:
        return reason.lower().replace("_", " ")
    return _words(str(exc.strerror or exc))


def _words(text: str) -> str:
    """``text`` inside a sentence: first letter lower-cased (not an acronym's), no period."""
    text = text.strip().rstrip(".")
    if len(text) > 1 and text[0].isupper() and not text[1].isupper():
        text = text[0].lower() + text[1:]
    return text
