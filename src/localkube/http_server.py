"""A lean HTTPS/1.1 server on trio for the API server's ASGI app (h11 parses, we frame).

Why not hypercorn: profiling ``bench/localkube.py`` (py-spy, 8 writers, 10 watchers)
showed hypercorn's own machinery (a task spawned per request, an event-object round trip
per ASGI message, a lock and cancel scope per send, and separate TLS records for the
response head, body and end) taking about 35% of the server's CPU, against 20% for the
API server's own work (store, handlers, watch). This module keeps the request parsing in
h11 (a well-kept sans-I/O library) and does the rest in one task per connection:

* the request is served in the connection's task, no task per request;
* a response with a ``content-length`` leaves in ONE ``send_all`` (status line, headers
  and body together: one TLS record, one syscall);
* a streamed response (no ``content-length``: watches, log follows) is chunked; its head
  leaves at once and then one chunk per ``http.response.body`` message (the watch stream
  already coalesces the events ready at the same time into one message);
* after the request body, ``receive()`` waits for the peer to close, answering the ASGI
  ``http.disconnect`` a streaming handler waits for.

Responses are framed here rather than through h11 (a status line and header lines are
simple; h11's validating writer cost as much as its parser): header names and values
with CR, LF (or a colon in a name) are refused, the body may not exceed its
``content-length``, HEAD, 1xx, 204 and 304 answers carry no body. A request of the common
shape (HTTP/1.1, plain header lines, a ``Content-Length`` body or none) is read by
:mod:`localkube.http_head` in one pass; any other goes to an ``h11.Connection`` made for
that request cycle and fed the unread bytes, which then decides exactly as before.

HTTP/1.1 keep-alive (idle connections close after :data:`KEEP_ALIVE_SECONDS`, by one timer
task per connection rather than a cancel scope per request; HTTP/1.0 and
``Connection: close`` end after one response), ``Expect: 100-continue`` honoured, no
upgrades. Malformed requests get h11's suggested status (400, 431, ...) and the
connection closes. Sends after the client went away are dropped silently, as ASGI servers
do; the connection then closes. TLS comes from the caller's context (the API server's:
EC P-256 certificate, TLS 1.2+, ALPN ``http/1.1``) through
:class:`localkube.tls_stream.ServerTlsStream`, HTTPS-compatible (no ``close_notify``).
"""

from __future__ import annotations

import email.utils
import http
import logging
import ssl
import time
import urllib.parse
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import h11
import trio

from localkube.http_head import NEED_MORE, Head, read_head
from localkube.tls_stream import ServerTlsStream

log = logging.getLogger("localkube.http_server")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

KEEP_ALIVE_SECONDS = 75.0
"""Seconds an idle keep-alive connection is kept before the server closes it."""
HANDSHAKE_SECONDS = 10.0
"""Seconds a client has to complete the TLS handshake."""
DRAIN_SECONDS = 5.0
"""Seconds allowed for reading the unread rest of a request body after its response."""
MAX_HEAD_BYTES = 64 * 1024
"""Largest request head (request line and headers, bytes); larger gets 431."""
MAX_BUFFERED_BYTES = 64 * 1024
"""Bytes a client may send ahead (pipelined) while its streamed response runs."""

_REASONS = {status.value: status.phrase.encode("ascii") for status in http.HTTPStatus}


class _DateHeader:
    """The ``date`` header value, formatted at most once per second."""

    def __init__(self) -> None:
        self.second = -1
        self.value = b""

    def now(self) -> bytes:
        second = int(time.time())
        if second != self.second:
            self.second = second
            self.value = email.utils.formatdate(second, usegmt=True).encode("ascii")
        return self.value


_DATE = _DateHeader()


def _header_line(name: bytes, value: bytes) -> bytes:
    if b"\r" in value or b"\n" in value or b"\r" in name or b"\n" in name or b":" in name:
        raise ValueError(f"invalid response header {name!r}: {value!r}")
    return name + b": " + value + b"\r\n"


_RECURRING = frozenset({b"content-type", b"cache-control"})
_LINES: dict[tuple[bytes, bytes], bytes] = {}
"""Checked header lines of the app's recurring headers (content-type, cache-control)."""
MAX_CACHED_LINES = 256


