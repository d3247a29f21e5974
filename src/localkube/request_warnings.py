"""Warnings for the request being served, sent back as HTTP ``Warning`` headers.

kube-apiserver lets any stage of a request add a warning (``warning.AddWarning``); each is
answered as a ``Warning: 299 - "<text>"`` header, which kubectl prints as ``Warning:
<text>`` and client-go hands to its warning handler. localkube's request handlers add them
through this context variable; the HTTP layer starts an empty list per request
(:func:`start`) and writes the collected ones into the response head (:func:`headers`).
Writes made by the server itself run outside any request and their warnings are dropped.
"""

from __future__ import annotations

from contextvars import ContextVar

_WARNINGS: ContextVar[list[str] | None] = ContextVar("localkube_request_warnings", default=None)


def start() -> None:
    """Begin collecting the current request's warnings (called once per request)."""
    _WARNINGS.set([])


def add(text: str) -> None:
    """Add a warning to the current request (duplicates are sent once; none outside requests)."""
    collected = _WARNINGS.get()
    if collected is not None and text not in collected:
        collected.append(text)


def collected() -> list[str]:
    """The current request's warnings so far, in the order added."""
    return list(_WARNINGS.get() or [])


def headers() -> list[tuple[bytes, bytes]]:
    """The ``Warning`` response headers of the current request's warnings.

    Each is ``299 - "<text>"`` (code 299 "miscellaneous persistent warning", no agent),
    the text quoted with ``\\`` and ``"`` escaped; characters outside ASCII are escaped
    as ``\\uXXXX`` (``\\UXXXXXXXX`` beyond the BMP) so the header stays ASCII.
    """
    result = []
    for text in collected():
        quoted = text.replace("\\", "\\\\").replace('"', '\\"')
        value = "".join(
            c if ord(c) < 0x80 else (f"\\u{ord(c):04x}" if ord(c) <= 0xFFFF else f"\\U{ord(c):08x}")
            for c in quoted
        )
        result.append((b"warning", f'299 - "{value}"'.encode("ascii")))
    return result
