"""One reusable gRPC connection per Runtime Service, reopened when it fails.

HTTP/2 multiplexes every concurrent invoke for a Runtime over one connection, so the
per-invoke cost is a stream, not a TCP (or TLS) handshake. The connection tasks live in the
pool's own nursery (opened by :func:`open_channel_pool`), never in a request's, so a request
that is cancelled cannot take a shared connection down with it.

Reconnect policy: a connection that closed or got GOAWAY is dropped; the next call opens a
new one. Opening happens under the calling request's deadline and a per-target lock, so a
burst of requests after a failure makes one connection attempt, not one each. A call is
retried on a fresh connection only when the old one failed *before* anything was sent
(``dispatched=False``); the gateway never retries after dispatch (seed 000, Invoke Contract).
"""

from __future__ import annotations

import logging
import socket
import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Final

import trio

from gateway.targets import Resolver, Target
from krt.api.constants import RUNTIME_LABEL
from krt.grpc.client import (
    DEFAULT_MAX_MESSAGE_BYTES,
    ConnectionLostError,
    GrpcConnection,
    Metadata,
)
from krt.grpc.dial import (
    CLOSED_DURING_HANDSHAKE_TEXT,
    DIAL_ERRORS,
    DialProgress,
    closed_during_handshake,
    dial_failure,
    open_stream,
)

log = logging.getLogger("gateway.pool")

#: Longest wait for one TCP (and TLS) connection to a Runtime Service (seconds).
DEFAULT_CONNECT_TIMEOUT_SECONDS: Final = 5.0


class ConnectFailedError(Exception):
    """No connection to the Runtime Service could be opened; nothing was dispatched."""


class ServiceNotFoundError(ConnectFailedError):
    """The Runtime's Service name does not exist (the resolver answered "name not known").

    A ClusterIP Service name resolves whenever the Service exists, so ``EAI_NONAME`` for
    ``<service>.<namespace>.svc`` means there is no such Runtime (or namespace): a 404, not
    a 503 to retry. Temporary resolver failures (``EAI_AGAIN``) stay :class:`ConnectFailedError`.
    """


def _not_found(exc: BaseException, target: Target) -> bool:
    """Whether ``exc`` says the Service name itself does not exist (NXDOMAIN)."""
    return (
        target.host == target.server_name  # the Service name itself, not an override
        and isinstance(exc, socket.gaierror)
        and exc.errno == socket.EAI_NONAME
    )


def _closed_during_handshake(
    exc: BaseException, progress: DialProgress, key: PoolKey
) -> str | None:
    """The words for a handshake the peer cut short (EOF or reset), else ``None``.

    Such a close is no certificate problem (those read ``TLS handshake failed: certificate
    verify failed ...``): nothing serves behind the address yet, typically runtimed restarting.
    """
    if not closed_during_handshake(exc, progress):
        return None
    return (
        f"{CLOSED_DURING_HANDSHAKE_TEXT} (is runtimed restarting? "
        f"kubectl get pods -n {key.namespace} -l {RUNTIME_LABEL}={key.runtime})"
    )


@dataclass(frozen=True, slots=True)
class PoolKey:
    """A Runtime Service: the unit of connection reuse."""

    namespace: str
    runtime: str


