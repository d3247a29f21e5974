"""Outgoing gRPC connections of the invoke proxy: one HTTP/2 connection per address.

runtimed's proxy calls two kinds of upstream: its local Runtime Server (plaintext, loopback)
and owner runtimed peers (mutual TLS, :mod:`runtimed.dataplane.peer`). Both need what
``purerpc``'s channel lacks and the gateway's :class:`krt.grpc.client.GrpcConnection`
provides: a cancelled call sends ``RST_STREAM(CANCEL)`` at once, so cancellation travels
"all the way down" (issue 8: gateway -> runtimed -> Runtime Server) and one cancelled call
never takes the shared connection, and the other Runs' calls on it, down. The function
lifecycle's purerpc client (:mod:`runtimed.functions.client`) breaks its whole connection
to abandon one call, which would cancel every other Run's in-flight invocation; that is why
invocations do not go through it.

The connection tasks run in this object's nursery, never in a request's. A connection found
closed before anything was sent is replaced once; a call is never retried after dispatch
(seed 000, Invoke Contract).
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final

import trio

from krt.grpc.client import ConnectionLostError, GrpcConnection, Metadata
from krt.grpc.dial import DIAL_ERRORS, DialProgress, dial_failure, open_stream

__all__ = ["DEFAULT_CONNECT_TIMEOUT_SECONDS", "Channels", "ConnectFailed", "open_channels"]

log = logging.getLogger(__name__)

#: Longest wait for one TCP (and TLS) connection, seconds.
DEFAULT_CONNECT_TIMEOUT_SECONDS: Final = 2.0


class ConnectFailed(Exception):
    """No connection could be opened; nothing was sent."""


Address = tuple[str, int]


class Channels:
    """One reusable gRPC connection per ``(host, port)``; build with :func:`open_channels`.

    Args:
        nursery: owns the connection tasks.
        ssl_context: client TLS context (ALPN ``h2`` is set here), or ``None`` for h2c.
        server_hostname: TLS server name to send and verify (``None``: the host dialled;
            ignored when the context does not check host names).
        connect_timeout: bound on one connection attempt, seconds.
    """

    def __init__(
        self,
        nursery: trio.Nursery,
        *,
        ssl_context: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_SECONDS,
    ) -> None:
        self._nursery = nursery
        self._ssl = ssl_context
        if ssl_context is not None:
            ssl_context.set_alpn_protocols(["h2"])
        self._server_hostname = server_hostname
        self._connect_timeout = connect_timeout
        self._connections: dict[Address, GrpcConnection] = {}
        self._locks: dict[Address, trio.Lock] = {}
        #: Connections opened so far (tests, diagnostics).
        self.connects = 0

    async def _connect(self, address: Address) -> GrpcConnection:
        host, port = address
        authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        progress = DialProgress()
        try:
            with trio.fail_after(self._connect_timeout):
                stream = await open_stream(
                    host,
                    port,
                    ssl_context=self._ssl,
                    server_hostname=self._server_hostname or host,
                    progress=progress,
                )
        except DIAL_ERRORS as exc:
            why = dial_failure(exc, progress, self._connect_timeout)
            raise ConnectFailed(f"cannot connect to {authority}: {why}") from exc
        conn = GrpcConnection(
            stream, authority=authority, scheme="https" if self._ssl is not None else "http"
        )
        await self._nursery.start(self._run_connection, address, conn)
        self.connects += 1
        return conn

    async def _run_connection(
        self,
        address: Address,
        conn: GrpcConnection,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        try:
            await conn.run(task_status=task_status)
        finally:
            if self._connections.get(address) is conn:
                del self._connections[address]
            log.debug("connection closed", extra={"peer": address, "reason": conn.close_reason})

    async def _connection(self, address: Address) -> GrpcConnection:
        conn = self._connections.get(address)
        if conn is not None and conn.usable:
            return conn
        async with self._locks.setdefault(address, trio.Lock()):
            conn = self._connections.get(address)
            if conn is None or not conn.usable:
                conn = await self._connect(address)
                self._connections[address] = conn
            return conn

    async def unary_call(
        self,
        host: str,
        port: int,
        method: str,
        payload: bytes,
        *,
        metadata: Metadata = (),
        timeout_seconds: float | None = None,
    ) -> bytes:
        """Call ``executor.v1.FunctionRuntime/<method>`` on ``host:port`` once.

        Cancelling the caller resets the stream (the server cancels the call).

        Args:
            host, port: the server.
            method: e.g. ``InvokeFunction``.
            payload: the serialized request.
            metadata: custom metadata (lowercase names).
            timeout_seconds: sent as ``grpc-timeout``; the caller enforces it locally.

        Returns:
            The serialized response.

        Raises:
            ConnectFailed: no connection (nothing sent).
            krt.grpc.client.ConnectionLostError: the connection failed during the call.
            krt.grpc.client.GrpcStatusError: a non-OK status.
        """
        address = (host, port)
        for attempt in (1, 2):
            conn = await self._connection(address)
            try:
                return await conn.unary_call(
                    "executor.v1.FunctionRuntime",
                    method,
                    payload,
                    metadata=metadata,
                    timeout_seconds=timeout_seconds,
                )
            except ConnectionLostError as exc:
                if exc.dispatched or attempt == 2:
                    raise
                conn.close()
                if self._connections.get(address) is conn:
                    del self._connections[address]
        raise AssertionError("unreachable")  # pragma: no cover

    def close(self) -> None:
        """Close every connection."""
        for conn in list(self._connections.values()):
            conn.close()


@asynccontextmanager
async def open_channels(
    *,
    ssl_context: ssl.SSLContext | None = None,
    server_hostname: str | None = None,
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_SECONDS,
) -> AsyncIterator[Channels]:
    """Open a :class:`Channels`; every connection closes on exit (arguments as there)."""
    async with trio.open_nursery() as nursery:
        channels = Channels(
            nursery,
            ssl_context=ssl_context,
            server_hostname=server_hostname,
            connect_timeout=connect_timeout,
        )
        try:
            yield channels
        finally:
            channels.close()
            nursery.cancel_scope.cancel()
