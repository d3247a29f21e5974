"""The client side of :class:`krt.tls_stream.TlsStream` (the API client's TLS), over sockets.

Against trio's own TLS server (an independent implementation) and against localkube's
server side of the same class; the server side's own rules are tested in
tests/localkube/test_tls_stream.py.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing
import trustme

from krt.tls_stream import TlsStream
from localkube.tls_stream import ServerTlsStream

VERSIONS = [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3]


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def server_context(ca: trustme.CA, version: ssl.TLSVersion | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost").configure_cert(context)
    context.set_alpn_protocols(["http/1.1"])
    if version is not None:
        context.minimum_version = context.maximum_version = version
    return context


def client_context(ca: trustme.CA | None) -> ssl.SSLContext:
    context = ssl.create_default_context()
    if ca is not None:
        ca.configure_trust(context)
    context.set_alpn_protocols(["http/1.1"])
    return context


def socket_pair() -> tuple[trio.SocketStream, trio.SocketStream]:
    a, b = trio.socket.socketpair()
    return trio.SocketStream(a), trio.SocketStream(b)


async def receive_exactly(stream: trio.abc.ReceiveStream, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = await stream.receive_some()
        assert chunk, f"end of stream after {len(data)} of {size} bytes"
        data += chunk
    return data


@asynccontextmanager
async def connected(
    server: trio.abc.Stream, client: TlsStream
) -> AsyncIterator[tuple[trio.abc.Stream, TlsStream]]:
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server.do_handshake)  # type: ignore[attr-defined]
            nursery.start_soon(client.do_handshake)
    try:
        yield server, client
    finally:
        await trio.aclose_forcefully(server)
        await trio.aclose_forcefully(client)


@pytest.mark.parametrize("version", VERSIONS)
async def test_request_and_answer_with_trio_s_tls_server(
    ca: trustme.CA, version: ssl.TLSVersion
) -> None:
    server_end, client_end = socket_pair()
    server = trio.SSLStream(server_end, server_context(ca, version), server_side=True)
    client = TlsStream(
        client_end, client_context(ca), server_side=False, server_hostname="localhost"
    )
    async with connected(server, client):
        assert client.selected_alpn_protocol() == "http/1.1"
        for round_ in range(3):  # TLS 1.3 session tickets arrive with the first answer
            await client.send_all(b"request %d" % round_)
            assert await receive_exactly(server, 9) == b"request %d" % round_
            await server.send_all(b"answer %d" % round_)
            assert await receive_exactly(client, 8) == b"answer %d" % round_


async def test_megabytes_both_ways_with_the_lean_server(ca: trustme.CA) -> None:
    payload = bytes(range(256)) * 8192  # 2 MiB: partial writes, waits for room
    server_end, client_end = socket_pair()
    server = ServerTlsStream(server_end, server_context(ca))
    client = TlsStream(
        client_end, client_context(ca), server_side=False, server_hostname="localhost"
    )
    async with connected(server, client):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(client.send_all, payload)
            assert await receive_exactly(server, len(payload)) == payload
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server.send_all, payload[::-1])
            assert await receive_exactly(client, len(payload)) == payload[::-1]


async def test_an_untrusted_server_fails_the_handshake_with_the_reason(ca: trustme.CA) -> None:
    server_end, client_end = socket_pair()
    server = ServerTlsStream(server_end, server_context(ca))
    client = TlsStream(
        client_end, client_context(None), server_side=False, server_hostname="localhost"
    )
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_handshake_quietly, server)
            with pytest.raises(trio.BrokenResourceError) as raised:
                await client.do_handshake()
    assert isinstance(raised.value.__cause__, ssl.SSLCertVerificationError)
    await client.aclose()


async def test_a_certificate_for_another_host_fails_the_handshake(ca: trustme.CA) -> None:
    server_end, client_end = socket_pair()
    server = ServerTlsStream(server_end, server_context(ca))
    client = TlsStream(
        client_end, client_context(ca), server_side=False, server_hostname="elsewhere.example"
    )
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_handshake_quietly, server)
            with pytest.raises(trio.BrokenResourceError, match="Hostname mismatch"):
                await client.do_handshake()
    await client.aclose()


async def _handshake_quietly(server: ServerTlsStream) -> None:
    try:
        await server.do_handshake()
    except trio.BrokenResourceError:
        pass
    finally:
        await server.aclose()


async def test_close_now_wakes_a_blocked_reader_and_closes(ca: trustme.CA) -> None:
    server_end, client_end = socket_pair()
    server = ServerTlsStream(server_end, server_context(ca))
    client = TlsStream(
        client_end, client_context(ca), server_side=False, server_hostname="localhost"
    )
    async with connected(server, client):
        outcome: list[type[BaseException]] = []

        async def read() -> None:
            try:
                await client.receive_some()
            except trio.ClosedResourceError as exc:
                outcome.append(type(exc))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(read)
            await trio.testing.wait_all_tasks_blocked()
            client.close_now()
            client.close_now()  # idempotent
        assert outcome == [trio.ClosedResourceError]
        with pytest.raises(trio.ClosedResourceError):
            await client.send_all(b"after close")
        assert await server.receive_some() == b""  # the peer sees the end


async def test_server_hostname_is_for_clients_only(ca: trustme.CA) -> None:
    a, b = socket_pair()
    with pytest.raises(ValueError, match="client side only"):
        TlsStream(a, server_context(ca), server_side=True, server_hostname="localhost")
    a.socket.close()
    b.socket.close()


async def test_after_close_notify_every_receive_is_the_end(ca: trustme.CA) -> None:
    """The peer's close_notify ends the stream even while its TCP connection stays open."""
    server_end, client_end = socket_pair()
    server = trio.SSLStream(server_end, server_context(ca), server_side=True)
    client = TlsStream(
        client_end, client_context(ca), server_side=False, server_hostname="localhost"
    )
    async with connected(server, client):
        await server.send_all(b"last")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server.unwrap)  # sends close_notify, keeps TCP open
            with trio.fail_after(5):
                assert await receive_exactly(client, 4) == b"last"
                assert await client.receive_some() == b""
                assert await client.receive_some() == b""
            nursery.cancel_scope.cancel()


@pytest.mark.parametrize("version", VERSIONS)
async def test_many_small_records_read_at_once_are_all_delivered(
    ca: trustme.CA, version: ssl.TLSVersion
) -> None:
    """Watch events: several TLS records arrive in one socket read; none waits in the TLS layer."""
    server_end, client_end = socket_pair()
    server = trio.SSLStream(server_end, server_context(ca, version), server_side=True)
    client = TlsStream(
        client_end, client_context(ca), server_side=False, server_hostname="localhost"
    )
    async with connected(server, client):
        events = [b"event %03d\n" % i for i in range(100)]
        for event in events:
            await server.send_all(event)  # one record each, all in the socket before reading
        with trio.fail_after(5):
            assert await receive_exactly(client, len(b"".join(events))) == b"".join(events)
