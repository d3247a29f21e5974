"""A fast reader for the common HTTP/1.1 request head; anything unusual is left to h11.

Why: h11 (the well-kept sans-I/O parser :mod:`localkube.http_server` is built on) costs
about 30-40 microseconds of CPU per request on this machine (a ``Connection`` per request
cycle, a state machine, an event object per step, header normalisation), which was about
15% of the API server's CPU per Run write (py-spy, GIL samples, ``bench/localkube.py
--runs``). Nearly every request the API server sees has the same plain shape: an HTTP/1.1
request line, ordinary header lines and a ``Content-Length`` body (or none). For exactly
that shape :func:`read_head` parses the head in one pass, in a few microseconds.

It only ever accepts a head that h11 would accept with the same result (method, target,
header names lowercased, values without surrounding whitespace; the tests compare it with
h11 on generated heads). For anything else it answers :data:`DECLINE` and the server hands
the bytes to h11, which then decides exactly as before: HTTP/1.0, ``Transfer-Encoding``
(chunked bodies), ``Expect: 100-continue``, ``Upgrade``, ``CONNECT``, obsolete line folding,
bare LF line ends, characters outside visible ASCII, a missing or repeated ``Host``, an
odd ``Content-Length``, heads over the size limit, and malformed input (h11 produces the
error status).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import Final

__all__ = ["DECLINE", "NEED_MORE", "Head", "read_head"]


class Verdict(Enum):
    """What :func:`read_head` says when it returns no :class:`Head`."""

    NEED_MORE = "need more"
    """The head is not complete yet (and nothing so far rules the fast path out)."""
    DECLINE = "decline"
    """Not the common shape: let h11 parse these bytes."""


NEED_MORE: Final = Verdict.NEED_MORE
DECLINE: Final = Verdict.DECLINE

_TOKEN_START = frozenset(
    b"-!#$%&'*+.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
)
_REQUEST_LINE = re.compile(rb"([-!#$%&'*+.^_`|~0-9a-zA-Z]+) ([\x21-\x7e]+) HTTP/1\.1")
_HEADER_LINE = re.compile(
    rb"([-!#$%&'*+.^_`|~0-9a-zA-Z]+):[ \t]*((?:[\x21-\x7e]+(?:[ \t]+[\x21-\x7e]+)*)?)[ \t]*"
)
_BLANK_LINE = re.compile(rb"\n\r?\n")
_DIGITS = re.compile(rb"[0-9]{1,18}")
# a client sends the same header lines on every request of a connection (Host, its bearer
# token, Accept...); matching a line with a kilobyte token costs microseconds, a lookup not
_PARSED_LINES: dict[bytes, tuple[bytes, bytes]] = {}
MAX_PARSED_LINES = 1024
MAX_PARSED_LINE_BYTES = 8192  # (a ServiceAccount token line is about 1 KiB)
# headers whose presence makes the request one for h11 (framing, interim answers, upgrades)
_H11_ONLY = frozenset({b"transfer-encoding", b"expect", b"upgrade"})


@dataclass(frozen=True, slots=True)
class Head:
    """A parsed request head of the common shape.

    Attributes:
        method: e.g. ``b"PUT"``. target: the request target as sent (path and query).
        headers: ``(name, value)`` pairs in order, names lowercased, values stripped (as
            h11 gives them).
        content_length: body size in bytes (0 without a ``Content-Length``).
        close: the client asked to close the connection after the response
            (``Connection: close``).
        size: bytes the head took in the buffer, its blank line included.
    """

    method: bytes
    target: bytes
    headers: list[tuple[bytes, bytes]]
    content_length: int
    close: bool
    size: int


def read_head(buffer: bytes | bytearray, *, max_head_bytes: int) -> Head | Verdict:
    """Parse the request head at the start of ``buffer`` if it has the common shape.

    Args:
        buffer: bytes received and not yet consumed (a request starts at offset 0).
        max_head_bytes: the largest head the server accepts (bytes); a head that is, or
            may become, larger is declined (h11 then answers 431).

    Returns:
        A :class:`Head`; :data:`NEED_MORE` when the head is incomplete; :data:`DECLINE`
        when h11 must handle these bytes. Never raises.
    """
    if not buffer:
        return NEED_MORE
    if buffer[0] not in _TOKEN_START:
        return DECLINE  # leading blank lines, garbage, TLS on plain HTTP...: h11 decides
    end = buffer.find(b"\r\n\r\n", 0, max_head_bytes + 4)
    if end < 0:
        if len(buffer) > max_head_bytes or _BLANK_LINE.search(buffer, 0, max_head_bytes):
            return DECLINE  # too large, or ended by bare LFs
        return NEED_MORE
    if end > max_head_bytes:
        return DECLINE
    # a bare CR or LF inside a line fails the line patterns below
    lines = bytes(buffer[:end]).split(b"\r\n")
    request_line = _REQUEST_LINE.fullmatch(lines[0])
    if request_line is None:
        return DECLINE
    method, target = request_line.groups()
    if method == b"CONNECT":
        return DECLINE
    headers: list[tuple[bytes, bytes]] = []
    content_length = 0
    seen_length = False
    hosts = 0
    close = False
    for line in lines[1:]:
        parsed = _PARSED_LINES.get(line)
        if parsed is None:
            match = _HEADER_LINE.fullmatch(line)
            if match is None:
                return DECLINE  # obsolete folding, control or non-ASCII bytes, no colon...
            raw_name, value = match.groups()
            parsed = (raw_name.lower(), value)
            if len(line) <= MAX_PARSED_LINE_BYTES:
                if len(_PARSED_LINES) >= MAX_PARSED_LINES:
                    _PARSED_LINES.clear()
                _PARSED_LINES[line] = parsed
        name, value = parsed
        if name in _H11_ONLY:
            return DECLINE
        if name == b"content-length":
            if seen_length or _DIGITS.fullmatch(value) is None:
                return DECLINE
            seen_length = True
            content_length = int(value)
        elif name == b"host":
            hosts += 1
        elif name == b"connection" and b"close" in value.lower():
            close = True
        headers.append((name, value))
    if hosts != 1:
        return DECLINE
    return Head(method, target, headers, content_length, close, end + 4)
