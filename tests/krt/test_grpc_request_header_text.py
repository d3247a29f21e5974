"""The unary server turns received header fields into text itself (krt.grpc.unary_server).

h2's per-field ``header_encoding`` pass is off on the server side; the connection decodes
each field once and remembers it. The events purerpc and the servicers see must be exactly
what h2 with ``header_encoding="utf-8"`` (purerpc's setting) produced.
"""

from __future__ import annotations

from typing import Any

import h2.config
import h2.connection
import h2.events
import hpack
import pytest
from purerpc.grpclib.config import GRPCConfiguration
from purerpc.grpclib.connection import GRPCConnection
from purerpc.grpclib.events import RequestReceived

from krt.grpc import unary_server
from krt.grpc.unary_server import _ServerConnection

REQUEST = [
    (":method", "POST"),
    (":scheme", "http"),
    (":path", "/executor.v1.Runtime/Status"),
    (":authority", "localhost"),
    ("content-type", "application/grpc+proto"),
    ("te", "trailers"),
    ("x-run", "r\u00e9sum\u00e9"),  # non-ASCII metadata: UTF-8 on the wire
]


def _client() -> Any:
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    client.initiate_connection()
    return client


def _send(client: Any, headers: list[Any]) -> bytes:
    stream_id = client.get_next_available_stream_id()
    client.send_headers(stream_id, headers)
    client.send_data(stream_id, b"\0\0\0\0\0", end_stream=True)
    return bytes(client.data_to_send())


def _requests(events: list[Any]) -> list[Any]:
    return [e for e in events if isinstance(e, RequestReceived)]


def _server(kind: type[Any]) -> Any:
    server = kind(GRPCConfiguration(client_side=False))
    server.initiate_connection()
    server.data_to_send()
    return server


def test_requests_read_as_h2s_own_decoding_reads_them() -> None:
    client = _client()
    ours, h2s = _server(_ServerConnection), _server(GRPCConnection)
    preface = bytes(client.data_to_send())
    ours.receive_data(preface)
    h2s.receive_data(preface)
    blocks = [
        REQUEST,
        REQUEST,  # the second time from memory
        [*REQUEST, ("authorization", "Bearer abc")],
        [*REQUEST, ("cookie", "a=1"), ("cookie", "b=2")],  # crumbs joined, as h2 joins them
    ]
    for headers in blocks:
        wire = _send(client, headers)
        (mine,) = _requests(ours.receive_data(wire))
        (theirs,) = _requests(h2s.receive_data(wire))
        assert vars(mine) == vars(theirs)
        assert mine.custom_metadata == theirs.custom_metadata
    remembered = {name for name, _ in ours._fields}
    assert b"x-run" in remembered
    assert not remembered & {b"authorization", b"cookie"}  # credentials are not kept


def test_a_never_indexed_field_stays_never_indexed() -> None:
    conn = _ServerConnection(GRPCConfiguration(client_side=False))
    secret = hpack.NeverIndexedHeaderTuple(b"authorization", b"Bearer abc")
    plain = hpack.HeaderTuple(b"authorization", b"Bearer abc")
    text = conn._text([secret, plain])
    assert text == [("authorization", "Bearer abc")] * 2
    assert type(text[0]) is hpack.NeverIndexedHeaderTuple
    assert type(text[1]) is hpack.HeaderTuple
    assert conn._fields == {}


def test_the_memory_of_fields_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(unary_server, "MAX_REMEMBERED_FIELDS", 4)
    conn = _ServerConnection(GRPCConfiguration(client_side=False))
    for index in range(10):
        field = hpack.HeaderTuple(b"x-n", str(index).encode())
        assert conn._text([field]) == [("x-n", str(index))]
        assert len(conn._fields) <= 4


def test_a_field_that_is_not_utf8_fails_as_in_h2() -> None:
    client = _client()
    ours, h2s = _server(_ServerConnection), _server(GRPCConnection)
    preface = bytes(client.data_to_send())
    ours.receive_data(preface)
    h2s.receive_data(preface)
    wire = _send(client, [*REQUEST[:-1], (b"x-raw", b"\xff\xfe")])
    with pytest.raises(UnicodeDecodeError):
        h2s.receive_data(wire)
    with pytest.raises(UnicodeDecodeError):
        ours.receive_data(wire)
