"""krt.grpc.h2_fast_paths: h2's per-frame helpers replaced, with the same results."""

from __future__ import annotations

import enum
from typing import Any

import h2.config
import h2.connection
import h2.exceptions
import h2.stream
import hyperframe.flags
import hyperframe.frame
import pytest
from purerpc.grpclib.config import GRPCConfiguration

from krt.grpc import h2_fast_paths
from krt.grpc.client import _Connection, _trust_responses
from krt.grpc.closed_streams import handle_closed_streams
from krt.grpc.h2_fast_paths import (
    FrameFlags,
    PlainH2Configuration,
    StreamIDParity,
    use_plain_configuration,
)
from krt.grpc.hpack_encoding import LiteralHpackEncoder, install_decoder
from krt.grpc.unary_server import _RESPONSE_HEADERS, _ServerConnection

REQUEST = [
    (":method", "POST"),
    (":scheme", "http"),
    (":path", "/executor.v1.Runtime/Status"),
    (":authority", "h:1"),
    ("te", "trailers"),
    ("content-type", "application/grpc+proto"),
]


def test_all_replacements_are_installed_on_the_pinned_versions() -> None:
    # event_translation installs them at import; every connection of ours imports it
    assert h2_fast_paths.install() == ["flags", "enum-operations", "validation-flags"]
    assert hyperframe.frame.Flags is FrameFlags


@pytest.mark.parametrize(
    ("frame", "flags"),
    [
        (hyperframe.frame.HeadersFrame(1, data=b"x"), ["END_STREAM", "END_HEADERS"]),
        (hyperframe.frame.DataFrame(3, data=b"abc"), ["END_STREAM"]),
        (hyperframe.frame.SettingsFrame(0), ["ACK"]),
        (hyperframe.frame.PingFrame(0), []),
    ],
)
def test_frame_flags_serialize_and_parse_as_hyperframe(frame: Any, flags: list[str]) -> None:
    for flag in flags:
        frame.flags.add(flag)
    wire = frame.serialize()
    # the flags byte of the frame header, as the RFC defines each flag's bit
    expected = 0
    for name, bit in frame.defined_flags:
        if name in flags:
            expected |= bit
    assert wire[4] == expected
    parsed, length = hyperframe.frame.Frame.parse_frame_header(wire[:9])
    parsed.parse_body(memoryview(wire[9 : 9 + length]))
    assert isinstance(parsed.flags, FrameFlags)
    assert isinstance(parsed.flags, hyperframe.flags.Flags)
    assert set(parsed.flags) == set(flags)
    assert all(flag in parsed.flags for flag in flags)
    assert "PADDED" not in parsed.flags


def test_frame_flags_refuse_a_flag_the_frame_type_does_not_define() -> None:
    data = hyperframe.frame.DataFrame(1)
    with pytest.raises(ValueError, match="Unexpected flag: ACK"):
        data.flags.add("ACK")
    assert "ACK" not in data.flags
    settings = hyperframe.frame.SettingsFrame(0)
    settings.flags.add("ACK")  # valid there: the valid names are per frame type
    with pytest.raises(ValueError, match="Unexpected flag: END_STREAM"):
        settings.flags.add("END_STREAM")
    assert set(settings.flags) == {"ACK"}


def test_state_machine_enums_hash_by_identity_and_transitions_still_resolve() -> None:
    for cls in (
        h2.stream.StreamInputs,
        h2.connection.ConnectionState,
        h2.connection.ConnectionInputs,
    ):
        assert cls.__hash__ is object.__hash__
        assert issubclass(cls, enum.Enum)
    key = (h2.stream.StreamState.IDLE, h2.stream.StreamInputs.SEND_HEADERS)
    assert key in h2.stream._transitions
    machine = h2.connection.H2ConnectionStateMachine()
    machine.process_input(h2.connection.ConnectionInputs.SEND_HEADERS)
    assert machine.state is h2.connection.ConnectionState.CLIENT_OPEN
    # a transition h2's tables do not have is still refused as before
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    client.initiate_connection()
    client.send_headers(1, REQUEST, end_stream=True)
    with pytest.raises(h2.exceptions.ProtocolError, match="Invalid input"):
        client.send_data(1, b"data after the end of the stream")


def test_stream_id_parity_answers_as_the_enum() -> None:
    parity = h2.connection.AllowedStreamIDs
    assert isinstance(parity, StreamIDParity)
    assert parity(True) is parity.ODD
    assert parity(False) is parity.EVEN
    assert isinstance(parity.ODD, enum.IntEnum)
    assert int(parity.ODD) == 1
    assert int(parity.EVEN) == 0
    # a client may not open an even (server) stream: h2 still checks the parity
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    client.initiate_connection()
    with pytest.raises(h2.exceptions.ProtocolError, match="Invalid stream ID for peer"):
        client.send_headers(2, REQUEST)
    client.send_headers(1, REQUEST)
    assert 1 in client.streams


