"""A WINDOW_UPDATE on a stream the connection closed and forgot is ignored (RFC 9113 6.9).

h2 3.x raised ``StreamClosedError`` (a connection error) for it once the closed stream was
cleaned up, and every call on the connection failed; ``tolerate_late_window_updates``
makes it ignore the frame, as h2 4.x does and as it already did before the cleanup.
"""

from __future__ import annotations

from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import pytest
from h2.connection import WindowUpdateFrame
from hyperframe.frame import PingFrame

from krt.grpc.closed_streams import tolerate_late_window_updates

REQUEST = [(":method", "POST"), (":scheme", "http"), (":authority", "x"), (":path", "/s/M")]


def _server_after_one_finished_call() -> Any:
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    server = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
    client.initiate_connection()
    server.initiate_connection()
    server.receive_data(client.data_to_send())
    client.receive_data(server.data_to_send())
    client.send_headers(1, REQUEST, end_stream=True)
    server.receive_data(client.data_to_send())
    server.send_headers(1, [(":status", "200")], end_stream=True)
    server.data_to_send()
    assert server.open_inbound_streams == 0  # (this also cleans the closed stream up)
    assert 1 not in server.streams
    return server


def _late_update_then_ping() -> bytes:
    update = WindowUpdateFrame(1)
    update.window_increment = 100
    ping = PingFrame(0)
    ping.opaque_data = b"12345678"
    return bytes(update.serialize()) + bytes(ping.serialize())


def test_without_it_h2_3_fails_the_connection() -> None:
    with pytest.raises(h2.exceptions.StreamClosedError):
        _server_after_one_finished_call().receive_data(_late_update_then_ping())


def test_the_late_update_is_ignored_and_the_frames_after_it_are_processed() -> None:
    server = _server_after_one_finished_call()
    tolerate_late_window_updates(server)
    events = server.receive_data(_late_update_then_ping())
    assert [type(e) for e in events] == [h2.events.PingReceived]
    assert not server.data_to_send().startswith(b"\x00\x00\x04\x03")  # no RST_STREAM


def test_a_connection_level_update_is_still_h2s() -> None:
    server = _server_after_one_finished_call()
    tolerate_late_window_updates(server)
    update = WindowUpdateFrame(0)
    update.window_increment = 10
    events = server.receive_data(bytes(update.serialize()))
    assert [(type(e), e.delta) for e in events] == [(h2.events.WindowUpdated, 10)]


def test_an_unknown_connection_layout_is_refused() -> None:
    with pytest.raises(TypeError, match="frame dispatch table"):
        tolerate_late_window_updates(object())
