"""gateway.keep_alive: hypercorn's keep-alive rules with one timer task per connection.

A real hypercorn server (plain HTTP/1.1 on loopback) under pytest-trio's autojump clock, so
the keep-alive timeout passes in virtual time.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

import h11
import pytest
import trio
import trio.testing
from hypercorn.config import Config
from hypercorn.trio import serve

from gateway import keep_alive

KEEP_ALIVE = 5.0
REQUEST = b"POST /x HTTP/1.1\r\nhost: gw\r\ncontent-length: 2\r\n\r\n{}"


@dataclass
class Server:
    port: int
    shutdown: trio.Event
    app_delay: list[float]
    app_done: trio.Event


class TimerTasks(trio.abc.Instrument):
    """Counts the keep-alive timer tasks spawned and alive."""

    def __init__(self) -> None:
        self.spawned = 0
        self.alive: set[trio.lowlevel.Task] = set()

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        if task.coro.__qualname__ == "KeepAliveTimer._run":
            self.spawned += 1
            self.alive.add(task)

    def task_exited(self, task: trio.lowlevel.Task) -> None:
        self.alive.discard(task)


@asynccontextmanager
async def running_server(*, read_timeout: float | None = None) -> AsyncIterator[Server]:
    assert keep_alive.install()
    delay: list[float] = [0.0]
    done = trio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                await send({"type": message["type"] + ".complete"})
                if message["type"] == "lifespan.shutdown":
                    return
        while (await receive()).get("more_body"):
            pass
        await trio.sleep(delay[0])
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", b"2")]})  # fmt: skip
        await send({"type": "http.response.body", "body": b"ok"})
        done.set()

    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.keep_alive_timeout = KEEP_ALIVE
    config.read_timeout = read_timeout
    config.graceful_timeout = 60.0
    config.accesslog = None
    shutdown = trio.Event()
    with trio.fail_after(600):  # virtual seconds: a broken rule fails instead of hanging
        async with trio.open_nursery() as nursery:
            binds = await nursery.start(partial(serve, app, config, shutdown_trigger=shutdown.wait))
            yield Server(int(binds[0].rsplit(":", 1)[1]), shutdown, delay, done)
            shutdown.set()


async def request(stream: trio.SocketStream) -> int:
    """Send one request and read its whole response; returns the status."""
    client = h11.Connection(h11.CLIENT)
    await stream.send_all(REQUEST)
    status = 0
    while True:
        event = client.next_event()
        if event is h11.NEED_DATA:
            client.receive_data(await stream.receive_some(65536))
        elif isinstance(event, h11.Response):
            status = event.status_code
        elif isinstance(event, h11.EndOfMessage):
            return status
        elif isinstance(event, h11.ConnectionClosed):
            raise AssertionError("the server closed the connection before the response")


async def closed_by_server(stream: trio.SocketStream) -> None:
    while await stream.receive_some(65536):
        pass


async def test_an_idle_connection_closes_after_the_keep_alive_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with running_server() as server:
        stream = await trio.open_tcp_stream("127.0.0.1", server.port)
        assert await request(stream) == 200
        start = trio.current_time()
        await closed_by_server(stream)
        assert KEEP_ALIVE <= trio.current_time() - start < KEEP_ALIVE + 0.1


async def test_a_fresh_connection_without_requests_times_out_too(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with running_server() as server:
        start = trio.current_time()
        stream = await trio.open_tcp_stream("127.0.0.1", server.port)
        await closed_by_server(stream)
        assert KEEP_ALIVE <= trio.current_time() - start < KEEP_ALIVE + 0.1


async def test_a_request_longer_than_the_timeout_is_answered_and_the_timer_restarts(
    autojump_clock: trio.testing.MockClock,
) -> None:
    tasks = TimerTasks()
    trio.lowlevel.add_instrument(tasks)
    async with running_server() as server:
        stream = await trio.open_tcp_stream("127.0.0.1", server.port)
        await trio.sleep(KEEP_ALIVE - 1)  # most of the first idle period
        server.app_delay[0] = 3 * KEEP_ALIVE
        assert await request(stream) == 200  # busy: no timeout while the app runs
        server.app_delay[0] = 0.0
        await trio.sleep(KEEP_ALIVE - 1)  # idle again, but not for long enough
        assert await request(stream) == 200
        assert tasks.spawned == 1  # the long request did not end the timer task
        trio.lowlevel.remove_instrument(tasks)
        start = trio.current_time()
        await closed_by_server(stream)
        assert KEEP_ALIVE <= trio.current_time() - start < KEEP_ALIVE + 0.1


async def test_requests_on_a_connection_share_one_timer_task(
    autojump_clock: trio.testing.MockClock,
) -> None:
    tasks = TimerTasks()
    trio.lowlevel.add_instrument(tasks)
    try:
        async with running_server() as server:
            stream = await trio.open_tcp_stream("127.0.0.1", server.port)
            for _ in range(5):
                assert await request(stream) == 200
            assert tasks.spawned == 1
            await stream.aclose()
            await trio.testing.wait_all_tasks_blocked()
            assert not tasks.alive  # the client closed: the timer ended with the connection
    finally:
        trio.lowlevel.remove_instrument(tasks)


async def test_a_client_gone_mid_request_leaves_no_timer_behind(
    autojump_clock: trio.testing.MockClock,
) -> None:
    tasks = TimerTasks()
    trio.lowlevel.add_instrument(tasks)
    try:
        async with running_server() as server:
            stream = await trio.open_tcp_stream("127.0.0.1", server.port)
            server.app_delay[0] = 1.0
            await stream.send_all(REQUEST)
            await trio.sleep(0.5)
            assert tasks.alive  # busy, deadline infinite
            await stream.aclose()
            await server.app_done.wait()
            await trio.testing.wait_all_tasks_blocked()
            assert not tasks.alive
    finally:
        trio.lowlevel.remove_instrument(tasks)


async def test_shutdown_closes_an_idle_connection_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with running_server() as server:
        stream = await trio.open_tcp_stream("127.0.0.1", server.port)
        assert await request(stream) == 200
        start = trio.current_time()
        server.shutdown.set()
        await closed_by_server(stream)
        assert trio.current_time() - start < 0.1


async def test_shutdown_during_a_request_answers_it_then_closes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with running_server() as server:
        stream = await trio.open_tcp_stream("127.0.0.1", server.port)
        server.app_delay[0] = 2.0
        async with trio.open_nursery() as nursery:
            answered: list[int] = []

            async def ask() -> None:
                answered.append(await request(stream))

            nursery.start_soon(ask)
            await trio.sleep(1.0)
            server.shutdown.set()
        assert answered == [200]
        start = trio.current_time()
        await closed_by_server(stream)
        assert trio.current_time() - start < 0.1


async def test_a_read_timeout_still_closes_a_silent_connection(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with running_server(read_timeout=2.0) as server:
        stream = await trio.open_tcp_stream("127.0.0.1", server.port)
        assert await request(stream) == 200
        start = trio.current_time()
        await closed_by_server(stream)
        assert 2.0 <= trio.current_time() - start < 2.1  # before the keep-alive timeout


def test_install_is_idempotent() -> None:
    assert keep_alive.install()
    assert keep_alive.install()


def test_another_hypercorn_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    from hypercorn.trio.tcp_server import TCPServer

    monkeypatch.setattr(TCPServer, "__init__", lambda *_: None)
    monkeypatch.setattr(importlib.metadata, "version", lambda _name: "0.18.0")
    assert not keep_alive.install()
    assert TCPServer.__init__ is not keep_alive._init
