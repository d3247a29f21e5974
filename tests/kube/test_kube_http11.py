"""The HTTP/1.1 pool under :class:`Kube`: framing, keep-alive, reuse, retries, streams, TLS.

Each test runs a small scripted server (trio + h11, plain TCP or TLS with a trustme CA) so
the connection-level rules are observable: how many connections were opened, when one is
reused, closed or retried.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial

import h11
import pytest
import trio
import trio.testing
import trustme
from proxy_fake import connect_proxy

from krt.kube.http11 import Http11Pool, TransportError, check_header, parse_origin

Handler = Callable[[trio.abc.Stream], Awaitable[None]]


class Peer:
    """Server side of one connection: reads requests with h11, writes raw bytes."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.h11 = h11.Connection(h11.SERVER)

    async def request(self) -> tuple[h11.Request, bytes] | None:
        """Read one request (None on EOF)."""
        request: h11.Request | None = None
        body = b""
        while True:
            event = self.h11.next_event()
            if event is h11.NEED_DATA:
                data = await self.stream.receive_some(65536)
                if not data:
                    return None
                self.h11.receive_data(data)
            elif isinstance(event, h11.Request):
                request = event
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                assert request is not None
                return request, body
            elif isinstance(event, h11.ConnectionClosed):
                return None

    async def answer(self, body: bytes, *, status: int = 200, close: bool = False) -> None:
        extra = b"Connection: close\r\n" if close else b""
        head = f"HTTP/1.1 {status} X\r\nContent-Length: {len(body)}\r\n".encode()
        await self.stream.send_all(head + extra + b"\r\n" + body)
        if not close:
            self.h11.send(h11.Response(status_code=status, headers=[("Content-Length", "0")]))
            self.h11.send(h11.EndOfMessage())
            self.h11.start_next_cycle()


class Server:
    """A scripted server; ``connections`` counts accepted connections."""

    def __init__(self, handler: Callable[[Peer], Awaitable[None]]) -> None:
        self.handler = handler
        self.connections = 0
        self.requests: list[tuple[h11.Request, bytes]] = []

    async def serve(self, stream: trio.abc.Stream) -> None:
        self.connections += 1
        try:
            await self.handler(Peer(stream))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            await trio.aclose_forcefully(stream)

    async def echo(self, peer: Peer) -> None:
        """Answer every request with its method and body, keep-alive."""
        while (got := await peer.request()) is not None:
            self.requests.append(got)
            await peer.answer(got[0].method + b" " + got[1])


@asynccontextmanager
async def serving(
    handler: Callable[[Server, Peer], Awaitable[None]] | None = None,
    *,
    tls: trustme.CA | None = None,
    **pool_options: float,
) -> AsyncIterator[tuple[Server, Http11Pool]]:
    """Run a server on 127.0.0.1 and a pool connected to it."""

    async def default(server: Server, peer: Peer) -> None:
        await server.echo(peer)

    chosen = handler or default
    server: Server = Server(lambda peer: chosen(server, peer))
    async with trio.open_nursery() as nursery:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = listeners[0].socket.getsockname()[1]
        context: ssl.SSLContext | None = None
        serve_listeners: list[trio.abc.Listener[trio.abc.Stream]] = list(listeners)
        if tls is not None:
            server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            tls.issue_cert("localhost").configure_cert(server_context)
            serve_listeners = [
                trio.SSLListener(listener, server_context, https_compatible=True)
                for listener in listeners
            ]
            context = ssl.create_default_context()
            tls.configure_trust(context)
        nursery.start_soon(trio.serve_listeners, server.serve, serve_listeners)
        scheme = "https" if tls else "http"
        origin = parse_origin(f"{scheme}://127.0.0.1:{port}")
        options = {"max_connections": 100, "keepalive_expiry": 5.0, **pool_options}
        pool = Http11Pool(
            origin,
            ssl_context=context,
            server_hostname="localhost" if tls else None,
            max_connections=int(options["max_connections"]),
            keepalive_expiry=options["keepalive_expiry"],
        )
        try:
            yield server, pool
        finally:
            await pool.aclose()
            nursery.cancel_scope.cancel()


# -- pure parts ------------------------------------------------------------------------------


