"""One raw HTTP/1.1 exchange over TLS, so a property can send bytes no HTTP client would.

httpx (h11 underneath) refuses to *send* control characters, non-ASCII header bytes or odd
request targets; the gateway must still answer them. :func:`exchange` writes the request
bytes as given (``Connection: close`` is the caller's job) while reading the response
concurrently, because the gateway may answer 413 before the body has been sent.
"""

from __future__ import annotations

import re
import ssl
from dataclasses import dataclass

import trio

#: bound on the response size read back (bytes): error bodies are small, echoes <= 1 MiB.
MAX_RESPONSE_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class RawResponse:
    """A parsed HTTP/1.1 response.

    Attributes:
        status: the status code.
        headers: lowercase header names to values (latin-1), the last value of a repeat.
        body: the body (by ``Content-Length``, else everything up to the close).
    """

    status: int
    headers: dict[str, str]
    body: bytes


def build_request(
    method: bytes,
    target: bytes,
    headers: list[tuple[bytes, bytes]],
    body: bytes,
    *,
    chunk_bytes: int = 0,
) -> bytes:
    """Serialize a request exactly as given, plus ``Host``, the body framing and close.

    Args:
        chunk_bytes: 0 sends ``Content-Length``; otherwise the body is sent with
            ``Transfer-Encoding: chunked`` in chunks of this many bytes (no declared size).
    """
    lines = [method + b" " + target + b" HTTP/1.1", b"host: 127.0.0.1"]
    lines += [name + b": " + value for name, value in headers]
    if chunk_bytes:
        lines += [b"transfer-encoding: chunked", b"connection: close"]
        chunks = [body[i : i + chunk_bytes] for i in range(0, len(body), chunk_bytes)]
        encoded = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"
        return b"\r\n".join(lines) + b"\r\n\r\n" + encoded
    lines += [b"content-length: %d" % len(body), b"connection: close"]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def parse_response(data: bytes) -> RawResponse:
    """Parse one HTTP/1.1 final response, skipping interim 1xx ones (``100 Continue``).

    Raises:
        AssertionError: ``data`` holds no complete final response.
    """
    head, sep, rest = data.partition(b"\r\n\r\n")
    while sep and re.match(rb"HTTP/1\.1 1\d\d", head):
        head, sep, rest = rest.partition(b"\r\n\r\n")
    assert sep, f"no complete response head in {data[:200]!r}"
    status_line, *header_lines = head.split(b"\r\n")
    version, _, status_text = status_line.partition(b" ")
    assert version == b"HTTP/1.1", status_line
    status = int(status_text.split(b" ", 1)[0])
    headers: dict[str, str] = {}
    for line in header_lines:
        name, _, value = line.partition(b":")
        headers[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
    if "content-length" in headers:
        length = int(headers["content-length"])
        assert len(rest) >= length, f"body cut short: {len(rest)} of {length} bytes"
        rest = rest[:length]
    return RawResponse(status, headers, rest)


async def exchange(host: str, port: int, context: ssl.SSLContext, request: bytes) -> RawResponse:
    """Send ``request`` on a new TLS connection and read the response until the close.

    A server that stops reading (an early rejection) may reset the connection while the
    request is still being written: the send side ignores that, the response read decides.
    Callers bound the whole exchange with a cancel scope.
    """
    tcp = await trio.open_tcp_stream(host, port)
    stream = trio.SSLStream(tcp, context, server_hostname=host)
    received = bytearray()
    try:
        await stream.do_handshake()
        async with trio.open_nursery() as nursery:

            async def send() -> None:
                try:
                    await stream.send_all(request)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    pass

            nursery.start_soon(send)
            while len(received) < MAX_RESPONSE_BYTES:
                try:
                    chunk = await stream.receive_some(65536)
                except trio.BrokenResourceError:
                    break
                if not chunk:
                    break
                received += chunk
                if _complete(bytes(received)):
                    break
            nursery.cancel_scope.cancel()
    finally:
        await trio.aclose_forcefully(stream)
    return parse_response(bytes(received))


def _complete(data: bytes) -> bool:
    """True once ``data`` holds a whole final response with a ``Content-Length`` body."""
    head, sep, rest = data.partition(b"\r\n\r\n")
    while sep and re.match(rb"HTTP/1\.1 1\d\d", head):
        head, sep, rest = rest.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(rest) >= int(value.strip())
    return False
