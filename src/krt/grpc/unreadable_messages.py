"""A received message that cannot be read fails its own call, never its connection.

purerpc 0.8.0 reads a message that does not arrive as one plain DATA frame through its
per-stream :class:`~purerpc.grpclib.buffers.MessageReadBuffer` (ours:
:class:`krt.grpc.read_buffers.ReadBuffer`), which raises from inside the connection's
``receive_data`` when a message declares a length over the connection's limit
(``MessageTooLargeError``, raised as soon as the 5-byte prefix is in), is flagged compressed
with no or an unsupported ``grpc-encoding`` (``UnsupportedMessageEncodingError``), does not
decompress (``zlib.error``) or inflates past the limit (``DecompressedTooLargeError``).
Raised there, the error broke the whole HTTP/2 connection: every other call on it failed.

gRPC fails only that call (doc/statuscodes.md of grpc/grpc; grpc-go's ``recvMsg`` and
``checkRecvPayload`` word the messages, and grpcio clients show them):

* "Sent or received message was larger than configured limit": RESOURCE_EXHAUSTED,
  ``grpc: received message larger than max (<length> vs. <limit>)`` (or ``... after
  decompression larger than max <limit>``);
* the compressed flag with no (or ``identity``) ``grpc-encoding``, or data that does not
  decompress although the algorithm is supported: INTERNAL;
* "Compression mechanism used by client not supported at server": UNIMPLEMENTED, with a
  ``grpc-accept-encoding`` field naming what the server does decompress (grpc.io,
  "Compression").

:func:`receive_buffered_data` wraps purerpc's buffered DATA handling (used by both our
connection classes, and only off the one-frame fast path of
:mod:`krt.grpc.event_translation`, so an ordinary call pays nothing for it): such an error
becomes a :class:`MessageUnreadable` event for that stream and the stream's buffer is
dropped, so nothing more of its body is kept. Bytes that arrive later for a stream without a
buffer are handed back to the connection's flow-control window and dropped (purerpc reset
the stream and then raised ``KeyError``, again breaking the connection).

A server answers the event with :func:`refuse_message`: the status as trailers (a
Trailers-Only response if nothing was sent yet), then ``RST_STREAM(NO_ERROR)`` if the
request body is still arriving (RFC 9113 section 8.1: a server that answered before the
request ended asks the client to stop sending; grpc-go does the same), and it gives the
stream's unread bytes back to the connection window. HTTP/2 flow control bounds what can
arrive before the reset reaches the client: at most the stream's window (purerpc's
``INITIAL_WINDOW_SIZE``, twice the message limit), and h2 drops frames that arrive after the
reset while crediting the connection window; a declared 4 GiB message is never buffered.
"""

from __future__ import annotations

import contextlib
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import h2.errors
import h2.exceptions
from purerpc.grpclib.exceptions import (
    GRPCError,
    MessageTooLargeError,
    UnsupportedMessageEncodingError,
)
from purerpc.grpclib.status import Status, StatusCode

from krt.grpc.read_buffers import DecompressedTooLargeError
from krt.grpc.status_messages import status_fields

__all__ = [
    "ACCEPTED_ENCODINGS",
    "MessageUnreadable",
    "receive_buffered_data",
    "refuse_message",
    "unreadable_status",
]

#: ``grpc-encoding`` values our read buffers decompress (:mod:`krt.grpc.read_buffers`);
#: sent as ``grpc-accept-encoding`` with UNIMPLEMENTED.
ACCEPTED_ENCODINGS: Final = ("identity", "gzip", "deflate")

#: purerpc's errors for a message it cannot read (see the module docstring).
_UNREADABLE_ERRORS: Final = (MessageTooLargeError, UnsupportedMessageEncodingError, zlib.error)
#: attribute of a purerpc read buffer: flow-controlled bytes it took and has not delivered.
_UNDELIVERED: Final = "_krt_undelivered_bytes"
#: the response headers of a Trailers-Only answer (as ``start_response(..., "+proto")``).
_RESPONSE_HEADERS: Final = ((":status", "200"), ("content-type", "application/grpc+proto"))


@dataclass(frozen=True, slots=True)
class MessageUnreadable:
    """A message of ``stream_id`` that cannot be read; the stream's buffer is gone.

    Attributes:
        stream_id: the HTTP/2 stream (the call).
        status: the call's outcome: RESOURCE_EXHAUSTED, INTERNAL or UNIMPLEMENTED.
        flow_controlled_length: bytes of the stream's DATA that were received and not
            acknowledged; whoever handles the event acknowledges them (as for
            ``MessageReceived``), after resetting the stream if it resets it.
        accept_encoding: the ``grpc-accept-encoding`` value to send with an UNIMPLEMENTED
            status (comma-separated), else ``None``.
    """

    stream_id: int
    status: Status
    flow_controlled_length: int
    accept_encoding: str | None = None