def test_parse_origin() -> None:
    origin = parse_origin("https://example.com")
    assert (origin.tls, origin.host, origin.port, origin.authority) == (
        True,
        "example.com",
        443,
        "example.com",
    )
    assert parse_origin("http://h").port == 80
    v6 = parse_origin("https://[::1]:6443/")
    assert (v6.host, v6.port, v6.authority, v6.path_prefix) == ("::1", 6443, "[::1]:6443", "")
    assert parse_origin("https://h:1/k8s/clusters/c1/").path_prefix == "/k8s/clusters/c1"
    with pytest.raises(ValueError, match="scheme"):
        parse_origin("ftp://h")
    with pytest.raises(ValueError, match="no host"):
        parse_origin("https://")
    with pytest.raises(ValueError, match="query"):
        parse_origin("https://h/?a=1")
    with pytest.raises(ValueError, match="(?i)port"):
        parse_origin("https://h:99999")


def test_check_header_refuses_injection() -> None:
    assert check_header("Authorization", "Bearer a.b-c") == ("Authorization", "Bearer a.b-c")
    with pytest.raises(ValueError, match="control"):
        check_header("Authorization", "Bearer x\r\nX-Evil: 1")
    with pytest.raises(ValueError, match="token"):
        check_header("Bad Name", "x")
    with pytest.raises(ValueError, match="token"):
        check_header("", "x")


def test_pool_arguments_are_checked() -> None:
    origin = parse_origin("https://h")
    with pytest.raises(ValueError, match="ssl_context"):
        Http11Pool(origin, ssl_context=None)
    plain = parse_origin("http://h")
    with pytest.raises(ValueError, match="max_connections"):
        Http11Pool(plain, ssl_context=None, max_connections=0)
    with pytest.raises(ValueError, match="keepalive_expiry"):
        Http11Pool(plain, ssl_context=None, keepalive_expiry=-1)


def test_request_head_framing() -> None:
    pool = Http11Pool(parse_origin("http://h:8/prefix"), ssl_context=None)
    head = pool.head("PUT", "/a?b=c", [("X-A", "1")], b"{}")
    assert head == b"PUT /prefix/a?b=c HTTP/1.1\r\nHost: h:8\r\nX-A: 1\r\nContent-Length: 2\r\n\r\n"
    assert b"Content-Length" not in pool.head("GET", "/a", [], None)


# -- against a server ----------------------------------------------------------------------


async def test_keep_alive_reuses_one_connection_and_sends_the_body() -> None:
    async with serving() as (server, pool):
        for i in range(3):
            status, body = await pool.request("POST", "/x", [("X-N", str(i))], b'{"i":1}')
            assert (status, body) == (200, b'POST {"i":1}')
        assert server.connections == 1
        assert pool.connections_opened == 1
        assert pool.idle_connections == 1
        request, sent = server.requests[0]
        assert request.target == b"/x"
        assert (b"x-n", b"0") in request.headers
        assert sent == b'{"i":1}'


async def test_tls_with_the_given_context_and_server_name() -> None:
    async with serving(tls=trustme.CA()) as (server, pool):
        assert await pool.request("GET", "/", []) == (200, b"GET ")
        assert await pool.request("GET", "/", []) == (200, b"GET ")
        assert server.connections == 1


async def test_tls_untrusted_server_is_a_transport_error() -> None:
    async with serving(tls=trustme.CA()) as (_, pool):
        pool._ssl_context = ssl.create_default_context()  # trusts not the test CA
        with pytest.raises(TransportError, match="cannot connect"):
            await pool.request("GET", "/", [])
        assert pool.active_connections == 0


async def test_connection_close_answer_is_not_reused() -> None:
    async def close_each(server: Server, peer: Peer) -> None:
        got = await peer.request()
        assert got is not None
        await peer.answer(b"bye", close=True)

    async with serving(close_each) as (server, pool):
        assert await pool.request("GET", "/", []) == (200, b"bye")
        assert pool.idle_connections == 0
        assert await pool.request("GET", "/", []) == (200, b"bye")
        assert server.connections == 2


async def test_idle_connection_closed_by_the_server_is_not_reused() -> None:
    async def one_then_close(server: Server, peer: Peer) -> None:
        got = await peer.request()
        assert got is not None
        await peer.answer(b"ok")
        # keep-alive answer, then the server drops the idle connection

    async with serving(one_then_close) as (server, pool):
        assert await pool.request("POST", "/", [], b"1") == (200, b"ok")
        while server.connections == 1 and not pool._idle[0].socket.is_readable():  # noqa: ASYNC110
            await trio.sleep(0.001)
        # a POST is never retried, so this only passes if the closed connection was skipped
        assert await pool.request("POST", "/", [], b"2") == (200, b"ok")
        assert server.connections == 2