class ChannelPool:
    """Per-Runtime-Service gRPC connections (one each), shared by all requests.

    Use :func:`open_channel_pool` to create one.

    Args:
        nursery: owns the connection tasks; cancelling it closes every connection.
        resolver: turns a Runtime into an address at (re)connect time.
        ssl_context: TLS client context for the upstream (ALPN ``h2`` is set here), or
            ``None`` for plaintext HTTP/2 (h2c prior knowledge).
        connect_timeout_seconds: bound on one connection attempt (seconds).
        max_message_bytes: largest response message accepted (bytes).
        on_connect: called with ``"ok"`` or ``"error"`` after each connection attempt
            (metrics).
    """

    def __init__(
        self,
        nursery: trio.Nursery,
        resolver: Resolver,
        *,
        ssl_context: ssl.SSLContext | None = None,
        connect_timeout_seconds: float = DEFAULT_CONNECT_TIMEOUT_SECONDS,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        on_connect: Callable[[str], None] | None = None,
    ) -> None:
        self._nursery = nursery
        self._resolver = resolver
        self._ssl_context = ssl_context
        if ssl_context is not None:
            ssl_context.set_alpn_protocols(["h2"])
        self._connect_timeout = connect_timeout_seconds
        self._max_message_bytes = max_message_bytes
        self._on_connect = on_connect or (lambda _result: None)
        self._connections: dict[PoolKey, GrpcConnection] = {}
        self._locks: dict[PoolKey, trio.Lock] = {}

    @property
    def open_connections(self) -> int:
        """Number of usable connections (for the metrics gauge)."""
        return sum(1 for conn in self._connections.values() if conn.usable)

    async def _connect(self, key: PoolKey) -> GrpcConnection:
        progress = DialProgress("resolving the Service")
        where = ""
        target: Target | None = None
        try:
            with trio.fail_after(self._connect_timeout):
                target = await self._resolver.resolve(key.namespace, key.runtime)
                where = f" at {target.authority}"
                stream = await open_stream(
                    target.host,
                    target.port,
                    ssl_context=self._ssl_context,
                    server_hostname=target.server_name or target.host,
                    progress=progress,
                )
        except DIAL_ERRORS as exc:
            self._on_connect("error")
            if target is not None and _not_found(exc, target):
                raise ServiceNotFoundError(f"Service {target.host} does not resolve") from exc
            why = _closed_during_handshake(exc, progress, key) or dial_failure(
                exc, progress, self._connect_timeout
            )
            raise ConnectFailedError(
                f"cannot connect to the Service of Runtime {key.namespace}/{key.runtime}"
                f"{where}: {why}"
            ) from exc
        conn = GrpcConnection(
            stream,
            authority=target.authority,
            scheme="https" if self._ssl_context is not None else "http",
            max_message_bytes=self._max_message_bytes,
        )
        await self._nursery.start(self._run_connection, key, conn, target)
        self._on_connect("ok")
        return conn

    async def _run_connection(
        self,
        key: PoolKey,
        conn: GrpcConnection,
        target: Target,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        try:
            await conn.run(task_status=task_status)
        finally:
            if self._connections.get(key) is conn:
                del self._connections[key]
            log.info(
                "upstream connection closed",
                extra={
                    "namespace": key.namespace,
                    "runtime": key.runtime,
                    "target": target.authority,
                    "reason": conn.close_reason,
                },
            )

    async def connection(self, key: PoolKey) -> GrpcConnection:
        """Return the usable connection for ``key``, opening one if needed.

        Raises:
            ServiceNotFoundError: the Service name does not exist (``EAI_NONAME``).
            ConnectFailedError: resolving or connecting failed or took too long.
        """
        conn = self._connections.get(key)
        if conn is not None and conn.usable:
            return conn
        lock = self._locks.setdefault(key, trio.Lock())
        async with lock:
            conn = self._connections.get(key)
            if conn is not None and conn.usable:
                return conn
            conn = await self._connect(key)
            self._connections[key] = conn
            return conn

    async def unary_call(
        self,
        key: PoolKey,
        service: str,
        method: str,
        payload: bytes,
        *,
        metadata: Metadata = (),
        timeout_seconds: float | None = None,
    ) -> bytes:
        """Make a unary call on the Runtime's connection (see ``GrpcConnection.unary_call``).

        A connection found unusable before anything was sent is replaced once; a failure
        after dispatch is raised as is, never retried.

        Raises:
            ServiceNotFoundError: the Service name does not exist.
            ConnectFailedError: no connection could be opened.
            ConnectionLostError: the connection failed (``dispatched`` tells whether the
                request may have run).
            GrpcStatusError: the server answered with a non-OK status.
        """
        for attempt in (1, 2):
            conn = await self.connection(key)
            try:
                return await conn.unary_call(
                    service, method, payload, metadata=metadata, timeout_seconds=timeout_seconds
                )
            except ConnectionLostError as exc:
                if exc.dispatched or attempt == 2:
                    raise
                conn.close()
                if self._connections.get(key) is conn:
                    del self._connections[key]
        raise AssertionError("unreachable")  # pragma: no cover

    def close(self) -> None:
        """Close every connection (their calls fail with ConnectionLostError)."""
        for conn in list(self._connections.values()):
            conn.close()


@asynccontextmanager
async def open_channel_pool(
    resolver: Resolver,
    *,
    ssl_context: ssl.SSLContext | None = None,
    connect_timeout_seconds: float = DEFAULT_CONNECT_TIMEOUT_SECONDS,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    on_connect: Callable[[str], None] | None = None,
) -> AsyncIterator[ChannelPool]:
    """Open a :class:`ChannelPool`; on exit every connection is closed.

    Args:
        resolver: see :class:`ChannelPool`.
        ssl_context: see :class:`ChannelPool`.
        connect_timeout_seconds: see :class:`ChannelPool` (seconds).
        max_message_bytes: see :class:`ChannelPool` (bytes).
        on_connect: see :class:`ChannelPool`.
    """
    async with trio.open_nursery() as nursery:
        pool = ChannelPool(
            nursery,
            resolver,
            ssl_context=ssl_context,
            connect_timeout_seconds=connect_timeout_seconds,
            max_message_bytes=max_message_bytes,
            on_connect=on_connect,
        )
        try:
            yield pool
        finally:
            pool.close()
            nursery.cancel_scope.cancel()