def _cached_header_line(name: bytes, value: bytes) -> bytes:
    """:func:`_header_line`, kept for header pairs that recur (the app sends few distinct)."""
    line = _LINES.get((name, value))
    if line is None:
        line = _header_line(name, value)
        if len(_LINES) >= MAX_CACHED_LINES:
            _LINES.clear()
        _LINES[(name, value)] = line
    return line


def _wants_close(request: h11.Request) -> bool:
    """Whether the request ends its connection (HTTP/1.0, or ``Connection: close``)."""
    if request.http_version != b"1.1":
        return True
    return any(
        name == b"connection" and b"close" in value.lower() for name, value in request.headers
    )


class _Exchange:
    """One connection's HTTP/1.1 state and the ASGI ``receive``/``send`` of its request.

    h11 parses requests (one ``h11.Connection`` per request cycle, fed what the previous
    one left unread); responses are framed here: a status line, the app's headers,
    ``date``, and the body as sized or chunked.
    """

    def __init__(self, app: App, stream: ServerTlsStream, scope: Scope) -> None:
        self.app = app
        self.stream = stream
        self.base_scope = scope
        # bytes received and not parsed yet; h11 takes them over for an unusual request
        self.buffer = bytearray()
        self.eof = False  # the peer ended its side: nothing more will arrive
        self.conn: h11.Connection | None = None  # the h11 parser of the current request, if any
        self.body_left = 0  # fast path: request body bytes not yet delivered
        # per request
        self.head = b""  # the response head, held until the body of a sized response
        self.response_started = False
        self.response_done = False
        self.body_done = False
        self.head_request = False
        self.bodyless = False  # HEAD, 1xx, 204, 304: no body on the wire whatever the app sends
        self.keep_alive = True
        self.chunked = False
        self.declared_length: int | None = None
        self.sent_length = 0
        self.continue_sent = False
        # per connection
        self.idle = trio.CancelScope()  # the connection's scope (set by serve())
        self.waiting_since: float | None = None  # trio time the wait for a request began
        self.peer_gone = False
        self.broken = False

    async def _next_event(self) -> Any:
        assert self.conn is not None
        while True:
            event = self.conn.next_event()
            if event is not h11.NEED_DATA:
                return event
            data = await self.stream.receive_some()
            self.conn.receive_data(bytes(data))

    async def _receive_into_buffer(self) -> bool:
        """Read once into :attr:`buffer`; False at the end of the stream."""
        if not self.eof:
            try:
                data = await self.stream.receive_some()
            except trio.BrokenResourceError:
                data = b""
            if data:
                self.buffer += data
                return True
            self.eof = True
        return False

    async def _read_request(self) -> Head | h11.Request | None:
        """The next request's head: fast path, or h11's; None once the connection ends."""
        found = read_head(self.buffer, max_head_bytes=MAX_HEAD_BYTES)
        if found is NEED_MORE:  # the usual case: wait for the next request
            # _close_when_idle ends the connection if this wait lasts too long (a cancel
            # scope or deadline per request would cost more than the request's parsing)
            self.waiting_since = trio.current_time()
            try:
                while found is NEED_MORE and await self._receive_into_buffer():
                    found = read_head(self.buffer, max_head_bytes=MAX_HEAD_BYTES)
            finally:
                self.waiting_since = None
            if self.idle.cancel_called:
                return None  # the idle limit passed as the request arrived: close
        if isinstance(found, Head):
            del self.buffer[: found.size]
            self.body_left = found.content_length
            return found
        if not self.buffer and self.eof:
            return None  # closed between requests
        # an unusual (or incomplete, or malformed) request: h11 takes it from here
        self.conn = conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        if self.buffer:  # (h11 takes empty data for the end of the stream)
            conn.receive_data(bytes(self.buffer))
            self.buffer.clear()
        if self.eof:
            conn.receive_data(b"")
        with trio.move_on_after(KEEP_ALIVE_SECONDS):
            event = await self._next_event()
            return event if isinstance(event, h11.Request) else None  # or ConnectionClosed
        return None

    async def serve(self) -> None:
        """Serve requests until the peer closes, the idle timeout passes or an error ends it.

        Raises:
            h11.RemoteProtocolError: a malformed request (the caller answers it).
            trio.BrokenResourceError, trio.ClosedResourceError: the connection failed.
        """
        error: Exception | None = None
        async with trio.open_nursery() as nursery:
            self.idle = nursery.cancel_scope
            nursery.start_soon(self._close_when_idle)
            try:
                await self._serve_requests()
            except Exception as exc:  # raised below, outside the nursery's exception group
                error = exc
            nursery.cancel_scope.cancel()
        if error is not None:
            raise error

    async def _close_when_idle(self) -> None:
        """Cancel :attr:`idle` once the wait for a request has lasted KEEP_ALIVE_SECONDS.

        Wakes about once per KEEP_ALIVE_SECONDS: the time a wait began is all a request
        records (:attr:`waiting_since`; None while a request is being served).
        """
        while True:
            since = self.waiting_since
            now = trio.current_time()
            if since is not None and now >= since + KEEP_ALIVE_SECONDS:
                self.idle.cancel()
                return
            await trio.sleep_until(
                now + KEEP_ALIVE_SECONDS if since is None else since + KEEP_ALIVE_SECONDS
            )

    async def _serve_requests(self) -> None:
        while True:
            self._reset(keep_alive=True, head_request=False)  # no response in this cycle yet
            request = await self._read_request()
            if request is None:
                return
            await self._serve_request(request)
            if self.broken or self.peer_gone or not self.response_done:
                return
            if self.conn is None:
                if not await self._drain_body() or not self.keep_alive:
                    return
                continue
            if self.conn.client_is_waiting_for_100_continue:
                return  # answered without asking for the body: it may never come
            # read (and drop) what the app left of the request body: closing with unread
            # data would reset the connection and could lose the response just sent
            if self.conn.their_state is h11.SEND_BODY:
                with trio.move_on_after(DRAIN_SECONDS):
                    while self.conn.their_state is h11.SEND_BODY:
                        if isinstance(await self._next_event(), h11.ConnectionClosed):
                            return
            if not self.keep_alive or self.conn.their_state is not h11.DONE:
                return
            unread, closed = self.conn.trailing_data
            self.conn = None  # the next request starts on the fast path again
            self.buffer[:] = unread
            self.eof = closed

    async def _drain_body(self) -> bool:
        """Fast path: drop the request body the app left unread; False if it never came."""
        if not self.body_left:
            return True
        with trio.move_on_after(DRAIN_SECONDS):
            while self.body_left:
                if not self.buffer and not await self._receive_into_buffer():
                    return False
                taken = min(self.body_left, len(self.buffer))
                del self.buffer[:taken]
                self.body_left -= taken
        return not self.body_left

    def _reset(self, *, keep_alive: bool, head_request: bool) -> None:
        """Forget the previous request's response state."""
        self.head = b""
        self.response_started = self.response_done = self.body_done = False
        self.continue_sent = self.chunked = self.bodyless = False
        self.declared_length = None
        self.sent_length = 0
        self.keep_alive = keep_alive
        self.head_request = head_request

    async def _serve_request(self, request: Head | h11.Request) -> None:
        method = request.method.decode("ascii")
        if isinstance(request, Head):
            keep_alive = not request.close
            http_version = "1.1"
            headers = request.headers
        else:
            keep_alive = not _wants_close(request)
            http_version = request.http_version.decode("ascii")
            headers = list(request.headers)
        self._reset(keep_alive=keep_alive, head_request=method == "HEAD")
        raw_path, _, query = bytes(request.target).partition(b"?")
        scope = dict(self.base_scope)
        scope["method"] = method
        scope["http_version"] = http_version
        scope["path"] = urllib.parse.unquote(raw_path.decode("latin-1"))
        scope["raw_path"] = raw_path
        scope["query_string"] = query
        scope["headers"] = headers
        try:
            await self.app(scope, self.receive, self.send)
        except Exception:
            log.exception("unhandled error serving %s %r", method, raw_path)
            if not self.response_started:
                self.keep_alive = False
                await self.send({"type": "http.response.start", "status": 500, "headers": []})
                await self.send({"type": "http.response.body", "body": b""})
            else:
                self.broken = True  # a half-sent response: close the connection

    async def receive(self) -> Message:
        """ASGI ``receive``: the request body, then ``http.disconnect`` once the peer closes."""
        if self.conn is not None:
            return await self._receive_h11(self.conn)
        if not self.body_done and not self.peer_gone:
            if self.body_left and not self.buffer and not await self._receive_into_buffer():
                self.peer_gone = True
                return {"type": "http.disconnect"}
            chunk = bytes(self.buffer[: self.body_left])
            del self.buffer[: len(chunk)]
            self.body_left -= len(chunk)
            self.body_done = not self.body_left
            return {"type": "http.request", "body": chunk, "more_body": not self.body_done}
        # the request is complete: what arrives now belongs to the next one (kept for it);
        # an end of stream is the disconnect a streaming handler waits for
        while not self.peer_gone:
            if self.eof:
                self.peer_gone = True
                break
            try:
                data = await self.stream.receive_some()
            except trio.BrokenResourceError:
                data = b""
            if not data or len(self.buffer) + len(data) > MAX_BUFFERED_BYTES:
                self.eof = not data
                self.peer_gone = True
            else:
                self.buffer += data
        return {"type": "http.disconnect"}

    async def _receive_h11(self, conn: h11.Connection) -> Message:
        """:meth:`receive` for a request h11 parses."""
        if not self.body_done and not self.peer_gone:
            if conn.client_is_waiting_for_100_continue and not self.response_started:
                if not self.continue_sent:
                    self.continue_sent = True
                    await self._send_bytes(b"HTTP/1.1 100 Continue\r\n\r\n")
            try:
                event = await self._next_event()
            except (h11.RemoteProtocolError, trio.BrokenResourceError):
                self.peer_gone = True
                return {"type": "http.disconnect"}
            if isinstance(event, h11.Data):
                return {"type": "http.request", "body": bytes(event.data), "more_body": True}
            if isinstance(event, h11.EndOfMessage):
                self.body_done = True
                return {"type": "http.request", "body": b"", "more_body": False}
            self.peer_gone = True
            return {"type": "http.disconnect"}
        while not self.peer_gone:
            try:
                data = await self.stream.receive_some()
            except trio.BrokenResourceError:
                data = b""
            if not data or len(conn.trailing_data[0]) + len(data) > MAX_BUFFERED_BYTES:
                self.peer_gone = True
            else:
                conn.receive_data(bytes(data))
        return {"type": "http.disconnect"}

    def _start(self, status: int, headers: Any) -> None:
        lines = [b"HTTP/1.1 %d %s\r\n" % (status, _REASONS.get(status, b""))]
        for raw_name, value in headers:
            name = bytes(raw_name).lower()
            if name == b"content-length":
                self.declared_length = int(value)
            elif name == b"transfer-encoding":
                continue  # framing is ours: chunked when the length is unknown
            elif name == b"connection":
                if b"close" in bytes(value).lower():
                    self.keep_alive = False
                continue
            elif name in _RECURRING:
                lines.append(_cached_header_line(name, bytes(value)))
            else:
                lines.append(_header_line(name, bytes(value)))
        if self.declared_length is not None:
            lines.append(b"content-length: %d\r\n" % self.declared_length)
        self.bodyless = self.head_request or status < 200 or status in (204, 304)
        if self.declared_length is None and not self.bodyless and self.keep_alive:
            # unknown length: chunks (on a closing connection its end delimits the body)
            self.chunked = True
            lines.append(b"transfer-encoding: chunked\r\n")
        if not self.keep_alive:
            lines.append(b"connection: close\r\n")
        lines.append(b"date: " + _DATE.now() + b"\r\n\r\n")
        self.head = b"".join(lines)

    async def send(self, message: Message) -> None:
        """ASGI ``send``: hold the head of a sized response until its body, then send once.

        Raises:
            RuntimeError: messages out of order, or more body than ``content-length``.
            ValueError: a header name or value that would break the response framing.
        """
        if self.broken or self.peer_gone or self.response_done:
            return  # the client went away or the response ended: drop, as ASGI servers do
        kind = message["type"]
        if kind == "http.response.start":
            if self.response_started:
                raise RuntimeError("http.response.start sent twice")
            self._start(int(message["status"]), message.get("headers", ()))
            self.response_started = True
            if self.declared_length is None:  # a stream: the client waits for its head
                head, self.head = self.head, b""
                await self._send_bytes(head)
            return
        if kind != "http.response.body":
            raise RuntimeError(f"unexpected ASGI message {kind!r}")
        if not self.response_started:
            raise RuntimeError("http.response.body before http.response.start")
        out, self.head = self.head, b""
        body = bytes(message.get("body", b""))
        more = bool(message.get("more_body", False))
        if body and not self.bodyless:
            self.sent_length += len(body)
            if self.declared_length is not None and self.sent_length > self.declared_length:
                self.broken = True
                raise RuntimeError("response body longer than its content-length")
            out += b"%x\r\n%s\r\n" % (len(body), body) if self.chunked else body
        if not more:
            self.response_done = True
            if self.chunked:
                out += b"0\r\n\r\n"
            elif self.declared_length not in (None, self.sent_length) and not self.bodyless:
                self.broken = True  # shorter than declared: the connection must end
        if out:
            await self._send_bytes(out)

    async def _send_bytes(self, data: bytes) -> None:
        if not data or self.broken:
            return
        try:
            await self.stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self.broken = True

    async def reject(self, error: h11.RemoteProtocolError) -> None:
        """Answer a malformed request with h11's suggested status (the connection then closes)."""
        if self.response_started:
            return  # this request was answered (or half): the connection just closes
        status = error.error_status_hint
        body = f"{status} {_REASONS.get(status, b'').decode()}: {error}\n".encode()
        self._reset(keep_alive=False, head_request=False)
        self._start(status, [(b"content-type", b"text/plain; charset=utf-8"),
                             (b"content-length", str(len(body)).encode())])  # fmt: skip
        self.response_started = True
        await self.send({"type": "http.response.body", "body": body})