async def test_get_is_retried_once_when_a_kept_connection_dies_unanswered() -> None:
    async def drop_second_request(server: Server, peer: Peer) -> None:
        got = await peer.request()
        assert got is not None
        await peer.answer(b"first" if server.connections == 1 else b"fresh")
        if await peer.request() is not None:
            return  # read the request, then close without answering

    for method, retried in (("GET", True), ("POST", False)):
        async with serving(drop_second_request) as (server, pool):
            assert (await pool.request(method, "/", [], None))[0] == 200
            if retried:
                assert await pool.request(method, "/", []) == (200, b"fresh")
                assert server.connections == 2
            else:
                with pytest.raises(TransportError, match="closed the connection"):
                    await pool.request(method, "/", [], b"x")
                assert server.connections == 1
            assert pool.active_connections == 0


async def test_malformed_answer_is_a_transport_error_and_closes() -> None:
    async def garbage(server: Server, peer: Peer) -> None:
        await peer.request()
        await peer.stream.send_all(b"NOT HTTP AT ALL\r\n\r\n")

    async with serving(garbage) as (_, pool):
        with pytest.raises(TransportError, match="malformed"):
            await pool.request("GET", "/", [])
        assert (pool.active_connections, pool.idle_connections) == (0, 0)


async def test_refused_is_a_transport_error() -> None:
    pool = Http11Pool(parse_origin("http://127.0.0.1:1"), ssl_context=None)
    with pytest.raises(TransportError, match="cannot connect"):
        await pool.request("GET", "/", [])
    await pool.aclose()
    with pytest.raises(TransportError, match="closed"):
        await pool.request("GET", "/", [])


async def test_a_server_that_accepts_and_never_answers_fails_the_request_in_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A frozen API server (or a port that accepts and stays silent) must not hang every
    request: opening the connection (TCP + TLS handshake) is bounded, as client-go's is."""
    ca = trustme.CA()
    context = ssl.create_default_context()
    ca.configure_trust(context)

    async def silent(stream: trio.SocketStream) -> None:
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, host="127.0.0.1"), silent, 0)
        port = listeners[0].socket.getsockname()[1]
        pool = Http11Pool(
            parse_origin(f"https://127.0.0.1:{port}"), ssl_context=context, connect_timeout=10
        )
        start = trio.current_time()
        with pytest.raises(TransportError, match=r"no answer within 10 s \(TCP connect and TLS"):
            await pool.request("GET", "/version", [])
        assert trio.current_time() - start == pytest.approx(10, abs=0.1)
        assert pool.active_connections == 0
        await pool.aclose()
        nursery.cancel_scope.cancel()


def test_connect_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match="connect_timeout"):
        Http11Pool(parse_origin("http://127.0.0.1:1"), ssl_context=None, connect_timeout=0)


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


async def test_stream_yields_lines_across_chunks_then_reuses() -> None:
    async def chunked(server: Server, peer: Peer) -> None:
        while await peer.request() is not None:
            await peer.stream.send_all(
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                + _chunk(b'{"a":1}\n{"b"')
                + _chunk(b":2}\n\n")
                + _chunk(b'{"c":3}')
                + b"0\r\n\r\n"
            )
            peer.h11 = h11.Connection(h11.SERVER)

    async with serving(chunked) as (server, pool):
        async with pool.stream("GET", "/w", []) as response:
            assert response.status == 200
            lines = [line async for line in response.iter_lines()]
        assert lines == [b'{"a":1}', b'{"b":2}', b"", b'{"c":3}']
        assert pool.idle_connections == 1  # read to the end: kept
        async with pool.stream("GET", "/w", []) as response:
            assert await response.read() == b'{"a":1}\n{"b":2}\n\n{"c":3}'
        assert server.connections == 1


async def test_stream_left_early_closes_its_connection() -> None:
    release = trio.Event()

    async def endless(server: Server, peer: Peer) -> None:
        await peer.request()
        await peer.stream.send_all(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + _chunk(b"line\n")
        )
        await release.wait()

    async with serving(endless) as (_, pool):
        async with pool.stream("GET", "/w", []) as response:
            async for line in response.iter_lines():
                assert line == b"line"
                break
        assert (pool.active_connections, pool.idle_connections) == (0, 0)
        release.set()


