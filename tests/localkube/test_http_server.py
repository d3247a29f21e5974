"""The lean HTTPS/1.1 server under the API server (:mod:`localkube.http_server`).

Driven in memory (trio memory streams, real TLS, an h11 client) so that timing rules run
on the virtual clock; one test goes through a real listening socket.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import h11
import pytest
import trio
import trio.testing
import trustme

from localkube import http_server
from localkube.http_server import App, Receive, Scope, Send

CONNECTION_SCOPE: Scope = {"type": "http", "http_version": "1.1", "scheme": "https"}


@dataclass
class Contexts:
    server: ssl.SSLContext
    client: ssl.SSLContext


@pytest.fixture(scope="module")
def contexts() -> Contexts:
    """A server context for ``localhost`` and a client context trusting its CA."""
    ca = trustme.CA()
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost", "127.0.0.1").configure_cert(server)
    client = ssl.create_default_context()
    ca.configure_trust(client)
    return Contexts(server, client)


class CountingStream(trio.abc.Stream):
    """A transport that counts ``send_all`` calls (TLS records leave one call each)."""

    def __init__(self, inner: trio.abc.Stream) -> None:
        self.inner = inner
        self.sends = 0

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        self.sends += 1
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        return await self.inner.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self.inner.aclose()


@dataclass
class Client:
    """An h11 client on a TLS stream to one served connection."""

    stream: trio.SSLStream[trio.abc.Stream]
    transport: CountingStream
    conn: h11.Connection = field(default_factory=lambda: h11.Connection(h11.CLIENT))

    async def send(self, *events: Any) -> None:
        await self.stream.send_all(b"".join(self.conn.send(e) or b"" for e in events))

    async def event(self) -> Any:
        while True:
            event = self.conn.next_event()
            if event is not h11.NEED_DATA:
                return event
            self.conn.receive_data(bytes(await self.stream.receive_some()))

    async def response(self) -> tuple[h11.Response, bytes]:
        head = await self.event()
        assert isinstance(head, h11.Response), head
        body = b""
        while True:
            event = await self.event()
            if isinstance(event, h11.EndOfMessage):
                break
            assert isinstance(event, h11.Data), event
            body += bytes(event.data)
        if self.conn.our_state is h11.DONE and self.conn.their_state is h11.DONE:
            self.conn.start_next_cycle()
        return head, body

    async def get(self, target: str, **headers: str) -> tuple[h11.Response, bytes]:
        await self.send(request("GET", target, **headers), h11.EndOfMessage())
        return await self.response()


def request(method: str, target: str, **headers: str) -> h11.Request:
    pairs = [("host", "localhost"), *((k.replace("_", "-"), v) for k, v in headers.items())]
    return h11.Request(method=method, target=target, headers=pairs)


Serve = Callable[[App], Any]


@pytest.fixture
async def serve(contexts: Contexts) -> AsyncIterator[Callable[[App], Any]]:
    """``await serve(app)`` -> a :class:`Client` connected to ``app`` through TLS in memory."""
    async with trio.open_nursery() as nursery:

        async def connect(app: App) -> Client:
            client_end, server_end = trio.testing.memory_stream_pair()
            counting = CountingStream(server_end)
            nursery.start_soon(
                http_server.serve_connection, app, contexts.server, counting, CONNECTION_SCOPE
            )
            stream = trio.SSLStream(
                client_end, contexts.client, server_hostname="localhost", https_compatible=True
            )
            await stream.do_handshake()
            return Client(stream, counting)

        yield connect
        nursery.cancel_scope.cancel()


async def read_body(receive: Receive) -> bytes:
    body = b""
    while True:
        message = await receive()
        assert message["type"] == "http.request", message
        body += message.get("body", b"")
        if not message.get("more_body", False):
            return body


async def echo_app(scope: Scope, receive: Receive, send: Send) -> None:
    """Answers ``METHOD path?query raw_path body`` as a sized response."""
    body = await read_body(receive)
    text = f"{scope['method']} {scope['path']}?{scope['query_string'].decode()} ".encode()
    data = text + scope["raw_path"] + b" " + body
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-length", str(len(data)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": data})


async def test_sized_response_leaves_in_one_tls_record(serve: Serve) -> None:
    client: Client = await serve(echo_app)
    before = client.transport.sends
    head, body = await client.get("/api/v1/namespaces/a%2Fb/pods?watch=1&x=%20")
    assert head.status_code == 200
    assert head.reason == b"OK"
    assert body == b"GET /api/v1/namespaces/a/b/pods?watch=1&x=%20 /api/v1/namespaces/a%2Fb/pods "
    assert dict(head.headers)[b"content-length"] == str(len(body)).encode()
    assert b"date" in dict(head.headers)
    assert client.transport.sends - before == 1


async def test_keep_alive_serves_many_requests_and_pipelined_ones(serve: Serve) -> None:
    client: Client = await serve(echo_app)
    for i in range(3):
        _, body = await client.get(f"/r{i}")
        assert body.startswith(f"GET /r{i}?".encode())
    # two requests in one write: both answered, in order
    pipelined = b"".join(
        h11.Connection(h11.CLIENT).send(request("GET", f"/p{i}")) or b"" for i in range(2)
    )
    await client.stream.send_all(pipelined)
    for i in range(2):
        client.conn = h11.Connection(h11.CLIENT)
        client.conn.send(request("GET", f"/p{i}"))
        client.conn.send(h11.EndOfMessage())
        _, body = await client.response()
        assert body.startswith(f"GET /p{i}?".encode())


async def test_request_body_is_delivered_and_expect_100_continue_is_answered(
    serve: Serve,
) -> None:
    client: Client = await serve(echo_app)
    await client.send(
        h11.Request(
            method="POST",
            target="/x",
            headers=[("host", "localhost"), ("content-length", "5"), ("expect", "100-continue")],
        )
    )
    informational = await client.event()
    assert isinstance(informational, h11.InformationalResponse)
    assert informational.status_code == 100
    await client.send(h11.Data(data=b"hello"), h11.EndOfMessage())
    _, body = await client.response()
    assert body.endswith(b" hello")


async def test_streamed_response_sends_its_head_before_any_body(serve: Serve) -> None:
    release = trio.Event()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await release.wait()
        for part in (b"one\n", b"two\n"):
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    client: Client = await serve(app)
    await client.send(request("GET", "/watch"), h11.EndOfMessage())
    with trio.fail_after(5):
        head = await client.event()  # arrives while the app still waits
    assert isinstance(head, h11.Response)
    assert dict(head.headers)[b"transfer-encoding"] == b"chunked"
    release.set()
    chunks = []
    while not isinstance(event := await client.event(), h11.EndOfMessage):
        chunks.append(bytes(event.data))
    assert chunks == [b"one\n", b"two\n"]


async def test_client_close_is_the_disconnect_a_stream_waits_for(serve: Serve) -> None:
    disconnected = trio.Event()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        assert (await receive())["type"] == "http.request"  # the (empty) request body
        assert (await receive())["type"] == "http.disconnect"
        disconnected.set()
        # sending to a client that went away is dropped, not an error
        await send({"type": "http.response.body", "body": b"late", "more_body": True})

    client: Client = await serve(app)
    await client.send(request("GET", "/watch"), h11.EndOfMessage())
    assert isinstance(await client.event(), h11.Response)
    await client.stream.aclose()
    with trio.fail_after(5):
        await disconnected.wait()


async def test_a_stream_that_ends_by_itself_keeps_the_connection_for_the_next_request(
    serve: Serve, autojump_clock: trio.testing.MockClock
) -> None:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["path"] != "/watch":
            await echo_app(scope, receive, send)
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        async with trio.open_nursery() as nursery:  # as a watch: end on timeout or disconnect

            async def disconnect() -> None:
                while (await receive())["type"] != "http.disconnect":
                    pass
                nursery.cancel_scope.cancel()

            nursery.start_soon(disconnect)
            await trio.sleep(30)  # the watch's timeoutSeconds
            await send({"type": "http.response.body", "body": b"event\n", "more_body": True})
            nursery.cancel_scope.cancel()
        await send({"type": "http.response.body", "body": b""})

    client: Client = await serve(app)
    head, body = await client.get("/watch")
    assert (head.status_code, body) == (200, b"event\n")
    _, body = await client.get("/next")
    assert body.startswith(b"GET /next?")


async def test_idle_keep_alive_connection_closes_after_the_limit(
    serve: Serve, autojump_clock: trio.testing.MockClock
) -> None:
    client: Client = await serve(echo_app)
    await client.get("/first")
    start = trio.current_time()
    assert await client.stream.receive_some() == b""  # the server closed it
    assert trio.current_time() - start == pytest.approx(http_server.KEEP_ALIVE_SECONDS, abs=0.1)


async def test_idle_limit_counts_from_the_last_request_and_never_cuts_a_long_response(
    serve: Serve, autojump_clock: trio.testing.MockClock
) -> None:
    """The connection's idle deadline applies only while it waits for the next request."""
    limit = http_server.KEEP_ALIVE_SECONDS

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["path"] != "/slow":
            await echo_app(scope, receive, send)
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await trio.sleep(2 * limit)  # a watch streaming for longer than the idle limit
        await send({"type": "http.response.body", "body": b"done", "more_body": False})

    client: Client = await serve(app)
    await client.get("/first")
    await trio.sleep(limit * 0.6)
    head, body = await client.get("/slow")
    assert (head.status_code, body) == (200, b"done")
    await trio.sleep(limit * 0.6)  # idle, but less than the limit since the last response
    _, body = await client.get("/again")
    assert body.startswith(b"GET /again")
    start = trio.current_time()
    assert await client.stream.receive_some() == b""
    assert trio.current_time() - start == pytest.approx(limit, abs=0.1)