def unreadable_status(
    error: BaseException,
    *,
    encoding: str | None,
    message_length: int | None,
    max_message_length: int,
) -> Status:
    """The gRPC status of a call whose received message purerpc could not read.

    Args:
        error: what purerpc's read buffer raised (one of the errors of the module docstring).
        encoding: the stream's ``grpc-encoding`` (``None`` when absent).
        message_length: the length the message's prefix declared (bytes), if known.
        max_message_length: the connection's limit on one message (bytes).

    Returns:
        RESOURCE_EXHAUSTED for a message over the limit, UNIMPLEMENTED for an encoding this
        side cannot decompress, INTERNAL for the compressed flag without an encoding or data
        that does not decompress.
    """
    if isinstance(error, DecompressedTooLargeError):
        return Status(
            StatusCode.RESOURCE_EXHAUSTED,
            f"grpc: received message after decompression larger than max {error.limit}",
        )
    if isinstance(error, MessageTooLargeError):
        declared = "?" if message_length is None else str(message_length)
        return Status(
            StatusCode.RESOURCE_EXHAUSTED,
            f"grpc: received message larger than max ({declared} vs. {max_message_length})",
        )
    if encoding is None or encoding == "identity":
        return Status(
            StatusCode.INTERNAL, "grpc: compressed flag set with identity or empty encoding"
        )
    if isinstance(error, UnsupportedMessageEncodingError | ImportError):
        return Status(
            StatusCode.UNIMPLEMENTED,
            f'grpc: Decompressor is not installed for grpc-encoding "{encoding}"',
        )
    return Status(StatusCode.INTERNAL, f"grpc: failed to decompress the received message: {error}")


def receive_buffered_data(
    connection: Any, event: Any, receive: Callable[[Any, Any], list[Any]]
) -> list[Any]:
    """purerpc's handling of a buffered DATA frame, an unreadable message failing its stream.

    Args:
        connection: a purerpc :class:`~purerpc.grpclib.connection.GRPCConnection` (its
            ``message_read_buffers``, ``config`` and ``h2_connection``).
        event: the :class:`h2.events.DataReceived` to handle.
        receive: purerpc's handler, ``GRPCConnection._data_received`` (unbound).

    Returns:
        purerpc's events (``MessageReceived``); ``[MessageUnreadable]`` when a message of the
        stream cannot be read (its buffer is dropped); ``[]`` for a stream without a buffer
        (its bytes are acknowledged here: nobody reads them).

    Raises:
        Whatever else purerpc raises (unchanged).
    """
    stream_id = event.stream_id
    buffer = connection.message_read_buffers.get(stream_id)
    if buffer is None:
        if event.flow_controlled_length:
            connection.h2_connection.acknowledge_received_data(
                event.flow_controlled_length, stream_id
            )
        return []
    undelivered = getattr(buffer, _UNDELIVERED, 0) + event.flow_controlled_length
    try:
        events: list[Any] = receive(connection, event)
    except _UNREADABLE_ERRORS as error:
        del connection.message_read_buffers[stream_id]
        status = unreadable_status(
            error,
            encoding=getattr(buffer, "_message_encoding", None),
            message_length=getattr(buffer, "_message_length", None),
            max_message_length=connection.config.max_message_length,
        )
        accept = (
            ",".join(ACCEPTED_ENCODINGS) if status.status_code is StatusCode.UNIMPLEMENTED else None
        )
        return [MessageUnreadable(stream_id, status, undelivered, accept)]
    for delivered in events:
        undelivered -= delivered.flow_controlled_length
    setattr(buffer, _UNDELIVERED, undelivered)
    return events


def refuse_message(h2_connection: Any, event: MessageUnreadable, *, headers_sent: bool) -> None:
    """End the call of ``event`` with its status; stop its request body; free its window.

    Queues on ``h2_connection`` (the caller sends what it queued): the status as trailers,
    with the response headers first unless ``headers_sent`` (one Trailers-Only block); then
    ``RST_STREAM(NO_ERROR)`` when the client has not ended its request; then the stream's
    unread bytes are acknowledged (after the reset, so only the connection window grows).
    A stream the peer already reset or closed gets no answer, only the acknowledgement.

    Args:
        h2_connection: the server's :class:`h2.connection.H2Connection`.
        event: the unreadable message.
        headers_sent: the call's response headers went out already.
    """
    stream_id = event.stream_id
    fields = status_fields(event.status)
    if event.accept_encoding is not None:
        fields.append(("grpc-accept-encoding", event.accept_encoding))
    with contextlib.suppress(GRPCError, h2.exceptions.ProtocolError, TypeError):
        h2_connection.send_headers(
            stream_id, fields if headers_sent else [*_RESPONSE_HEADERS, *fields], end_stream=True
        )
    stream = h2_connection.streams.get(stream_id)
    if stream is not None and not stream.closed:
        with contextlib.suppress(h2.exceptions.ProtocolError):
            h2_connection.reset_stream(stream_id, h2.errors.ErrorCodes.NO_ERROR)
    if event.flow_controlled_length:
        h2_connection.acknowledge_received_data(event.flow_controlled_length, stream_id)
