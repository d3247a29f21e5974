"""Raw gRPC calls over HTTP/2 (``h2``), so a property can send frames no gRPC client would.

:func:`raw_call` sends request headers and the DATA bytes exactly as given (a broken
length prefix, the compressed flag without ``grpc-encoding``, a truncated message, two
messages for a unary method) on a fresh plaintext HTTP/2 connection, and returns what came
back: the ``grpc-status`` and ``grpc-message`` (from the trailers, or from a trailers-only
response), the response DATA, or the error code of a stream reset.

:func:`frame` builds one well-formed length-prefixed message (gRPC over HTTP/2, "Length-
Prefixed-Message": compressed flag, 4-byte big-endian length, payload).
"""

from __future__ import annotations

import struct
import urllib.parse
from dataclasses import dataclass

import h2.config
import h2.connection
import h2.events
import trio


@dataclass(frozen=True)
class RawReply:
    """The outcome of one raw call.

    Attributes:
        status: ``grpc-status`` as an int, or None when there was none.
        message: ``grpc-message``, percent-decoded.
        data: the response DATA bytes (framed messages).
        reset: the HTTP/2 error code when the server reset the stream, else None.
        closed: True when the connection ended before the stream did.
    """

    status: int | None
    message: str
    data: bytes
    reset: int | None
    closed: bool


def frame(payload: bytes, *, compressed: bool = False) -> bytes:
    """One gRPC length-prefixed message carrying ``payload``."""
    return struct.pack(">?I", compressed, len(payload)) + payload


async def raw_call(
    host: str,
    port: int,
    path: str,
    data: bytes,
    *,
    extra_headers: list[tuple[str, str]] | None = None,
) -> RawReply:
    """POST ``data`` as the DATA of one gRPC call to ``path`` (``/package.Service/Method``).

    Callers bound the call with a cancel scope.
    """
    stream = await trio.open_tcp_stream(host, port)
    conn = h2.connection.H2Connection(
        h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
    )
    conn.initiate_connection()
    stream_id = conn.get_next_available_stream_id()
    headers = [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", path),
        (":authority", f"{host}:{port}"),
        ("content-type", "application/grpc+proto"),
        ("te", "trailers"),
        *(extra_headers or []),
    ]
    conn.send_headers(stream_id, headers)
    # one DATA frame is at most the peer's max frame size (16 KiB by default): chunk it
    for start in range(0, max(len(data), 1), 16384):
        conn.send_data(stream_id, data[start : start + 16384])
    conn.end_stream(stream_id)
    status: int | None = None
    message = ""
    body = bytearray()
    reset: int | None = None
    closed = True
    async with stream:
        try:
            await stream.send_all(conn.data_to_send())
        except trio.BrokenResourceError:
            return RawReply(None, "", b"", None, True)
        done = False
        while not done:
            try:
                chunk = await stream.receive_some(65536)
            except trio.BrokenResourceError:  # reset by the server
                break
            if not chunk:
                break
            for event in conn.receive_data(chunk):
                if isinstance(event, (h2.events.ResponseReceived, h2.events.TrailersReceived)):
                    fields = dict(event.headers)
                    if "grpc-status" in fields:
                        status = int(fields["grpc-status"])
                        message = urllib.parse.unquote(fields.get("grpc-message", ""))
                elif isinstance(event, h2.events.DataReceived):
                    body += event.data
                    conn.acknowledge_received_data(event.flow_controlled_length, stream_id)
                elif isinstance(event, h2.events.StreamReset):
                    reset = int(event.error_code)
                    done = True
                elif isinstance(event, h2.events.StreamEnded):
                    done = True
                elif isinstance(event, h2.events.ConnectionTerminated):
                    done = True
            pending = conn.data_to_send()
            if pending:
                try:
                    await stream.send_all(pending)
                except trio.BrokenResourceError:
                    break
        else:
            closed = False
    return RawReply(status, message, bytes(body), reset, closed)
