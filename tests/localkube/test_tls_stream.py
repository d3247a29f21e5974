"""The API server's TLS stream (:mod:`localkube.tls_stream`) against trio's TLS client.

Over a real socket pair (the direct file-descriptor path) and over memory streams (the
generic transport path).
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing
import trustme

from localkube.tls_stream import ServerTlsStream


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def server_context(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost").configure_cert(context)
    context.set_alpn_protocols(["http/1.1"])
    return context


def client_context(ca: trustme.CA, version: ssl.TLSVersion) -> ssl.SSLContext:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    context.minimum_version = context.maximum_version = version
    context.set_alpn_protocols(["http/1.1"])
    return context


def socket_pair() -> tuple[trio.SocketStream, trio.SocketStream]:
    a, b = trio.socket.socketpair()
    return trio.SocketStream(a), trio.SocketStream(b)


def memory_pair() -> tuple[trio.abc.Stream, trio.abc.Stream]:
    server, client = trio.testing.memory_stream_pair()
    return server, client


Pair = Callable[[], tuple[trio.abc.Stream, trio.abc.Stream]]


@asynccontextmanager
async def connected(
    ca: trustme.CA, pair: Pair, version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_3
) -> AsyncIterator[tuple[ServerTlsStream, trio.SSLStream[trio.abc.Stream]]]:
    server_end, client_end = pair()
    server = ServerTlsStream(server_end, server_context(ca))
    client = trio.SSLStream(
        client_end, client_context(ca, version), server_hostname="localhost", https_compatible=True
    )
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server.do_handshake)
            nursery.start_soon(client.do_handshake)
    try:
        yield server, client
    finally:
        await trio.aclose_forcefully(server)
        await trio.aclose_forcefully(client)


PAIRS = [pytest.param(socket_pair, id="socket"), pytest.param(memory_pair, id="memory")]
VERSIONS = [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3]


async def receive_exactly(stream: trio.abc.ReceiveStream, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = await stream.receive_some()
        assert chunk, f"end of stream after {len(data)} of {size} bytes"
        data += chunk
    return data


@pytest.mark.parametrize("pair", PAIRS)
@pytest.mark.parametrize("version", VERSIONS)
async def test_both_ways_after_the_handshake(
    ca: trustme.CA, pair: Pair, version: ssl.TLSVersion
) -> None:
    async with connected(ca, pair, version) as (server, client):
        assert client.selected_alpn_protocol() == "http/1.1"
        await client.send_all(b"request")
        assert await receive_exactly(server, 7) == b"request"
        await server.send_all(b"response")
        assert await receive_exactly(client, 8) == b"response"


@pytest.mark.parametrize("pair", PAIRS)
async def test_large_writes_arrive_whole_and_in_order(ca: trustme.CA, pair: Pair) -> None:
    """Megabytes through a socket whose buffer fills: partial writes, waits for room."""
    payload = bytes(range(256)) * 8192  # 2 MiB
    async with connected(ca, pair) as (server, client):
        received = b""

        async def read_slowly() -> None:
            nonlocal received
            while len(received) < 2 * len(payload):
                received += await client.receive_some(4096)
                await trio.lowlevel.checkpoint()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(read_slowly)
            await server.send_all(payload)
            await server.send_all(payload[::-1])
        assert received == payload + payload[::-1]


@pytest.mark.parametrize("pair", PAIRS)
async def test_sending_while_another_task_receives(ca: trustme.CA, pair: Pair) -> None:
    """A watch: the handler streams while a second task waits for the client's EOF."""
    async with connected(ca, pair) as (server, client):
        lines = [b"event %d\n" % i for i in range(300)]
        got_eof = trio.Event()

        async def wait_for_eof() -> None:
            assert await server.receive_some() == b""
            got_eof.set()

        received = b""

        async def client_reads_then_leaves() -> None:
            nonlocal received
            received = await receive_exactly(client, len(b"".join(lines)))
            await client.transport_stream.aclose()  # no close_notify, as HTTPS clients do

        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(wait_for_eof)
                nursery.start_soon(client_reads_then_leaves)
                for line in lines:
                    await server.send_all(line)
            assert got_eof.is_set()
        assert received == b"".join(lines)


