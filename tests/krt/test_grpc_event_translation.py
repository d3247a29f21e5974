"""krt.grpc.event_translation: the same gRPC events as purerpc's connection, cheaper."""

from __future__ import annotations

from typing import Any

import h2.config
import h2.connection
import h2.settings
import pytest
from purerpc.grpclib.config import GRPCConfiguration
from purerpc.grpclib.connection import GRPCConnection
from purerpc.grpclib.events import MessageReceived, RequestReceived
from purerpc.grpclib.exceptions import (
    MessageTooLargeError,
    ProtocolError,
    UnsupportedMessageEncodingError,
)
from purerpc.grpclib.status import StatusCode

from krt.grpc.event_translation import LeanGrpcConnection
from krt.grpc.unreadable_messages import MessageUnreadable

MAX = 1024
HEADERS = [
    (":method", "POST"),
    (":scheme", "http"),
    (":path", "/executor.v1.Runtime/Status"),
    (":authority", "h:1"),
    ("te", "trailers"),
    ("content-type", "application/grpc+proto"),
]


def framed(payload: bytes, *, compressed: bool = False) -> bytes:
    return bytes([int(compressed)]) + len(payload).to_bytes(4, "big") + payload


class Peer:
    """A plain h2 client producing the bytes a server connection receives."""

    def __init__(self) -> None:
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.h2.initiate_connection()

    def request(self, chunks: list[bytes], headers: list[tuple[str, str]] = HEADERS) -> bytes:
        stream_id = self.h2.get_next_available_stream_id()
        self.h2.send_headers(stream_id, headers)
        for index, chunk in enumerate(chunks):
            self.h2.send_data(stream_id, chunk, end_stream=index == len(chunks) - 1)
        return bytes(self.h2.data_to_send())

    def preface(self) -> bytes:
        return bytes(self.h2.data_to_send())


def server(cls: type) -> Any:
    conn = cls(GRPCConfiguration(client_side=False, max_message_length=MAX))
    conn.initiate_connection()
    return conn


