"""purerpc's sans-IO gRPC connection with cheaper event translation, for both our loops.

:class:`purerpc.grpclib.connection.GRPCConnection` turns h2's events into gRPC events. Two
of its per-call costs are pure overhead for unary calls and are removed here, with the same
events and errors as a result:

* **Dispatch by type.** purerpc finds each h2 event's handler by walking a chain of up to
  sixteen ``isinstance`` tests (a DATA frame is the fifth, the end of a stream the ninth).
  :meth:`LeanGrpcConnection.receive_data` looks the handler up by the event's type, once per
  type, with the chain's answer (first matching class in purerpc's order; events purerpc
  does not translate are dropped as it drops them).
* **One-frame messages.** A unary request or response message nearly always arrives as one
  DATA frame holding exactly one uncompressed, length-prefixed message (gRPC over HTTP/2,
  "Length-Prefixed-Message"). purerpc copies it through its byte deque and parser (a
  buffer, two joins and a struct unpack per message). Such a frame becomes its
  ``MessageReceived`` directly; anything else (a message split over frames, several
  messages in one frame, a compressed or oversized one, a stream that already has bytes in
  purerpc's buffer) goes through purerpc's buffer as before, so its framing and limits
  (``MessageTooLargeError``, compression, ``ProtocolError``) are unchanged, except that a
  message purerpc cannot read (over the limit, or not decompressible) fails only its stream
  (:mod:`krt.grpc.unreadable_messages`: a ``MessageUnreadable`` event) instead of raising
  out of ``receive_data`` and breaking the connection, and compressed messages are
  decompressed as gRPC peers compress them, bounded (:mod:`krt.grpc.read_buffers`).

* **Repeated header blocks parsed once.** Every call of a connection sends the same request
  headers (per method), and every answer the same response headers and OK trailers. purerpc
  parses each block into an ordered dict and then into its event on every call. A block
  made only of the fixed gRPC fields (no caller metadata, credentials, ``grpc-timeout`` or
  ``grpc-message``, whose values change per call) is parsed once; later calls get a copy of
  the remembered event with their stream ID. Blocks that purerpc rejects are never
  remembered, so they fail on every call as before.

* **Header text decoded once per repeated block.** h2 hands each received header block
  over as ``str`` by running it through two generators per block (cookie joining, then
  UTF-8 decoding, field by field) on every call. The connection asks h2 for the raw
  ``bytes`` fields instead (``header_encoding=None``, ``normalize_inbound_headers=False``:
  documented h2 settings) and :meth:`LeanGrpcConnection.receive_data` does the same two
  steps (h2's own cookie joining, then UTF-8), remembering the result per block: a block
  repeats on every call (the request headers per method, the response headers, the OK
  trailers). A block with a never-indexed field (a credential, a status message) is
  decoded every time and never remembered.

Callgrind, one process calling a Runtime Server over loopback (issue 6): about 2-3% of the
instructions per unary call on each end for the first two, ~2% more for the third; the
fourth ~60,000 instructions per call (both ends) of ~1.21 million, about 5%. Every
connection of ours also gets :mod:`krt.grpc.h2_fast_paths` (installed at import here).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import h2.events
import h2.utilities
from purerpc.grpclib.config import GRPCConfiguration
from purerpc.grpclib.connection import GRPCConnection
from purerpc.grpclib.events import (
    MessageReceived,
    RequestReceived,
    ResponseEnded,
)
from purerpc.grpclib.exceptions import ProtocolError
from purerpc.grpclib.headers import HeaderDict

from krt.grpc import h2_fast_paths
from krt.grpc.read_buffers import ReadBuffer
from krt.grpc.unreadable_messages import receive_buffered_data

__all__ = ["LeanGrpcConnection"]

h2_fast_paths.install()

#: purerpc's ``receive_data`` chain, in its order: h2 event class -> handler name.
_HANDLERS: Final = (
    (h2.events.RequestReceived, "_request_received"),
    (h2.events.ResponseReceived, "_response_received"),
    (h2.events.TrailersReceived, "_trailers_received"),
    (h2.events.InformationalResponseReceived, "_informational_response_received"),
    (h2.events.DataReceived, "_data_received"),
    (h2.events.WindowUpdated, "_window_updated"),
    (h2.events.RemoteSettingsChanged, "_remote_settings_changed"),
    (h2.events.PingAcknowledged, "_ping_acknowledged"),
    (h2.events.StreamEnded, "_stream_ended"),
    (h2.events.StreamReset, "_stream_reset"),
    (h2.events.PushedStreamReceived, "_push_stream_received"),
    (h2.events.SettingsAcknowledged, "_settings_acknowledged"),
    (h2.events.PriorityUpdated, "_priority_updated"),
    (h2.events.ConnectionTerminated, "_connection_terminated"),
    (h2.events.AlternativeServiceAvailable, "_alternative_service_available"),
    (h2.events.UnknownFrameReceived, "_unknown_frame_received"),
)

#: Streams remembered as "bytes went to purerpc's buffer" before the set is pruned to the
#: streams that still have a buffer (a call abandoned mid-message leaves its entry behind).
_MAX_BUFFERED_STREAMS: Final = 1024


#: Header names of blocks whose parse may be remembered: gRPC's fixed fields, whose values
#: repeat from call to call (never caller metadata, credentials, ``grpc-timeout`` or
#: ``grpc-message``).
_REPEATING_FIELDS: Final = frozenset(
    {
        ":method",
        ":scheme",
        ":path",
        ":authority",
        ":status",
        "te",
        "content-type",
        "user-agent",
        "grpc-encoding",
        "grpc-accept-encoding",
        "grpc-message-type",
        "grpc-status",
    }
)
#: Parsed header blocks remembered per connection (a unary connection repeats a few).
MAX_REMEMBERED_BLOCKS: Final = 32
#: h2 events that carry a received header block (``headers``).
_HEADER_EVENTS: Final = frozenset(
    {
        h2.events.RequestReceived,
        h2.events.ResponseReceived,
        h2.events.TrailersReceived,
        h2.events.InformationalResponseReceived,
        h2.events.PushedStreamReceived,
    }
)


def _text_fields(raw: list[Any]) -> list[Any]:
    """What h2 makes of a raw received block: cookie fields joined, names and values UTF-8.

    Raises:
        UnicodeDecodeError: a name or value is not UTF-8 (as from h2's decoding).
    """
    return [
        field.__class__(field[0].decode("utf-8"), field[1].decode("utf-8"))
        for field in h2.utilities.normalize_inbound_headers(raw, None)
    ]


def _repeating(key: tuple[Any, ...]) -> bool:
    """Whether a header block (``(name, value)`` pairs) has only fields that repeat."""
    return all(field[0] in _REPEATING_FIELDS for field in key)


def _copy_with_stream(template: Any, stream_id: int) -> Any:
    """A shallow copy of the purerpc event ``template`` for stream ``stream_id``."""
    event = object.__new__(type(template))
    event.__dict__.update(template.__dict__)
    event.stream_id = stream_id
    return event


def _handler_name(event_type: type) -> str | None:
    """The purerpc handler of ``event_type``: the first class of its chain that matches."""
    for cls, name in _HANDLERS:
        if issubclass(event_type, cls):
            return name
    return None


def _ignore(connection: Any, event: Any) -> list[Any]:
    return []


class LeanGrpcConnection(GRPCConnection):  # type: ignore[misc]
    """purerpc's :class:`GRPCConnection` with type dispatch and one-frame messages.

    Subclasses override purerpc's ``_<event>`` handlers as before; the handler of each event
    type is looked up on the class the first time that type arrives.

    Args:
        config: purerpc's configuration (``client_side``, ``max_message_length`` in bytes).
    """

    def __init__(self, config: GRPCConfiguration) -> None:
        super().__init__(config)
        h2_config = self.h2_connection.config
        h2_config.header_encoding = None  # raw fields: _text_of decodes them once per block
        h2_config.normalize_inbound_headers = False  # cookie joining: in _text_of too
        h2_fast_paths.use_plain_configuration(self.h2_connection)
        self._texts: dict[tuple[Any, ...], list[Any]] = {}
        self._handlers: dict[type, Any] = {}
        #: streams whose bytes went through purerpc's buffer (their later frames must too)
        self._buffered_streams: set[int] = set()
        self._max_message_length: int = config.max_message_length
        self._parsed: dict[tuple[Any, ...], tuple[Any, ...]] = {}

    def _text_of(self, raw: list[Any]) -> list[Any]:
        """The ``str`` fields of the raw received block ``raw`` (see :func:`_text_fields`).

        A block whose fields are all indexable is remembered: the same raw fields give the
        same ``str`` fields (a fresh list each time: purerpc's parsers consume it).
        """
        key = tuple(raw)
        known = self._texts.get(key)
        if known is not None:
            return list(known)
        fields = _text_fields(raw)
        if all(field.indexable for field in raw):
            if len(self._texts) >= MAX_REMEMBERED_BLOCKS:
                self._texts.clear()
            self._texts[key] = list(fields)
        return fields

    def _remember(self, key: tuple[Any, ...], events: tuple[Any, ...]) -> None:
        if len(self._parsed) >= MAX_REMEMBERED_BLOCKS:
            self._parsed.clear()
        self._parsed[key] = events

    def _parse_once(
        self, key: tuple[Any, ...], stream_id: int, parse: Callable[[int, HeaderDict], Any]
    ) -> Any:
        """``parse(stream_id, headers)`` of the block ``key`` (a kind, then its fields).

        A block of repeating fields only is parsed once; later calls get a copy of that
        event for their own stream.
        """
        known = self._parsed.get(key)
        if known is not None:
            return _copy_with_stream(known[0], stream_id)
        parsed = parse(stream_id, HeaderDict(key[1:]))
        if _repeating(key[1:]):
            self._remember(key, (_copy_with_stream(parsed, 0),))
        return parsed

    def receive_data(self, data: bytes | bytearray) -> list[Any]:
        """Feed bytes from the peer to h2; return the gRPC events (purerpc's, same order).

        A message that cannot be read is a
        :class:`~krt.grpc.unreadable_messages.MessageUnreadable` event of its stream.

        Raises:
            Whatever h2 or purerpc's handlers raise for what the peer sent (as purerpc),
            except for a message purerpc cannot read (see above).
        """
        events: list[Any] = []
        handlers = self._handlers
        for event in self.h2_connection.receive_data(data):
            if type(event) in _HEADER_EVENTS:
                event.headers = self._text_of(event.headers)
            handler = handlers.get(type(event))
            if handler is None:
                # the class's function, not a bound method: no reference cycle through self
                name = _handler_name(type(event))
                handler = _ignore if name is None else getattr(type(self), name)
                handlers[type(event)] = handler
            events.extend(handler(self, event))
        return events

    def _request_received(self, event: h2.events.RequestReceived) -> list[Any]:
        """purerpc's request parse (same event and errors), remembered per repeated block."""
        if event.stream_ended:
            raise ProtocolError("Stream ended before data was sent")
        request = self._parse_once(
            ("request", *event.headers),
            event.stream_id,
            RequestReceived.parse_from_stream_id_and_headers_destructive,
        )
        self.message_read_buffers[event.stream_id] = ReadBuffer(
            request.message_encoding, self._max_message_length
        )
        return [request]

    def _response_received(self, event: h2.events.ResponseReceived) -> list[Any]:
        """purerpc's response-headers parse (same events and errors), remembered likewise."""
        key = ("response", event.stream_ended, *event.headers)
        known = self._parsed.get(key)
        if known is None:
            parsed = super()._response_received(event)
            if event.stream_ended and parsed[0].custom_metadata:
                # Trailers-Only (gRPC over HTTP/2): its custom metadata is the call's
                # trailers; purerpc's destructive parse left it all on the response event
                parsed[1].custom_metadata = parsed[0].custom_metadata + tuple(
                    parsed[1].custom_metadata
                )
                parsed[0].custom_metadata = ()
            if not event.stream_ended:  # purerpc made its own buffer: ours decompresses right
                self.message_read_buffers[event.stream_id] = ReadBuffer(
                    parsed[0].message_encoding, self._max_message_length
                )
            if _repeating(key[2:]):
                self._remember(key, tuple(_copy_with_stream(item, 0) for item in parsed))
            return parsed  # type: ignore[no-any-return]
        stream_id = event.stream_id
        if not event.stream_ended:
            self.message_read_buffers[stream_id] = ReadBuffer(
                known[0].message_encoding, self._max_message_length
            )
        return [_copy_with_stream(item, stream_id) for item in known]

    def _trailers_received(self, event: h2.events.TrailersReceived) -> list[Any]:
        """purerpc's trailers parse (same event and errors), remembered likewise."""
        return [
            self._parse_once(
                ("trailers", *event.headers),
                event.stream_id,
                ResponseEnded.parse_from_stream_id_and_headers_destructive,
            )
        ]

    def _data_received(self, event: h2.events.DataReceived) -> list[Any]:
        stream_id = event.stream_id
        data = event.data
        if (
            len(data) >= 5
            and data[0] == 0
            and stream_id in self.message_read_buffers
            and stream_id not in self._buffered_streams
        ):
            length = int.from_bytes(data[1:5], "big")
            if length + 5 == len(data) and length <= self._max_message_length:
                return [MessageReceived(stream_id, data[5:], event.flow_controlled_length)]
        if data and stream_id in self.message_read_buffers:
            if len(self._buffered_streams) >= _MAX_BUFFERED_STREAMS:
                self._buffered_streams.intersection_update(self.message_read_buffers)
            self._buffered_streams.add(stream_id)
        # purerpc's buffer; a message it cannot read fails only its stream (never here for
        # a one-frame message: the fast path above checked its flag and length)
        return receive_buffered_data(self, event, GRPCConnection._data_received)

    def _stream_ended(self, event: h2.events.StreamEnded) -> list[Any]:
        self._buffered_streams.discard(event.stream_id)
        return super()._stream_ended(event)  # type: ignore[no-any-return]

    def forget_stream(self, stream_id: int) -> None:
        """Drop what is kept for ``stream_id`` (its message buffer), e.g. after a reset."""
        self.message_read_buffers.pop(stream_id, None)
        self._buffered_streams.discard(stream_id)