def _pair() -> tuple[Any, Any]:
    """Our client and server connections, preface exchanged (as client.py/unary_server.py)."""
    client = _Connection(GRPCConfiguration(client_side=True))
    client.h2_connection.encoder = LiteralHpackEncoder()
    install_decoder(client.h2_connection)
    _trust_responses(client.h2_connection)
    handle_closed_streams(client.h2_connection)
    server = _ServerConnection(GRPCConfiguration(client_side=False))
    server.h2_connection.encoder = LiteralHpackEncoder()
    install_decoder(server.h2_connection)
    server.h2_connection.config.validate_outbound_headers = False
    server.h2_connection.config.normalize_outbound_headers = False
    client.initiate_connection()
    server.initiate_connection()
    server.receive_data(client.data_to_send())
    client.receive_data(server.data_to_send())
    server.receive_data(client.data_to_send())
    client.data_to_send()
    return client, server


def test_our_connections_build_no_validation_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    client, server = _pair()
    for conn in (client, server):
        config = conn.h2_connection.config
        assert type(config) is PlainH2Configuration
        assert config.validate_inbound_headers is False
        assert config.normalize_inbound_headers is False
        assert config.validate_outbound_headers is False
        assert config.normalize_outbound_headers is False
    built: list[Any] = []
    original = h2.utilities.HeaderValidationFlags
    monkeypatch.setattr(
        h2.stream, "HeaderValidationFlags", lambda *a, **k: built.append(1) or original(*a, **k)
    )
    stream_id = client.get_next_available_stream_id()
    client.h2_connection.send_headers(stream_id, REQUEST)
    client.h2_connection.send_data(stream_id, b"\0\0\0\0\0", end_stream=True)
    events = server.receive_data(client.data_to_send())
    assert [type(event).__name__ for event in events] == [
        "RequestReceived",
        "MessageReceived",
        "RequestEnded",
    ]
    assert built == []


def test_other_connections_still_validate_headers() -> None:
    # e.g. hypercorn's: a default configuration keeps every h2 check
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    client.initiate_connection()
    with pytest.raises(h2.exceptions.ProtocolError):
        client.send_headers(1, [*REQUEST[:4], ("te", "gzip")])
    server = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
    server.initiate_connection()
    raw = h2.connection.H2Connection(
        h2.config.H2Configuration(
            client_side=True, validate_outbound_headers=False, normalize_outbound_headers=False
        )
    )
    raw.initiate_connection()
    raw.send_headers(1, [*REQUEST, ("Upper", "x")], end_stream=True)
    with pytest.raises(h2.exceptions.ProtocolError, match="uppercase"):
        server.receive_data(raw.data_to_send())


def test_plain_configuration_keeps_the_values() -> None:
    config = h2.config.H2Configuration(
        client_side=True, header_encoding="utf-8", validate_inbound_headers=False
    )
    conn = h2.connection.H2Connection(config)
    use_plain_configuration(conn)
    assert type(conn.config) is PlainH2Configuration
    assert isinstance(conn.config, h2.config.H2Configuration)
    assert conn.config.client_side is True
    assert conn.config.header_encoding == "utf-8"
    assert conn.config.validate_inbound_headers is False
    assert conn.config.validate_outbound_headers is True
    assert conn.config.normalize_inbound_headers is True


def test_a_unary_call_is_five_frames_and_window_updates_stay_rare() -> None:
    """Per call: HEADERS + DATA out, HEADERS + DATA + HEADERS back; acks in bulk (h2)."""
    client, server = _pair()
    calls = 3000
    payload = b"\0" + (40).to_bytes(4, "big") + b"r" * 40
    answer = b"\0" + (60).to_bytes(4, "big") + b"a" * 60
    sent = {"client": 0, "server": 0}
    updates = {"client": 0, "server": 0}

    def count(side: str, data: bytes) -> None:
        view = memoryview(data)
        while view:
            frame, length = hyperframe.frame.Frame.parse_frame_header(view[:9])
            if isinstance(frame, hyperframe.frame.WindowUpdateFrame):
                updates[side] += 1
            else:
                sent[side] += 1
            view = view[9 + length :]

    for _ in range(calls):
        stream_id = client.get_next_available_stream_id()
        client.h2_connection.send_headers(stream_id, REQUEST)
        client.h2_connection.send_data(stream_id, payload, end_stream=True)
        data = client.data_to_send()
        count("client", data)
        for event in server.receive_data(data):
            if type(event).__name__ == "MessageReceived":
                server.acknowledge_received_data(event.stream_id, event.flow_controlled_length)
        h2_server = server.h2_connection
        h2_server.send_headers(stream_id, _RESPONSE_HEADERS)
        h2_server.send_data(stream_id, answer)
        h2_server.send_headers(stream_id, (("grpc-status", "0"),), end_stream=True)
        data = server.data_to_send()
        count("server", data)
        events = client.receive_data(data)
        assert [type(event).__name__ for event in events] == [
            "ResponseReceived",
            "MessageReceived",
            "ResponseEnded",
        ]
        for event in events:
            if type(event).__name__ == "MessageReceived":
                client.acknowledge_received_data(event.stream_id, event.flow_controlled_length)
        client.forget_stream(stream_id)
        data = client.data_to_send()
        count("client", data)
        server.receive_data(data)
    assert sent == {"client": 2 * calls, "server": 3 * calls}
    # h2 acknowledges received data in bulk (once half a window is consumed), never per call
    assert updates["client"] <= calls // 100
    assert updates["server"] <= calls // 100
    # neither side ever waited for window: each still has at least half of it to send in
    assert client.h2_connection.outbound_flow_control_window >= 65535 // 2
    assert server.h2_connection.outbound_flow_control_window >= 65535 // 2
