"""A response head goes out in the same socket write as what follows it (gateway.response_writes)."""

from __future__ import annotations

import importlib.metadata
from typing import Any

import h11
import pytest
import trio
import trio.testing
from hypercorn.config import Config
from hypercorn.events import Closed, RawData
from hypercorn.protocol.events import Body, EndBody, Response
from hypercorn.protocol.h11 import H11Protocol
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.trio.worker_context import WorkerContext

from gateway.response_writes import install


def connection_after_request(writes: list[bytes]) -> Any:
    """An H11Protocol that has read one complete request; its writes go to ``writes``."""

    async def send(event: Any) -> None:
        if isinstance(event, RawData):
            writes.append(event.data)

    protocol = H11Protocol(
        None,  # type: ignore[arg-type]  # no app: the test drives the protocol directly
        Config(),
        WorkerContext(None),
        None,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        True,
        ("127.0.0.1", 1),
        ("127.0.0.1", 2),
        send,
    )
    protocol.connection.receive_data(b"POST /x HTTP/1.1\r\nhost: gw\r\ncontent-length: 2\r\n\r\n{}")
    assert isinstance(protocol.connection.next_event(), h11.Request)
    assert isinstance(protocol.connection.next_event(), h11.Data)
    assert isinstance(protocol.connection.next_event(), h11.EndOfMessage)
    return protocol


def test_install_is_idempotent() -> None:
    assert install()
    assert install()


async def test_head_and_body_leave_in_one_write() -> None:
    assert install()
    writes: list[bytes] = []
    protocol = connection_after_request(writes)
    headers = [(b"content-type", b"application/json"), (b"content-length", b"11")]
    await protocol.stream_send(Response(stream_id=1, status_code=200, headers=headers))
    assert writes == []  # the head waits for the body
    await protocol.stream_send(Body(stream_id=1, data=b'{"ok":true}'))
    assert len(writes) == 1
    assert writes[0].startswith(b"HTTP/1.1 200 ")
    assert writes[0].endswith(b'\r\n\r\n{"ok":true}')
    await protocol.stream_send(EndBody(stream_id=1))
    # the end of a Content-Length body is no bytes: no second (empty) write either
    assert len(writes) == 1


async def test_head_of_an_error_response_leaves_with_its_end() -> None:
    assert install()
    writes: list[bytes] = []
    protocol = connection_after_request(writes)
    await protocol._send_error_response(400)
    assert len(writes) == 1
    assert writes[0].startswith(b"HTTP/1.1 400 ")
    assert writes[0].endswith(b"\r\n\r\n")


async def test_a_second_response_on_the_connection_is_grouped_too() -> None:
    assert install()
    writes: list[bytes] = []
    protocol = connection_after_request(writes)
    headers = [(b"content-length", b"1")]
    await protocol.stream_send(Response(stream_id=1, status_code=200, headers=headers))
    await protocol.stream_send(Body(stream_id=1, data=b"a"))
    await protocol.stream_send(EndBody(stream_id=1))
    protocol.connection.start_next_cycle()
    protocol.connection.receive_data(b"GET /y HTTP/1.1\r\nhost: gw\r\n\r\n")
    assert isinstance(protocol.connection.next_event(), h11.Request)
    assert isinstance(protocol.connection.next_event(), h11.EndOfMessage)
    before = len([w for w in writes if w])
    await protocol.stream_send(Response(stream_id=1, status_code=404, headers=headers))
    await protocol.stream_send(Body(stream_id=1, data=b"b"))
    data = [w for w in writes if w][before:]
    assert len(data) == 1
    assert data[0].startswith(b"HTTP/1.1 404 ")
    assert data[0].endswith(b"\r\n\r\nb")


def test_another_hypercorn_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    from gateway import response_writes

    original = response_writes._send_h11_event
    monkeypatch.setattr(H11Protocol, "_send_h11_event", lambda *_: None)
    monkeypatch.setattr(importlib.metadata, "version", lambda _name: "0.18.0")
    assert not install()
    assert H11Protocol._send_h11_event is not original


class FakeStream:
    """A transport that records writes (no checkpoint) or fails them."""

    def __init__(self, error: Exception | None = None) -> None:
        self.writes: list[bytes] = []
        self.error = error

    async def send_all(self, data: bytes) -> None:
        if self.error is not None:
            raise self.error
        self.writes.append(data)


class FakeProtocol:
    def __init__(self) -> None:
        self.events: list[Any] = []

    async def handle(self, event: Any) -> None:
        self.events.append(event)


def bare_server(stream: FakeStream) -> Any:
    """A TCPServer with just what ``protocol_send`` uses (no socket, no app)."""
    server = TCPServer.__new__(TCPServer)
    server.send_lock = trio.Lock()
    server.stream = stream  # type: ignore[assignment]
    server.protocol = FakeProtocol()  # type: ignore[assignment]
    return server


async def test_a_write_with_the_send_lock_free_takes_no_checkpoint() -> None:
    assert install()
    server = bare_server(FakeStream())
    with trio.testing.assert_no_checkpoints():
        await server.protocol_send(RawData(data=b"HTTP/1.1 200 OK\r\n\r\n"))
    assert server.stream.writes == [b"HTTP/1.1 200 OK\r\n\r\n"]
    assert not server.send_lock.locked()


async def test_a_write_waits_while_another_holds_the_send_lock() -> None:
    assert install()
    server = bare_server(FakeStream())
    async with trio.open_nursery() as nursery:
        await server.send_lock.acquire()
        nursery.start_soon(server.protocol_send, RawData(data=b"second"))
        await trio.testing.wait_all_tasks_blocked()
        assert server.stream.writes == []  # waiting for the lock
        server.stream.writes.append(b"first")
        server.send_lock.release()
    assert server.stream.writes == [b"first", b"second"]


async def test_a_broken_transport_closes_the_protocol_and_frees_the_lock() -> None:
    assert install()
    server = bare_server(FakeStream(trio.BrokenResourceError()))
    await server.protocol_send(RawData(data=b"x"))
    assert [type(event) for event in server.protocol.events] == [Closed]
    assert not server.send_lock.locked()
