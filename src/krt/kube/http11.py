"""A keep-alive HTTP/1.1 connection pool for the API server hot path.

Why not httpx here: ``bench/kube_client.py`` measured the client CPU of one API request
(loopback TLS to localkube, a Run-sized object, this 2-core machine under load) at
0.69-0.99 ms through kr8s's ``call_api`` and 0.63-0.96 ms through a bare
``httpx.AsyncClient.request`` with a prebuilt absolute URL: httpx's own machinery (Request
and URL objects, header merging, cookies, auth and redirect generators, httpcore's pool
scan and separate TLS writes for head and body) is most of the cost, so "bypass kr8s, keep
httpx" saves little. The same exchange over this pool takes 0.27-0.39 ms (create, GET and
status PUT 2.2-2.7x cheaper than the kr8s path in the same run): the request head is
written here from headers validated once (:func:`check_header`), head and body leave in ONE
``send_all`` (one TLS record, one syscall), and the response is read by
:mod:`~krt.kube.http11_response` when it has the usual shape (an ``HTTP/1.1`` final status,
a ``Content-Length`` or chunked body) and by h11 (a well-kept sans-I/O library) otherwise.
TLS is :class:`krt.tls_stream.TlsStream` (shared with localkube's API server), not
``trio.SSLStream``. Together these took a status PUT from 0.28 to 0.17 ms of client CPU and
a watch event received from 0.18-0.20 to 0.11-0.13 ms (``bench/kube_client.py``, same hour;
callgrind: 1.05M -> 0.56-0.59M instructions per PUT, 415K -> 243K per watch event).

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
:class:`TransportError`, whose message says in words what happened (``cannot connect to
host:6443: connection refused``), never an exception repr. Time: opening a connection (TCP
connect, proxy ``CONNECT``, TLS handshake) is bounded by ``connect_timeout`` seconds, as
client-go bounds its dial and TLS handshake, so a server that accepts and never answers (or
is frozen) fails the request instead of hanging it; everything after that is bounded by the
callers' trio cancel scopes.

Layout: this module is the pool and the public surface; its parts live beside it, one job
each: :mod:`~krt.kube.http11_framing` (origin, header checks, request heads; no I/O),
:mod:`~krt.kube.http11_connection` (one connection's exchange and a streamed response),
:mod:`~krt.kube.http11_response` (response heads and chunked bodies; no I/O),
:mod:`~krt.kube.http11_dial` (TCP, proxy tunnel and TLS under the connect deadline) and
:mod:`~krt.kube.http11_errors` (:class:`TransportError` and the wording of failures).
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Final

import trio

from krt.kube.http11_connection import Connection, StreamedResponse
from krt.kube.http11_dial import open_connection
from krt.kube.http11_errors import BROKEN, TransportError, describe_failure
from krt.kube.http11_framing import Origin, check_header, parse_origin, request_head

__all__ = [
    "Http11Pool",
    "Origin",
    "StreamedResponse",
    "TransportError",
    "check_header",
    "parse_origin",
]

#: httpx's defaults, which the kr8s session used before this pool.
DEFAULT_MAX_CONNECTIONS: Final = 100
DEFAULT_KEEPALIVE_EXPIRY: Final = 5.0
#: Seconds to open a connection (TCP, proxy tunnel, TLS handshake); client-go's TLS
#: handshake timeout.
DEFAULT_CONNECT_TIMEOUT: Final = 10.0

_RETRYABLE_METHODS: Final = frozenset({"GET", "HEAD"})


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
        self._idle: list[Connection] = []
        self._active: set[Connection] = set()
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
        return request_head(
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
                status, _ = await connection.read_head()
                content = await connection.read_body()
                clean = True
                return status, content
            except (*BROKEN, TransportError) as exc:
                stale = connection.reused and not connection.received
                if retried or not stale or method not in _RETRYABLE_METHODS:
                    if isinstance(exc, TransportError):
                        raise
                    raise TransportError(describe_failure(exc)) from exc
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
                status, response_headers = await connection.read_head()
            except BROKEN as exc:
                raise TransportError(describe_failure(exc)) from exc
            response = StreamedResponse(connection, status, response_headers)
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

    async def _acquire(self) -> Connection:
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
            connection = await open_connection(
                self.origin,
                ssl_context=self._ssl_context,
                server_hostname=self._server_hostname,
                proxy=self.proxy,
                proxy_headers=self._proxy_headers,
                connect_timeout=self._connect_timeout,
            )
            self.connections_opened += 1
            self._active.add(connection)
            return connection
        except BaseException:
            self._limit.release()
            raise

    def _release(self, connection: Connection, *, reuse: bool) -> None:
        if connection in self._active:
            self._active.discard(connection)
            self._limit.release()
        if reuse and not self.closed and connection.is_reusable():
            connection.next_cycle()
            connection.idle_since = trio.current_time()
            self._idle.append(connection)
        else:
            connection.close_now()