def described(events: list[Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(type(event).__name__, dict(vars(event))) for event in events]


def both(*requests: list[bytes], headers: list[tuple[str, str]] = HEADERS) -> tuple[Any, Any]:
    """Feed the same bytes to purerpc's connection and ours; return both event lists."""
    results = []
    for cls in (GRPCConnection, LeanGrpcConnection):
        peer = Peer()
        conn = server(cls)
        conn.receive_data(peer.preface())
        events = []
        for chunks in requests:
            events += conn.receive_data(peer.request(chunks, headers))
        results.append(described(events))
    return results[0], results[1]


@pytest.mark.parametrize(
    "chunks",
    [
        [framed(b"one frame")],
        [framed(b"")],  # an empty message (HealthRequest, ListRequest)
        [framed(b"split message")[:7], framed(b"split message")[7:]],
        [framed(b"a") + framed(b"b")],  # two messages in one frame
        [framed(b"x" * 100)[:3], framed(b"x" * 100)[3:]],  # the prefix itself split
    ],
)
def test_the_events_are_purerpcs(chunks: list[bytes]) -> None:
    expected, got = both(chunks, chunks)
    assert got == expected
    assert [name for name, _ in got].count("MessageReceived") >= 2


def test_a_frame_that_continues_a_buffered_message_is_never_read_as_a_message() -> None:
    """Once a stream's bytes went to purerpc's buffer, later frames follow them there, even
    a frame that on its own looks like a complete message."""
    inner = framed(b"B" * 9)
    payload = b"A" * 4 + inner
    whole = framed(payload)
    first, second = whole[: len(whole) - len(inner)], whole[len(whole) - len(inner) :]
    assert second == inner
    expected, got = both([first, second])
    assert got == expected
    messages = [fields["data"] for name, fields in got if name == "MessageReceived"]
    assert messages == [payload]


@pytest.mark.parametrize(
    ("chunks", "error", "status"),
    [
        ([framed(b"zz", compressed=True)], UnsupportedMessageEncodingError, StatusCode.INTERNAL),
        ([framed(b"x" * (MAX + 1))], MessageTooLargeError, StatusCode.RESOURCE_EXHAUSTED),
    ],
)
def test_an_unreadable_message_fails_its_stream_where_purerpc_fails_the_connection(
    chunks: list[bytes], error: type[Exception], status: StatusCode
) -> None:
    """purerpc raises out of ``receive_data`` (the whole connection); ours reports the
    request, then a MessageUnreadable of that stream with every byte of it to acknowledge,
    and forgets its buffer (krt.grpc.unreadable_messages)."""
    peer = Peer()
    conn = server(GRPCConnection)
    conn.receive_data(peer.preface())
    with pytest.raises(error):
        conn.receive_data(peer.request(chunks))
    peer = Peer()
    conn = server(LeanGrpcConnection)
    conn.receive_data(peer.preface())
    events = conn.receive_data(peer.request(chunks))
    assert [type(event) for event in events] == [RequestReceived, MessageUnreadable]
    unreadable = events[1]
    assert unreadable.stream_id == 1
    assert unreadable.status.status_code is status
    assert unreadable.flow_controlled_length == len(chunks[0])
    assert 1 not in conn.message_read_buffers


def test_a_repeated_request_block_is_parsed_once_into_equal_events() -> None:
    peer = Peer()
    conn = server(LeanGrpcConnection)
    conn.receive_data(peer.preface())
    first = conn.receive_data(peer.request([framed(b"1")]))
    second = conn.receive_data(peer.request([framed(b"2")]))
    requests = [e for e in first + second if isinstance(e, RequestReceived)]
    assert [r.stream_id for r in requests] == [1, 3]
    assert requests[0] is not requests[1]
    assert {k: v for k, v in vars(requests[0]).items() if k != "stream_id"} == {
        k: v for k, v in vars(requests[1]).items() if k != "stream_id"
    }
    assert requests[1].method_name == "Status"
    assert len(conn._parsed) == 1
    messages = [e.data for e in first + second if isinstance(e, MessageReceived)]
    assert messages == [b"1", b"2"]


def test_blocks_with_per_call_fields_are_parsed_every_time() -> None:
    """Caller metadata (a credential) and grpc-timeout are never remembered; each call's
    event carries its own values."""
    peer = Peer()
    conn = server(LeanGrpcConnection)
    conn.receive_data(peer.preface())
    seen = []
    for token, timeout in (("a", "5S"), ("b", "7S")):
        headers = [*HEADERS, ("authorization", f"Bearer {token}"), ("grpc-timeout", timeout)]
        events = conn.receive_data(peer.request([framed(b"")], headers))
        request = next(e for e in events if isinstance(e, RequestReceived))
        seen.append((request.custom_metadata, request.timeout.total_seconds()))
    assert seen == [
        ((("authorization", "Bearer a"),), 5.0),
        ((("authorization", "Bearer b"),), 7.0),
    ]
    assert conn._parsed == {}


def test_a_rejected_block_fails_every_time() -> None:
    bad = [*HEADERS[:-1], ("content-type", "text/plain")]
    peer = Peer()
    conn = server(LeanGrpcConnection)
    conn.receive_data(peer.preface())
    for _ in range(2):
        with pytest.raises(ProtocolError, match="Content type"):
            conn.receive_data(peer.request([framed(b"")], bad))
    assert conn._parsed == {}


def test_response_headers_and_trailers_are_purerpcs() -> None:
    """The client side: headers, message, OK trailers, then a Trailers-Only error, twice."""
    results = []
    for cls in (GRPCConnection, LeanGrpcConnection):
        client = cls(GRPCConfiguration(client_side=True, max_message_length=MAX))
        client.initiate_connection()
        srv = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
        srv.initiate_connection()
        client.receive_data(srv.data_to_send())
        srv.receive_data(client.data_to_send())
        events = []
        for _ in range(2):
            for answer in ("ok", "error"):
                stream_id = client.get_next_available_stream_id()
                client.start_request(
                    stream_id, "http", "executor.v1.Runtime", "Status", authority="h:1"
                )
                client.send_data(stream_id, framed(b"q"), end_stream=True)
                srv.receive_data(client.data_to_send())
                head = [(":status", "200"), ("content-type", "application/grpc+proto")]
                if answer == "ok":
                    srv.send_headers(stream_id, head)
                    srv.send_data(stream_id, framed(b"answer"))
                    srv.send_headers(stream_id, [("grpc-status", "0")], end_stream=True)
                else:
                    srv.send_headers(
                        stream_id,
                        [*head, ("grpc-status", "5"), ("grpc-message", f"x{stream_id} not found")],
                        end_stream=True,
                    )
                events += client.receive_data(srv.data_to_send())
        results.append(
            [
                (name, {k: (str(v) if k == "status" else v) for k, v in fields.items()})
                for name, fields in described(events)
            ]
        )
    assert results[1] == results[0]
    assert [name for name, _ in results[1]].count("ResponseEnded") == 4


def test_events_purerpc_does_not_translate_are_dropped_and_settings_become_window_updates() -> None:
    """A PING (h2 answers it itself) gives no gRPC event; a SETTINGS change gives purerpc's
    WindowUpdated(stream 0); both connections answer the PING the same way."""
    results = []
    for cls in (GRPCConnection, LeanGrpcConnection):
        peer = Peer()
        conn = server(cls)
        events = conn.receive_data(peer.preface())
        peer.h2.ping(b"12345678")
        peer.h2.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 1000})
        events += conn.receive_data(bytes(peer.h2.data_to_send()))
        results.append((described(events), conn.data_to_send()))
    assert results[1] == results[0]
    assert [name for name, _ in results[1][0]] == ["WindowUpdated", "WindowUpdated"]
