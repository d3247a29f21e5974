"""The pure parts of reading a response in :mod:`krt.kube.http11`: the usual head, chunks.

Part of :mod:`krt.kube.http11` (no I/O). h11 is a complete, strict HTTP/1.1 state machine,
and it costs: about 53 microseconds of CPU per request/response exchange on this machine
(a Run-sized answer with six headers) and about 17 per chunk of a watch stream, which is a
sixth of a status write's client CPU and several percent of a watch event's. Almost every
answer from an API server is the same plain shape, so the connection reads that shape here
(about 6 and 2 microseconds) and hands everything else to h11:

* :func:`parse_head` reads an ``HTTP/1.1`` status line with a final status (200-599, not
  204 or 304) and well-formed header lines whose body is framed by ``Content-Length``
  (repeats of the same value count once, as in h11) or by ``Transfer-Encoding: chunked``.
  Anything else (``HTTP/1.0``, a ``1xx`` interim answer, a close-delimited body, both or
  neither framing header, two different lengths, a header line h11 might refuse, an
  over-long head) raises :class:`Unusual`, and the caller gives the bytes to h11, which
  then reads (or refuses) the response exactly as before.
* :class:`ChunkedBody` decodes a chunked body strictly (hex sizes, ``CRLF`` after each
  chunk's data, trailer fields skipped), raising :class:`MalformedBody` on anything else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

__all__ = ["MAX_HEAD_BYTES", "ChunkedBody", "Head", "MalformedBody", "Unusual", "parse_head"]

#: Longest response head (status line and headers, bytes) read here; a longer one goes to h11
#: (whose own limit then applies).
MAX_HEAD_BYTES: Final = 16384
#: Longest chunk-size line (with extensions) or trailer line, bytes.
MAX_CHUNK_LINE_BYTES: Final = 4096

_TOKEN: Final = re.compile(rb"[-!#$%&'*+.^_`|~0-9a-zA-Z]+")
#: Control characters other than tab, CR and LF (CR and LF are checked by count).
_CONTROL: Final = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_HEX: Final = re.compile(rb"[0-9A-Fa-f]{1,16}")


class Unusual(Exception):  # noqa: N818 - a signal to the caller, not an error
    """The response is not of the plain shape :func:`parse_head` reads: let h11 read it."""


class MalformedBody(Exception):
    """A chunked body broke the chunked coding (the message says how)."""


@dataclass(frozen=True, slots=True)
class Head:
    """A parsed response head.

    Attributes:
        status: the status code (200-599).
        headers: ``(name, value)`` pairs, names lower-cased, values without surrounding
            whitespace (bytes, as h11 gives them).
        length: the body's ``Content-Length`` in bytes, or -1 for a chunked body.
        keep_alive: False when the server said ``Connection: close``.
        size: bytes of the head, blank line included (the body starts there).
    """

    status: int
    headers: list[tuple[bytes, bytes]]
    length: int
    keep_alive: bool
    size: int


def parse_head(data: bytes, method: str) -> Head | None:
    """Parse the response head at the start of ``data`` if it has the usual shape.

    Args:
        data: the bytes received so far in this exchange.
        method: the request's method (a ``HEAD`` answer has no body: h11's case).

    Returns:
        The head, or None when ``data`` does not hold the whole head yet.

    Raises:
        Unusual: not the plain shape described in the module docstring.
    """
    end = data.find(b"\r\n\r\n")
    if end < 0:
        if len(data) > MAX_HEAD_BYTES:
            raise Unusual
        return None
    if end > MAX_HEAD_BYTES or method == "HEAD":
        raise Unusual
    block = data[:end]
    lines = block.split(b"\r\n")
    if (
        _CONTROL.search(block)
        or block.count(b"\n") >= len(lines)  # a bare LF or CR inside a line
        or block.count(b"\r") >= len(lines)
    ):
        raise Unusual
    line = lines[0]
    if (
        len(line) < 12
        or not line.startswith(b"HTTP/1.1 ")
        or not line[9:12].isdigit()
        or (len(line) > 12 and line[12] != 0x20)
    ):
        raise Unusual
    status = int(line[9:12])
    if not 200 <= status < 600 or status in (204, 304):
        raise Unusual
    headers: list[tuple[bytes, bytes]] = []
    length = -1
    chunked = False
    keep_alive = True
    token = _TOKEN.fullmatch
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not token(name):
            raise Unusual  # obs-fold, whitespace before the colon
        name = name.lower()
        value = value.strip(b" \t")
        if name == b"content-length":
            if not value.isdigit() or len(value) > 18:
                raise Unusual
            if length >= 0 and int(value) != length:
                raise Unusual  # a repeat must agree (RFC 9110 section 8.6; h11 refuses)
            length = int(value)
        elif name == b"transfer-encoding":
            if chunked or value.lower() != b"chunked":
                raise Unusual
            chunked = True
        elif name == b"connection":
            if b"close" in (item.strip(b" \t") for item in value.lower().split(b",")):
                keep_alive = False
        headers.append((name, value))
    if chunked == (length >= 0):
        raise Unusual  # both framings (h11 refuses) or neither (a close-delimited body)
    return Head(status, headers, length, keep_alive, end + 4)


_SIZE, _DATA, _DATA_END, _TRAILER, _DONE = range(5)


class ChunkedBody:
    """Decodes a ``Transfer-Encoding: chunked`` body fed in pieces as they arrive.

    Attributes:
        done: the last chunk and the trailer have been read.
        leftover: bytes received after the body's end (none from a well-behaved server).
    """

    __slots__ = ("_buffer", "_remaining", "_state", "leftover")

    def __init__(self) -> None:
        self._state = _SIZE
        self._remaining = 0
        self._buffer = b""
        self.leftover = b""

    @property
    def done(self) -> bool:
        """Whether the whole body has been decoded."""
        return self._state == _DONE

    def feed(self, data: bytes) -> list[bytes]:
        """Decode ``data`` (the next received bytes); return the body bytes it completes.

        Data is returned as soon as it arrives, also part of a chunk.

        Raises:
            MalformedBody: a chunk-size line that is not hexadecimal, a chunk not followed
                by ``CRLF``, or a size or trailer line over :data:`MAX_CHUNK_LINE_BYTES`.
        """
        if self._state == _DONE:
            self.leftover += data
            return []
        buffer = self._buffer + data if self._buffer else data
        size = len(buffer)
        position = 0
        pieces: list[bytes] = []
        state = self._state
        while position < size:
            if state == _DATA:
                end = min(size, position + self._remaining)
                pieces.append(buffer[position:end])
                self._remaining -= end - position
                position = end
                if not self._remaining:
                    state = _DATA_END
            elif state == _SIZE:
                eol = buffer.find(b"\r\n", position)
                if eol < 0:
                    if size - position > MAX_CHUNK_LINE_BYTES:
                        raise MalformedBody("a chunk-size line is too long")
                    break
                digits = buffer[position:eol].partition(b";")[0].rstrip(b" \t")
                if not _HEX.fullmatch(digits):
                    shown = buffer[position:eol][:40].decode("ascii", "replace")
                    raise MalformedBody(f"bad chunk-size line {shown!r}")
                self._remaining = int(digits, 16)
                position = eol + 2
                state = _DATA if self._remaining else _TRAILER
            elif state == _DATA_END:
                if size - position < 2:
                    break
                if buffer[position : position + 2] != b"\r\n":
                    raise MalformedBody("a chunk's data is not followed by CRLF")
                position += 2
                state = _SIZE
            else:  # _TRAILER: fields up to a blank line, skipped
                eol = buffer.find(b"\r\n", position)
                if eol < 0:
                    if size - position > MAX_CHUNK_LINE_BYTES:
                        raise MalformedBody("a trailer line is too long")
                    break
                if eol == position:
                    state = _DONE
                    self.leftover = buffer[eol + 2 :]
                    position = size
                else:
                    position = eol + 2
        self._state = state
        self._buffer = buffer[position:] if position < size else b""
        return pieces