@pytest.mark.parametrize("pair", PAIRS)
async def test_end_of_stream_without_close_notify_is_an_ordinary_end(
    ca: trustme.CA, pair: Pair
) -> None:
    async with connected(ca, pair) as (server, client):
        await client.send_all(b"last words")
        await client.transport_stream.aclose()
        assert await receive_exactly(server, 10) == b"last words"
        assert await server.receive_some() == b""
        assert await server.receive_some() == b""


async def test_a_client_that_is_not_speaking_tls_fails_the_handshake(ca: trustme.CA) -> None:
    server_end, client_end = socket_pair()
    server = ServerTlsStream(server_end, server_context(ca))
    await client_end.send_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    with trio.fail_after(5), pytest.raises(trio.BrokenResourceError, match="TLS handshake"):
        await server.do_handshake()
    await server.aclose()
    await client_end.aclose()


async def test_a_peer_gone_during_the_handshake_is_a_broken_stream(ca: trustme.CA) -> None:
    server_end, client_end = socket_pair()
    server = ServerTlsStream(server_end, server_context(ca))
    await client_end.aclose()
    with trio.fail_after(5), pytest.raises(trio.BrokenResourceError):
        await server.do_handshake()
    await server.aclose()


async def test_misuse_is_refused(ca: trustme.CA) -> None:
    server_end, _ = socket_pair()
    fresh = ServerTlsStream(server_end, server_context(ca))
    with pytest.raises(trio.BrokenResourceError):
        await fresh.send_all(b"before the handshake")
    await fresh.aclose()
    async with connected(ca, socket_pair) as (server, _client):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server.receive_some)
            await trio.testing.wait_all_tasks_blocked()
            with pytest.raises(trio.BusyResourceError):
                await server.receive_some()
            nursery.cancel_scope.cancel()
        await server.aclose()
        with pytest.raises(trio.ClosedResourceError):
            await server.send_all(b"after close")
        with pytest.raises(trio.ClosedResourceError):
            await server.receive_some()


async def test_a_tls_1_3_session_ticket_leaves_with_the_first_write(ca: trustme.CA) -> None:
    """The handshake's trailing records wait for the first response: one transport write."""
    sends: list[int] = []
    server_end, client_end = trio.testing.memory_stream_pair()
    inner_send = server_end.send_stream.send_all

    async def counting_send_all(data: bytes | bytearray | memoryview) -> None:
        sends.append(len(data))
        await inner_send(data)

    server_end.send_stream.send_all = counting_send_all  # type: ignore[method-assign]
    server = ServerTlsStream(server_end, server_context(ca))
    client = trio.SSLStream(
        client_end,
        client_context(ca, ssl.TLSVersion.TLSv1_3),
        server_hostname="localhost",
        https_compatible=True,
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(server.do_handshake)
        nursery.start_soon(client.do_handshake)
    handshake_sends = len(sends)
    await server.send_all(b"response")
    assert len(sends) == handshake_sends + 1
    assert await receive_exactly(client, 8) == b"response"


@pytest.mark.parametrize("pair", PAIRS)
async def test_cancelled_calls_leave_the_stream_usable(ca: trustme.CA, pair: Pair) -> None:
    """A send or receive cancelled before it could act makes no record and loses no data.

    (A watch with ``timeoutSeconds=0`` sends from a cancelled scope, then ends its chunked
    response outside it.)
    """
    async with connected(ca, pair) as (server, client):
        with trio.CancelScope() as scope:
            scope.cancel()
            await server.send_all(b"never made")
        assert scope.cancelled_caught
        with trio.move_on_after(0.05) as waiting:
            await server.receive_some()  # nothing to read: cancelled while waiting
        assert waiting.cancelled_caught
        await client.send_all(b"ping")
        assert await receive_exactly(server, 4) == b"ping"
        await server.send_all(b"pong")
        assert await receive_exactly(client, 4) == b"pong"
