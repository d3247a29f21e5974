"""krt.grpc.event_translation: received header blocks decoded once per block, as h2 would."""

from __future__ import annotations

from typing import Any

import h2.config
import h2.connection
import hpack
import pytest
from purerpc.grpclib.config import GRPCConfiguration
from purerpc.grpclib.connection import GRPCConnection
from purerpc.grpclib.events import RequestReceived

from krt.grpc.event_translation import LeanGrpcConnection

HEADERS = [
    (":method", "POST"),
    (":scheme", "http"),
    (":path", "/executor.v1.Runtime/Status"),
    (":authority", "h:1"),
    ("te", "trailers"),
    ("content-type", "application/grpc+proto"),
]
MESSAGE = b"\0\0\0\0\x02hi"


class Peer:
    """A plain h2 client (no outbound normalization: it sends exactly what it is given)."""

    def __init__(self) -> None:
        config = h2.config.H2Configuration(
            client_side=True, validate_outbound_headers=False, normalize_outbound_headers=False
        )
        self.h2 = h2.connection.H2Connection(config)
        self.h2.initiate_connection()

    def request(self, headers: list[Any]) -> bytes:
        stream_id = self.h2.get_next_available_stream_id()
        self.h2.send_headers(stream_id, headers)
        self.h2.send_data(stream_id, MESSAGE, end_stream=True)
        return bytes(self.h2.data_to_send())


def requests(cls: type, *blocks: list[Any]) -> tuple[Any, list[Any]]:
    """Feed request header blocks to a server connection of ``cls``; its RequestReceived."""
    conn = cls(GRPCConfiguration(client_side=False))
    conn.initiate_connection()
    peer = Peer()
    conn.receive_data(peer.h2.data_to_send())
    received = []
    for headers in blocks:
        received += [
            e for e in conn.receive_data(peer.request(headers)) if type(e) is RequestReceived
        ]
    return conn, received


def test_fields_reach_purerpc_as_text_like_h2_decoded_them() -> None:
    block = [*HEADERS, ("x-run", "caf\u00e9"), ("cookie", "a=1"), ("x-b", "2"), ("cookie", "b=2")]
    _, ours = requests(LeanGrpcConnection, block)
    _, purerpcs = requests(GRPCConnection, block)
    assert ours[0].custom_metadata == purerpcs[0].custom_metadata
    # h2's inbound normalization: split cookie fields joined into one, placed last
    assert ours[0].custom_metadata == (("x-run", "caf\u00e9"), ("x-b", "2"), ("cookie", "a=1; b=2"))
    assert all(type(value) is str for _, value in ours[0].custom_metadata)
    assert ours[0].service_name == "executor.v1.Runtime"
    assert ours[0].method_name == "Status"


def test_a_field_that_is_not_utf8_fails_as_with_h2() -> None:
    block = [*HEADERS, (b"x-bad", b"\xff\xfe")]
    with pytest.raises(UnicodeDecodeError):
        requests(GRPCConnection, block)
    with pytest.raises(UnicodeDecodeError):
        requests(LeanGrpcConnection, block)


def test_a_repeated_block_is_decoded_once() -> None:
    conn, received = requests(LeanGrpcConnection, HEADERS, HEADERS, HEADERS)
    assert len(received) == 3
    assert len(conn._texts) == 1
    (fields,) = conn._texts.values()
    assert fields == HEADERS
    assert all(type(name) is str and type(value) is str for name, value in fields)


def test_a_block_with_a_never_indexed_field_is_never_remembered() -> None:
    secret = [*HEADERS, hpack.NeverIndexedHeaderTuple("authorization", "Bearer t0ken")]
    conn, received = requests(LeanGrpcConnection, secret, secret)
    assert [event.custom_metadata for event in received] == [
        (("authorization", "Bearer t0ken"),),
        (("authorization", "Bearer t0ken"),),
    ]
    assert conn._texts == {}
    assert "t0ken" not in repr(conn._texts)
