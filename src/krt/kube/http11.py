"""A keep-alive HTTP/1.1 connection pool for the API server hot path (h11 parses, we frame).

Why not httpx here: ``bench/kube_client.py`` measured the client CPU of one API request
(loopback TLS to localkube, a Run-sized object, this 2-core machine under load) at
0.69-0.99 ms through kr8s's ``call_api`` and 0.63-0.96 ms through a bare
``httpx.AsyncClient.request`` with a prebuilt absolute URL: httpx's own machinery (Request
and URL objects, header merging, cookies, auth and redirect generators, httpcore's pool
scan and separate TLS writes for head and body) is most of the cost, so "bypass kr8s, keep
httpx" saves little. The same exchange over this pool takes 0.27-0.39 ms (create, GET and
status PUT 2.2-2.7x cheaper than the kr8s path in the same run): the request head is
written here from headers validated once (:func:`check_header`), head and body leave in ONE
``send_all`` (one TLS record, one syscall), and the response is parsed by h11 (a well-kept
sans-I/O library: framing, chunked bodies, keep-alive rules), whose client state machine is
moved past the request with a prebuilt minimal request of the same method.

kr8s keeps doing what it does well (kubeconfig, exec/token/certificate auth, the TLS
context); :mod:`krt.kube.client` hands this pool kr8s's ``ssl.SSLContext``, server URL and
``proxy-url`` (an ``http://`` proxy, tunnelled with ``CONNECT``).

Connections: opened on demand up to ``max_connections`` (callers beyond that wait), every
idle one kept for reuse (most recently used first) until ``keepalive_expiry`` seconds idle
or until the server closes it (checked without blocking before reuse, as httpcore does).
A connection whose exchange did not finish cleanly (an error, a cancellation, a stream the
caller left early) is closed, never reused. A GET that finds a reused connection closed by
the server before any response byte is retried once on a new connection; other methods
are not retried (the server may have acted on them).

Errors: every transport failure (refused, reset, TLS, a malformed response) raises
:class:`TransportError`. Time: opening a connection (TCP connect, proxy ``CONNECT``, TLS
handshake) is bounded by ``connect_timeout`` seconds, as client-go bounds its dial and TLS
handshake, so a server that accepts and never answers (or is frozen) fails the request
instead of hanging it; everything after that is bounded by the callers' trio cancel scopes.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

import h11
import trio

__all__ = [
    "Http11Pool",
    "Origin",
    "StreamedResponse",
    "TransportError",
    "check_header",
    "parse_origin",
]

#: Bytes asked of the stream per receive.
RECEIVE_BYTES: Final = 65536
#: httpx's defaults, which the kr8s session used before this pool.
DEFAULT_MAX_CONNECTIONS: Final = 100
DEFAULT_KEEPALIVE_EXPIRY: Final = 5.0
#: Seconds to open a connection (TCP, proxy tunnel, TLS handshake); client-go's TLS
#: handshake timeout.
DEFAULT_CONNECT_TIMEOUT: Final = 10.0

_RETRYABLE_METHODS: Final = frozenset({"GET", "HEAD"})
_TOKEN_CHARS: Final = frozenset(
    "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
)


class TransportError(Exception):
    """The exchange failed below HTTP: connect, TLS, proxy, reset, EOF or a malformed answer."""


@dataclass(frozen=True, slots=True)
class Origin:
    """Where the pool connects, parsed from a server URL.

    Attributes:
        tls: ``https`` (True) or ``http``.
        host: host name or address (IPv6 without brackets).
        port: TCP port.
        authority: the ``Host`` header value (``host[:port]``, IPv6 in brackets).
        path_prefix: a path the server lives under (``""`` normally), prepended to every
            request target.
    """

    tls: bool
    host: str
    port: int
    authority: str
    path_prefix: str


def parse_origin(url: str) -> Origin:
    """Parse ``https://host[:port][/prefix]`` (or ``http://``) into an :class:`Origin`.

    Raises:
        ValueError: another scheme, no host, a bad port, or a query/fragment.
    """
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("https", "http"):
        raise ValueError(f"server URL {url!r}: scheme must be https or http")
    if not parts.hostname:
        raise ValueError(f"server URL {url!r}: no host")
    if parts.query or parts.fragment:
        raise ValueError(f"server URL {url!r}: must not have a query or fragment")
    try:
        port = parts.port or (443 if scheme == "https" else 80)
    except ValueError as exc:
        raise ValueError(f"server URL {url!r}: {exc}") from exc
    host = parts.hostname
    authority = parts.netloc.rpartition("@")[2]
    return Origin(
        tls=scheme == "https",
        host=host,
        port=port,
        authority=authority,
        path_prefix=parts.path.rstrip("/"),
    )


def check_header(name: str, value: str) -> tuple[str, str]:
    """Validate one request header for writing verbatim into a request head.

    Returns:
        ``(name, value)`` unchanged.

    Raises:
        ValueError: the name is not an HTTP token, or the value has a control character
            (CR, LF, NUL, ...) or a non-ASCII character.
    """
    if not name or not set(name) <= _TOKEN_CHARS:
        raise ValueError(f"header name {name!r} is not an HTTP token")
    if any(not (0x20 <= ord(ch) <= 0x7E or ch == "\t") for ch in value):
        raise ValueError(f"header {name}: value has control or non-ASCII characters")
    return name, value


def _head(
    method: str, target: str, authority: str, headers: Sequence[tuple[str, str]], length: int
) -> bytes:
    lines = [f"{method} {target} HTTP/1.1\r\nHost: {authority}\r\n"]
    lines += [f"{name}: {value}\r\n" for name, value in headers]
    if length >= 0:
        lines.append(f"Content-Length: {length}\r\n")
    lines.append("\r\n")
    return "".join(lines).encode("ascii")


class _Connection:
    """One keep-alive connection: a (TLS) stream and the h11 state of its current cycle."""

    __slots__ = ("h11", "idle_since", "received", "reused", "socket", "stream")

    def __init__(self, stream: trio.abc.Stream, socket: trio.socket.SocketType) -> None:
        self.stream = stream
        self.socket = socket
        self.h11 = h11.Connection(h11.CLIENT)
        self.idle_since = 0.0
        self.reused = False
        self.received = 0

    def close_now(self) -> None:
        """Close the socket at once (no TLS close_notify: nothing waits for it)."""
        self.socket.close()

    def is_reusable(self) -> bool:
        return self.h11.our_state is h11.DONE and self.h11.their_state is h11.DONE

    async def send_request(self, method: str, head: bytes, body: bytes | None) -> None:
        # h11 only parses here: move its client side past a request of the same method
        # (the method decides the response framing, e.g. no body for HEAD).
        request = _REQUESTS.get(method) or h11.Request(method=method, target="/", headers=_HOST)
        self.h11.send(request)
        self.h11.send(_END)
        self.received = 0
        await self.stream.send_all(head + body if body else head)

    async def next_event(self) -> h11.Event:
        """Return the next response event (Response, Data or EndOfMessage), reading as needed.

        Raises:
            TransportError: EOF before the response ended, or a malformed response.
            OSError, trio.BrokenResourceError, trio.ClosedResourceError: from the stream.
        """
        connection = self.h11
        while True:
            try:
                event = connection.next_event()
            except h11.RemoteProtocolError as exc:
                raise TransportError(f"malformed response: {exc}") from exc
            if event is h11.NEED_DATA:
                data = await self.stream.receive_some(RECEIVE_BYTES)
                if not data:
                    return self._end_of_stream()
                self.received += len(data)
                connection.receive_data(bytes(data))
                continue
            if isinstance(event, h11.InformationalResponse):
                continue
            if isinstance(event, (h11.Response, h11.Data, h11.EndOfMessage)):
                return event
            raise TransportError(f"unexpected response event {event!r}")

    def _end_of_stream(self) -> h11.Event:
        """The server closed: the end of a close-delimited body, or a broken response."""
        self.h11.receive_data(b"")
        try:
            event = self.h11.next_event()
        except h11.RemoteProtocolError as exc:
            raise TransportError(
                f"the server closed the connection before the response ended: {exc}"
            ) from exc
        if not isinstance(event, h11.EndOfMessage):
            raise TransportError("the server closed the connection before the response ended")
        return event


_HOST: Final = [("Host", "h")]
_END: Final = h11.EndOfMessage()
_REQUESTS: Final = {
    m: h11.Request(method=m, target="/", headers=_HOST)
    for m in ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD")
}
#: What a broken connection raises below HTTP (ssl.SSLError is an OSError; trio wraps TLS
#: failures in BrokenResourceError; a pool closed under a request gives ClosedResourceError).
_BROKEN: Final = (OSError, trio.BrokenResourceError, trio.ClosedResourceError)


class StreamedResponse:
    """A response whose body is read as it arrives (watches); see :meth:`Http11Pool.stream`.

    Attributes:
        status: the HTTP status code.
        headers: response headers, names lower-cased (bytes, as h11 gives them).
        complete: whether the whole body has been read.
    """

    def __init__(
        self, connection: _Connection, status: int, headers: list[tuple[bytes, bytes]]
    ) -> None:
        self._connection = connection
        self.status = status
        self.headers = headers
        self.complete = False

    async def read(self) -> bytes:
        """Read the rest of the body.

        Raises:
            TransportError: the stream broke.
        """
        return b"".join([chunk async for chunk in self.iter_bytes()])

    async def iter_bytes(self) -> AsyncGenerator[bytes, None]:
        """Yield body chunks (as received) until the response ends.

        Raises:
            TransportError: the stream broke.
        """
        connection = self._connection
        while not self.complete:
            try:
                event = await connection.next_event()
            except _BROKEN as exc:
                raise TransportError(f"the response stream broke: {exc!r}") from exc
            if isinstance(event, h11.Data):
                yield bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                self.complete = True

    async def iter_lines(self) -> AsyncGenerator[bytes, None]:
        """Yield complete ``\\n``-terminated lines (without the newline) as they arrive.

        A last line without a newline is yielded when the response ends.

        Raises:
            TransportError: the stream broke.
        """
        pending = b""
        async with aclosing(self.iter_bytes()) as chunks:
            async for chunk in chunks:
                if b"\n" not in chunk:
                    pending += chunk
                    continue
                *lines, pending = (pending + chunk).split(b"\n")
                for line in lines:
                    yield line
        if pending:
            yield pending


class Http11Pool:
    """Keep-alive HTTP/1.1 connections to one origin (see the module docstring).

    Args:
        origin: where to connect (:func:`parse_origin`).
        ssl_context: the TLS context for ``https`` origins (CA, client certificate).
        server_hostname: the TLS server name (SNI and certificate check); default the host.
        max_connections: connections open at once (in use or idle); more callers wait.
        keepalive_expiry: seconds an idle connection is kept before it is closed.
        connect_timeout: seconds (> 0) to open a connection: TCP connect, proxy tunnel and
            TLS handshake together.
        proxy: an ``http://`` proxy to tunnel through (HTTP ``CONNECT``), or None.
        proxy_authorization: the ``Proxy-Authorization`` value for ``CONNECT``, or None.

    Raises:
        ValueError: ``https`` without a context, a limit below 1 / expiry below 0 /
            connect timeout not above 0, or a
            proxy for an ``http`` origin or an ``https`` proxy (neither is supported).
    """

    def __init__(
        self,
        origin: Origin,
        *,
        ssl_context: ssl.SSLContext | None,
        server_hostname: str | None = None,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        keepalive_expiry: float = DEFAULT_KEEPALIVE_EXPIRY,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        proxy: Origin | None = None,
        proxy_authorization: str | None = None,
    ) -> None:
        if proxy is not None and (proxy.tls or not origin.tls):
            raise ValueError(
                "a proxy is supported only as an http:// proxy in front of an https server"
            )
        if origin.tls and ssl_context is None:
            raise ValueError("an https origin needs an ssl_context")
        if max_connections < 1:
            raise ValueError(f"max_connections must be at least 1, got {max_connections}")
        if connect_timeout <= 0:
            raise ValueError(f"connect_timeout must be > 0 seconds, got {connect_timeout}")
        self._connect_timeout = connect_timeout
        if keepalive_expiry < 0:
            raise ValueError(f"keepalive_expiry must be >= 0 seconds, got {keepalive_expiry}")
        self.origin = origin
        self.proxy = proxy
        self._proxy_headers = [("Host", origin.authority)]
        if proxy_authorization is not None:
            self._proxy_headers.append(check_header("Proxy-Authorization", proxy_authorization))
        self._ssl_context = ssl_context
        self._server_hostname = server_hostname or origin.host
        self._limit = trio.Semaphore(max_connections)
        self._keepalive_expiry = keepalive_expiry
        self._idle: list[_Connection] = []
        self._active: set[_Connection] = set()
        self.closed = False
        #: Connections opened so far (for tests and metrics).
        self.connections_opened = 0

    @property
    def idle_connections(self) -> int:
        """Idle connections kept for reuse."""
        return len(self._idle)

    @property
    def active_connections(self) -> int:
        """Connections serving a request or stream now."""
        return len(self._active)

    def head(
        self, method: str, target: str, headers: Sequence[tuple[str, str]], body: bytes | None
    ) -> bytes:
        """Return the request head (``Host`` and, with a body, ``Content-Length`` added).

        Args:
            method: HTTP method, upper case.
            target: path and query; the origin's path prefix is prepended.
            headers: checked with :func:`check_header` beforehand.
            body: the body that follows, or None.
        """
        length = len(body) if body is not None else -1
        return _head(
            method, self.origin.path_prefix + target, self.origin.authority, headers, length
        )

    async def request(
        self,
        method: str,
        target: str,
        headers: Sequence[tuple[str, str]],
        body: bytes | None = None,
    ) -> tuple[int, bytes]:
        """Send one request and read the whole response.

        Args:
            method: HTTP method, upper case.
            target: path and query, e.g. ``/api/v1/namespaces/default/pods/p?x=1``.
            headers: extra request headers, checked with :func:`check_header`.
            body: the request body, or None.

        Returns:
            ``(status, body)``.

        Raises:
            TransportError: the exchange failed (see the module docstring on the one retry),
                or the pool is closed.
        """
        head = self.head(method, target, headers, body)
        retried = False
        while True:
            connection = await self._acquire()
            clean = False
            try:
                await connection.send_request(method, head, body)
                status = 0
                chunks: list[bytes] = []
                while True:
                    event = await connection.next_event()
                    if type(event) is h11.Data:
                        chunks.append(bytes(event.data))
                    elif type(event) is h11.Response:
                        status = event.status_code
                    elif type(event) is h11.EndOfMessage:
                        break
                clean = True
                return status, b"".join(chunks)
            except (*_BROKEN, TransportError) as exc:
                stale = connection.reused and not connection.received
                if retried or not stale or method not in _RETRYABLE_METHODS:
                    if isinstance(exc, TransportError):
                        raise
                    raise TransportError(f"{exc!r}") from exc
                retried = True  # a kept connection the server had closed: once more, anew
            finally:
                self._release(connection, reuse=clean)

    @asynccontextmanager
    async def stream(
        self, method: str, target: str, headers: Sequence[tuple[str, str]]
    ) -> AsyncIterator[StreamedResponse]:
        """Send a request without a body; give its response as soon as the head is in.

        The body is read through the :class:`StreamedResponse`. Leaving the context before
        the body ended (or cancellation) closes the connection instead of reusing it.

        Raises:
            TransportError: the exchange failed (reading the body raises it too), or the
                pool is closed.
        """
        head = self.head(method, target, headers, None)
        connection = await self._acquire()
        response: StreamedResponse | None = None
        try:
            try:
                await connection.send_request(method, head, None)
                event = await connection.next_event()
                while not isinstance(event, h11.Response):  # pragma: no cover - h11 order
                    event = await connection.next_event()
            except _BROKEN as exc:
                raise TransportError(f"{exc!r}") from exc
            response = StreamedResponse(connection, event.status_code, list(event.headers))
            yield response
        finally:
            self._release(connection, reuse=response is not None and response.complete)

    async def aclose(self) -> None:
        """Close every connection, idle and in use; later requests raise TransportError.

        Idempotent.
        """
        self.closed = True
        for connection in [*self._idle, *self._active]:
            connection.close_now()
        self._idle.clear()
        await trio.lowlevel.checkpoint()

    # -- connections -----------------------------------------------------------------------

    async def _acquire(self) -> _Connection:
        if self.closed:
            raise TransportError("the HTTP connection pool is closed")
        try:
            self._limit.acquire_nowait()
        except trio.WouldBlock:
            await self._limit.acquire()
        try:
            now = trio.current_time()
            while self._idle:
                connection = self._idle.pop()
                if (
                    now - connection.idle_since < self._keepalive_expiry
                    and not connection.socket.is_readable()
                ):
                    connection.reused = True
                    self._active.add(connection)
                    return connection
                connection.close_now()  # expired, or the server closed it (EOF is readable)
            try:
                connection = await self._connect()
            except _BROKEN as exc:
                raise TransportError(f"cannot connect to {self.origin.authority}: {exc!r}") from exc
            self._active.add(connection)
            return connection
        except BaseException:
            self._limit.release()
            raise

    async def _connect(self) -> _Connection:
        with trio.move_on_after(self._connect_timeout):
            return await self._open()
        via = f" via proxy {self.proxy.authority}" if self.proxy is not None else ""
        steps = "TCP connect and TLS handshake" if self.origin.tls else "TCP connect"
        raise TransportError(
            f"cannot connect to {self.origin.authority}{via}: no answer within "
            f"{self._connect_timeout:g} s ({steps})"
        )

    async def _open(self) -> _Connection:
        if self.proxy is None:
            tcp = await trio.open_tcp_stream(self.origin.host, self.origin.port)
        else:
            tcp = await trio.open_tcp_stream(self.proxy.host, self.proxy.port)
            try:
                await self._tunnel(tcp)
            except BaseException:
                tcp.socket.close()
                raise
        stream: trio.abc.Stream = tcp
        if self.origin.tls:
            assert self._ssl_context is not None
            tls = trio.SSLStream(
                tcp,
                self._ssl_context,
                server_hostname=self._server_hostname,
                https_compatible=True,
            )
            try:
                await tls.do_handshake()
            except BaseException:
                tcp.socket.close()
                raise
            stream = tls
        self.connections_opened += 1
        return _Connection(stream, tcp.socket)

    async def _tunnel(self, tcp: trio.SocketStream) -> None:
        """Ask the proxy for a tunnel to the origin (``CONNECT host:port``).

        Raises:
            TransportError: the proxy refused, closed, or answered malformed.
        """
        connection = h11.Connection(h11.CLIENT)
        request = h11.Request(
            method="CONNECT", target=self.origin.authority, headers=self._proxy_headers
        )
        await tcp.send_all(connection.send(request) + connection.send(h11.EndOfMessage()))
        while True:
            try:
                event = connection.next_event()
            except h11.RemoteProtocolError as exc:
                raise TransportError(f"proxy: malformed answer to CONNECT: {exc}") from exc
            if event is h11.NEED_DATA:
                data = await tcp.receive_some(RECEIVE_BYTES)
                if not data:
                    raise TransportError("proxy: closed the connection during CONNECT")
                connection.receive_data(data)
            elif isinstance(event, h11.Response):
                if not 200 <= event.status_code < 300:
                    raise TransportError(
                        f"proxy: CONNECT {self.origin.authority} answered {event.status_code}"
                    )
                if connection.trailing_data[0]:
                    raise TransportError("proxy: sent data before the tunnel was used")
                return

    def _release(self, connection: _Connection, *, reuse: bool) -> None:
        if connection in self._active:
            self._active.discard(connection)
            self._limit.release()
        if reuse and not self.closed and connection.is_reusable():
            connection.h11.start_next_cycle()
            connection.reused = False
            connection.idle_since = trio.current_time()
            self._idle.append(connection)
        else:
            connection.close_now()