async def test_malformed_request_gets_400_and_the_connection_closes(serve: Serve) -> None:
    client: Client = await serve(echo_app)
    await client.get("/a-good-one-first")
    await client.stream.send_all(b"GET /x HTTP/1.1\r\nbad header line\r\n\r\n")
    data = b""
    while chunk := await client.stream.receive_some():
        data += chunk
    assert data.startswith(b"HTTP/1.1 400 Bad Request\r\n")
    assert b"connection: close" in data.lower()


async def test_head_request_gets_headers_only(serve: Serve) -> None:
    client: Client = await serve(echo_app)
    await client.send(request("HEAD", "/x"), h11.EndOfMessage())
    head, body = await client.response()
    assert head.status_code == 200
    assert int(dict(head.headers)[b"content-length"]) > 0
    assert body == b""
    _, body = await client.get("/after")  # the connection is still in sync
    assert body.startswith(b"GET /after?")


async def test_no_content_response_carries_no_body_and_keeps_the_connection(
    serve: Serve,
) -> None:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["path"] != "/empty":
            await echo_app(scope, receive, send)
            return
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b"ignored"})

    client: Client = await serve(app)
    head, body = await client.get("/empty")
    assert (head.status_code, body) == (204, b"")
    assert b"transfer-encoding" not in dict(head.headers)
    _, body = await client.get("/after")
    assert body.startswith(b"GET /after?")