async def test_cancelled_request_closes_the_connection_and_frees_the_slot() -> None:
    never = trio.Event()
    received = trio.Event()

    async def hang(server: Server, peer: Peer) -> None:
        if server.connections == 1:
            await peer.request()
            received.set()
            await never.wait()
        else:
            await server.echo(peer)

    async with serving(hang, max_connections=1) as (server, pool):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(pool.request, "GET", "/", [])
            await received.wait()
            nursery.cancel_scope.cancel()
        assert (pool.active_connections, pool.idle_connections) == (0, 0)
        with trio.fail_after(5):  # the one slot is free again
            assert await pool.request("GET", "/", []) == (200, b"GET ")
        assert server.connections == 2


async def test_max_connections_makes_callers_wait() -> None:
    gate = trio.Event()

    async def gated(server: Server, peer: Peer) -> None:
        while (got := await peer.request()) is not None:
            await gate.wait()
            await peer.answer(got[1])

    async with serving(gated, max_connections=1) as (server, pool):
        done: list[bytes] = []

        async def call(body: bytes) -> None:
            done.append((await pool.request("POST", "/", [], body))[1])

        async with trio.open_nursery() as nursery:
            nursery.start_soon(call, b"1")
            nursery.start_soon(call, b"2")
            await trio.testing.wait_all_tasks_blocked()
            assert pool.active_connections == 1
            assert done == []
            gate.set()
        assert sorted(done) == [b"1", b"2"]
        assert server.connections == 1  # the second waited and reused the first's


async def test_idle_connection_expires(mock_clock: trio.testing.MockClock) -> None:
    async with serving(keepalive_expiry=5.0) as (server, pool):
        await pool.request("GET", "/", [])
        mock_clock.jump(4.0)
        await pool.request("GET", "/", [])
        assert server.connections == 1
        mock_clock.jump(5.5)
        await pool.request("GET", "/", [])
        assert server.connections == 2
        assert pool.idle_connections == 1


async def test_https_through_a_connect_proxy_with_credentials() -> None:
    async with serving(tls=trustme.CA()) as (server, direct), connect_proxy() as proxy:
        pool = Http11Pool(
            direct.origin,
            ssl_context=direct._ssl_context,
            server_hostname="localhost",
            proxy=parse_origin(f"http://127.0.0.1:{proxy.port}"),
            proxy_authorization="Basic dTpw",
        )
        try:
            assert await pool.request("GET", "/", []) == (200, b"GET ")
            assert await pool.request("GET", "/", []) == (200, b"GET ")
        finally:
            await pool.aclose()
        assert proxy.tunnels == [direct.origin.authority]  # one tunnel, kept alive
        assert proxy.authorizations == ["Basic dTpw"]
        assert server.connections == 1


async def test_proxy_refusal_is_a_transport_error() -> None:
    async with serving(tls=trustme.CA()) as (_, direct), connect_proxy() as proxy:
        proxy.refuse = 407
        pool = Http11Pool(
            direct.origin,
            ssl_context=direct._ssl_context,
            proxy=parse_origin(f"http://127.0.0.1:{proxy.port}"),
        )
        with pytest.raises(TransportError, match="answered 407"):
            await pool.request("GET", "/", [])
        assert pool.active_connections == 0


def test_only_http_proxies_for_https_servers() -> None:
    with pytest.raises(ValueError, match="proxy"):
        Http11Pool(
            parse_origin("http://h"), ssl_context=None, proxy=parse_origin("http://proxy:3128")
        )
    with pytest.raises(ValueError, match="proxy"):
        Http11Pool(
            parse_origin("https://h"),
            ssl_context=ssl.create_default_context(),
            proxy=parse_origin("https://proxy:3128"),
        )


async def test_close_delimited_body_ends_at_eof_and_is_not_reused() -> None:
    async def http10(server: Server, peer: Peer) -> None:
        await peer.request()
        await peer.stream.send_all(b"HTTP/1.0 200 OK\r\n\r\nuntil the end")

    async with serving(http10) as (server, pool):
        assert await pool.request("GET", "/", []) == (200, b"until the end")
        assert pool.idle_connections == 0
        assert await pool.request("GET", "/", []) == (200, b"until the end")
        assert server.connections == 2


async def test_eof_mid_body_is_a_transport_error() -> None:
    async def short(server: Server, peer: Peer) -> None:
        await peer.request()
        await peer.stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nonly5")

    async with serving(short) as (_, pool):
        with pytest.raises(TransportError, match="closed the connection before the response"):
            await pool.request("GET", "/", [])
        assert (pool.active_connections, pool.idle_connections) == (0, 0)