async def serve_connection(
    app: App,
    context: ssl.SSLContext,
    transport: trio.abc.Stream,
    scope: Scope,
) -> None:
    """Serve HTTPS requests from one accepted connection until it ends; closes it.

    Args:
        app: the ASGI app. context: the server TLS context.
        transport: the accepted byte stream (a TCP socket stream; tests pass memory
            streams). Ownership passes to this function.
        scope: the connection-level ASGI scope entries (``type``, ``server``, ``client``...).

    Never raises for client misbehaviour (bad TLS, malformed HTTP, early close): the
    connection just ends.
    """
    stream = ServerTlsStream(transport, context)
    exchange: _Exchange | None = None
    try:
        with trio.fail_after(HANDSHAKE_SECONDS):
            await stream.do_handshake()
        exchange = _Exchange(app, stream, scope)
        await exchange.serve()
    except h11.RemoteProtocolError as exc:
        if exchange is not None:
            await exchange.reject(exc)
    except (trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError):
        pass  # the client went away, or never finished its handshake
    except Exception:  # one connection's failure must never stop the server
        log.exception("error on an HTTPS connection")
    finally:
        # no close_notify, as HTTPS servers do; clients take EOF as the end
        await trio.aclose_forcefully(stream)


async def serve_https(
    app: App,
    *,
    host: str,
    port: int,
    context: ssl.SSLContext,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` over HTTPS/1.1 on ``host:port`` until cancelled.

    Args:
        app: an ASGI 3 ``http`` application (no ``lifespan`` messages are sent).
        host: the address to listen on (IPv4 or IPv6 literal, or a name).
        port: the TCP port; 0 picks a free one.
        context: the server-side TLS context (certificate, ALPN ``http/1.1``).
        task_status: receives the bound port once listening.

    Raises:
        OSError: the address cannot be bound.
    """
    listeners = await trio.open_tcp_listeners(port, host=host)
    bound = listeners[0].socket.getsockname()
    scope: Scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "scheme": "https",
        "root_path": "",
        "server": (host, bound[1]),
    }

    async def handler(tcp: trio.SocketStream) -> None:
        try:
            client = tcp.socket.getpeername()[:2]
        except OSError:  # already reset by the peer
            await trio.aclose_forcefully(tcp)
            return
        await serve_connection(app, context, tcp, {**scope, "client": client})

    async with trio.open_nursery() as nursery:
        await nursery.start(trio.serve_listeners, handler, listeners)
        task_status.started(int(bound[1]))