async def test_app_error_before_the_response_is_a_500(serve: Serve) -> None:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        raise RuntimeError("boom")

    client: Client = await serve(app)
    head, _ = await client.get("/x")
    assert head.status_code == 500


async def test_unread_request_body_is_drained_so_the_next_request_is_served(
    serve: Serve,
) -> None:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] != "POST":
            await echo_app(scope, receive, send)
            return
        # answers without reading the body (as a 401 would)
        await send({"type": "http.response.start", "status": 401, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    client: Client = await serve(app)
    body = b"x" * 100_000
    await client.send(
        h11.Request(
            method="POST",
            target="/x",
            headers=[("host", "localhost"), ("content-length", str(len(body)))],
        ),
        h11.Data(data=body),
        h11.EndOfMessage(),
    )
    head, _ = await client.response()
    assert head.status_code == 401
    _, echoed = await client.get("/next")
    assert echoed.startswith(b"GET /next?")


async def test_connection_close_request_ends_the_connection(serve: Serve) -> None:
    client: Client = await serve(echo_app)
    head, _ = await client.get("/x", connection="close")
    assert head.status_code == 200
    assert await client.stream.receive_some() == b""


async def test_http_1_0_request_is_answered_and_the_connection_closed(serve: Serve) -> None:
    client: Client = await serve(echo_app)
    await client.stream.send_all(b"GET /old HTTP/1.0\r\n\r\n")
    data = b""
    while chunk := await client.stream.receive_some():
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"\r\nconnection: close" in head
    assert body.startswith(b"GET /old?")


async def test_a_header_that_would_split_the_response_is_refused_with_500(serve: Serve) -> None:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        headers = [(b"x-note", b"a\r\nset-cookie: evil"), (b"content-length", b"0")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b""})

    client: Client = await serve(app)
    head, _ = await client.get("/x")
    assert head.status_code == 500
    assert b"set-cookie" not in dict(head.headers)


async def test_recurring_headers_are_checked_whatever_was_sent_before(serve: Serve) -> None:
    """content-type and cache-control lines are kept once checked: a bad value never is."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        kind = b"text/plain" if scope["path"] == "/good" else b"text/plain\r\nset-cookie: evil"
        headers = [(b"content-type", kind), (b"content-length", b"0")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b""})

    client: Client = await serve(app)
    for _ in range(2):
        head, _ = await client.get("/good")
        assert (head.status_code, dict(head.headers)[b"content-type"]) == (200, b"text/plain")
    bad: Client = await serve(app)
    head, _ = await bad.get("/bad")
    assert head.status_code == 500
    assert b"set-cookie" not in dict(head.headers)


async def test_body_longer_than_its_content_length_ends_the_connection(serve: Serve) -> None:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        headers = [(b"content-length", b"2")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"toolong"})

    client: Client = await serve(app)
    await client.send(request("GET", "/x"), h11.EndOfMessage())
    assert await client.stream.receive_some() == b""  # nothing sent, connection closed


async def test_serve_https_listens_and_reports_its_port(contexts: Contexts) -> None:
    async with trio.open_nursery() as nursery:
        port = await nursery.start(
            lambda task_status: http_server.serve_https(
                echo_app,
                host="127.0.0.1",
                port=0,
                context=contexts.server,
                task_status=task_status,
            )
        )
        # a client that is not speaking TLS costs only its own connection
        junk = await trio.open_tcp_stream("127.0.0.1", port)
        await junk.send_all(b"GET / HTTP/1.1\r\n\r\n")
        with trio.fail_after(5):  # the server hangs up (maybe after a TLS alert)
            try:
                while await junk.receive_some():
                    pass
            except trio.BrokenResourceError:
                pass
        await junk.aclose()
        tcp = await trio.open_tcp_stream("127.0.0.1", port)
        stream = trio.SSLStream(
            tcp, contexts.client, server_hostname="localhost", https_compatible=True
        )
        client = Client(stream, CountingStream(tcp))
        head, body = await client.get("/over-tcp")
        assert head.status_code == 200
        assert body.startswith(b"GET /over-tcp?")
        await stream.aclose()
        nursery.cancel_scope.cancel()


async def _raw_response(stream: trio.SSLStream[trio.abc.Stream]) -> tuple[h11.Response, bytes]:
    conn = h11.Connection(h11.CLIENT)
    conn.send(h11.Request(method="GET", target="/", headers=[("host", "localhost")]))
    conn.send(h11.EndOfMessage())
    head: h11.Response | None = None
    body = b""
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(bytes(await stream.receive_some()))
        elif isinstance(event, h11.Response):
            head = event
        elif isinstance(event, h11.Data):
            body += bytes(event.data)
        else:
            assert isinstance(event, h11.EndOfMessage), event
            assert head is not None
            return head, body


async def test_plain_requests_skip_h11_and_unusual_ones_on_the_same_connection_use_it(
    serve: Serve, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fast head reader serves plain requests; h11 still serves chunked ones, in turn."""
    parsers: list[h11.Connection] = []
    real_connection = h11.Connection

    def counting_connection(*args: Any, **kwargs: Any) -> h11.Connection:
        conn = real_connection(*args, **kwargs)
        if conn.our_role is h11.SERVER:
            parsers.append(conn)
        return conn

    monkeypatch.setattr(http_server.h11, "Connection", counting_connection)
    client: Client = await serve(echo_app)
    stream = client.stream
    plain = b"PUT /a?x=1 HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\n\r\nhello"
    chunked = (
        b"POST /b HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
    )
    for data, expected in [
        (plain, b"PUT /a?x=1 /a hello"),
        (chunked, b"POST /b? /b abcde"),
        (plain, b"PUT /a?x=1 /a hello"),
    ]:
        await stream.send_all(data)
        head, body = await _raw_response(stream)
        assert (head.status_code, body) == (200, expected)
    assert len(parsers) == 1  # the chunked request only


async def test_fast_path_reassembles_heads_and_bodies_split_across_reads(serve: Serve) -> None:
    client: Client = await serve(echo_app)
    stream = client.stream
    request = b"PUT /split HTTP/1.1\r\nHost: localhost\r\nContent-Length: 10\r\n\r\n0123456789"
    for cut in (5, 30, len(request) - 4):  # in the request line, a header, the body
        await stream.send_all(request[:cut])
        await trio.testing.wait_all_tasks_blocked()
        await stream.send_all(request[cut:])
        _, body = await _raw_response(stream)
        assert body == b"PUT /split? /split 0123456789"
    # two requests with bodies in one write, then one more: all answered in order
    second = request.replace(b"/split", b"/again")
    await stream.send_all(request + second)
    assert (await _raw_response(stream))[1] == b"PUT /split? /split 0123456789"
    assert (await _raw_response(stream))[1] == b"PUT /again? /again 0123456789"


async def test_fast_path_body_cut_short_by_the_peer_is_a_disconnect(serve: Serve) -> None:
    received: list[Any] = []
    done = trio.Event()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            received.append(message)
            if message["type"] == "http.disconnect" or not message.get("more_body"):
                done.set()
                return

    client: Client = await serve(app)
    head = b"PUT / HTTP/1.1\r\nHost: localhost\r\nContent-Length: 10\r\n\r\n"
    await client.stream.send_all(head + b"012")
    await trio.testing.wait_all_tasks_blocked()
    await client.stream.transport_stream.aclose()  # the client goes away mid-body
    with trio.fail_after(5):
        await done.wait()
    assert received == [
        {"type": "http.request", "body": b"012", "more_body": True},
        {"type": "http.disconnect"},
    ]
