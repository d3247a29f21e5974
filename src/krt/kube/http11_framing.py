"""The pure parts of :mod:`krt.kube.http11`: the server origin, header checks, request heads.

Part of :mod:`krt.kube.http11` (import from there). No I/O: the pool writes request heads
itself instead of having h11 build them, so the headers are checked here once, when a
caller builds them (:func:`check_header`), and every request head is then one string join
(:func:`request_head`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

__all__ = ["Origin", "check_header", "parse_origin", "request_head"]

_TOKEN_CHARS: Final = frozenset(
    "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
)


@dataclass(frozen=True, slots=True)
class Origin:
    """Where the pool connects, parsed from a server URL.

    Attributes:
        tls: ``https`` (True) or ``http``.
        host: host name or address (IPv6 without brackets).
        port: TCP port.
        authority: the ``Host`` header value (``host[:port]``, IPv6 in brackets).
        path_prefix: a path the server lives under (``""`` normally), prepended to every
            request target.
    """

    tls: bool
    host: str
    port: int
    authority: str
    path_prefix: str


def parse_origin(url: str) -> Origin:
    """Parse ``https://host[:port][/prefix]`` (or ``http://``) into an :class:`Origin`.

    Raises:
        ValueError: another scheme, no host, a bad port, or a query/fragment.
    """
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("https", "http"):
        raise ValueError(f"server URL {url!r}: scheme must be https or http")
    if not parts.hostname:
        raise ValueError(f"server URL {url!r}: no host")
    if parts.query or parts.fragment:
        raise ValueError(f"server URL {url!r}: must not have a query or fragment")
    try:
        port = parts.port or (443 if scheme == "https" else 80)
    except ValueError as exc:
        raise ValueError(f"server URL {url!r}: {exc}") from exc
    host = parts.hostname
    authority = parts.netloc.rpartition("@")[2]
    return Origin(
        tls=scheme == "https",
        host=host,
        port=port,
        authority=authority,
        path_prefix=parts.path.rstrip("/"),
    )


def check_header(name: str, value: str) -> tuple[str, str]:
    """Validate one request header for writing verbatim into a request head.

    Returns:
        ``(name, value)`` unchanged.

    Raises:
        ValueError: the name is not an HTTP token, or the value has a control character
            (CR, LF, NUL, ...) or a non-ASCII character.
    """
    if not name or not set(name) <= _TOKEN_CHARS:
        raise ValueError(f"header name {name!r} is not an HTTP token")
    if any(not (0x20 <= ord(ch) <= 0x7E or ch == "\t") for ch in value):
        raise ValueError(f"header {name}: value has control or non-ASCII characters")
    return name, value


def request_head(
    method: str, target: str, authority: str, headers: Sequence[tuple[str, str]], length: int
) -> bytes:
    """The bytes of a request head, ready to send.

    Args:
        method: HTTP method, upper case.
        target: the request target (path and query) as sent.
        authority: the ``Host`` header value.
        headers: further headers, each checked with :func:`check_header` beforehand.
        length: the body's ``Content-Length`` in bytes, or -1 for a request without a body.

    Raises:
        UnicodeEncodeError: a non-ASCII target (headers are ASCII once checked).
    """
    lines = [f"{method} {target} HTTP/1.1\r\nHost: {authority}\r\n"]
    lines += [f"{name}: {value}\r\n" for name, value in headers]
    if length >= 0:
        lines.append(f"Content-Length: {length}\r\n")
    lines.append("\r\n")
    return "".join(lines).encode("ascii")
