"""One long-lived gRPC connection to the local Runtime Server, reconnecting when it breaks.

runtimed talks to its Runtime Server over two services (``Runtime`` for tasks,
``FunctionRuntime`` for functions); each client holds one :class:`ServerChannel`
(STYLE.md: long-lived clients outlive per-Run work, in runtimed's outer nursery).

* The connection is a :class:`krt.grpc.client.GrpcConnection` (purerpc's sans-IO HTTP/2
  core with its own trio I/O, as the gateway and the invoke proxy use). Issue 6: per unary
  call it costs runtimed ~150-170 µs of CPU against ~340-550 µs through ``purerpc.Client``,
  and the Runtime Server ~180-215 µs against ~280-470 µs (it coalesces each call's frames
  into one write), measured on the bench machine with 20 calls in flight. A task Run makes
  four to five calls, so both processes save about a millisecond per Run.
* Until the first connection attempt ends, calls wait for it; while the server is
  unreachable, calls fail fast with :class:`ServerUnavailable` and :meth:`ServerChannel.run`
  reconnects with jittered backoff. A connection the server closed fails every call on it
  at once; a call its caller abandons (deadline) resets its stream and also marks the
  connection broken, so a hung Runtime Server is noticed within one caller deadline (the
  readiness probe's, 2 s) and the connection is re-established.
* Non-OK answers are raised as purerpc's ``RpcFailedError`` subclasses (``NotFoundError``,
  ``FailedPreconditionError``, ...), which the clients map to their own errors.

No method takes a timeout: callers bound calls with ``trio.move_on_after`` / ``fail_after``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Final

import purerpc
import trio
from google.protobuf.message import Message
from purerpc.grpclib.exceptions import raise_status

from krt.grpc.client import ConnectionLostError, GrpcConnection, GrpcStatusError
from krt.kube.backoff import Backoff
from krt.proto.executor.v1 import runtime_pb2

__all__ = ["ServerChannel", "ServerUnavailable", "status_code_name", "status_detail"]

log = logging.getLogger(__name__)

#: why calls still waiting on a connection marked broken fail (their ServerUnavailable says it).
_LOST = "connection lost"


class ServerUnavailable(Exception):
    """The Runtime Server could not be reached or the connection broke (no answer)."""


def status_code_name(exc: purerpc.RpcFailedError) -> str:
    """The gRPC status name of a failed call (``NOT_FOUND``, ...), else the error's type."""
    code = getattr(getattr(exc, "status", None), "status_code", None)
    name = getattr(code, "name", None)
    return str(name) if name else type(exc).__name__


def status_detail(exc: purerpc.RpcFailedError) -> str:
    """The server's status message of a failed call (the error's text when it sent none)."""
    message = getattr(getattr(exc, "status", None), "status_message", None)
    return str(message) if message else str(exc)


def _response_types(service: str) -> Mapping[str, type[Message]]:
    """Method name -> response message class of ``executor.v1`` service ``service``.

    Raises:
        KeyError: no such service in ``executor.v1``.
    """
    descriptor = runtime_pb2.DESCRIPTOR.services_by_name[service]
    return {m.name: getattr(runtime_pb2, m.output_type.name) for m in descriptor.methods}


def _error_classes() -> dict[int, type[purerpc.RpcFailedError]]:
    """gRPC status code -> the ``RpcFailedError`` subclass purerpc's ``raise_status`` raises."""
    classes: dict[int, type[purerpc.RpcFailedError]] = {}
    for code in purerpc.StatusCode:
        try:
            raise_status(purerpc.Status(code, ""))
        except purerpc.RpcFailedError as failed:
            classes[code.value] = type(failed)
    return classes


#: looked up per failed call instead of raising and catching through ``raise_status`` (a
#: NOT_FOUND Status, one per task Run, cost ~7% more instructions than an OK call; issue 6).
_ERROR_CLASSES: Final = _error_classes()


def _rpc_failed(exc: GrpcStatusError) -> purerpc.RpcFailedError:
    """The purerpc error of a non-OK status (``RpcFailedError`` for codes it does not name)."""
    known = _ERROR_CLASSES.get(exc.code)
    if known is not None:
        return known(exc.message)
    try:
        status = purerpc.Status(purerpc.StatusCode(exc.code), exc.message)
    except ValueError:
        status = purerpc.Status(purerpc.StatusCode.UNKNOWN, f"status {exc.code}: {exc.message}")
    try:
        raise_status(status)
    except purerpc.RpcFailedError as failed:
        return failed
    return purerpc.RpcFailedError(status)


class ServerChannel:
    """A reconnecting connection to ``host:port`` for the unary methods of one service.

    Args:
        host: the server's host or IP.
        port: its gRPC port.
        service: the ``executor.v1`` service name, ``Runtime`` or ``FunctionRuntime``.
        backoff: reconnect delays (default 0.05 s doubling to 2 s, jittered).

    Raises:
        KeyError: ``service`` is not an ``executor.v1`` service.
    """

    def __init__(
        self,
        host: str,
        port: int,
        service: str,
        *,
        backoff: Backoff | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self._responses = _response_types(service)
        self._service = f"executor.v1.{service}"
        self._authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self._backoff = backoff or Backoff(base=0.05, maximum=2.0)
        self._conn: GrpcConnection | None = None
        self._down_reason: str | None = None
        self._attempted = trio.Event()
        self._broken = trio.Event()
        #: Completed connections (1 after the first connect; more after reconnects).
        self.connections = 0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Hold the connection and reconnect when it breaks; never returns unless cancelled.

        ``task_status.started()`` is called at once: the server may come up after runtimed.
        """
        task_status.started()
        while True:
            try:
                stream = await trio.open_tcp_stream(self.host, self.port)
                conn = GrpcConnection(stream, authority=self._authority)
                async with trio.open_nursery() as nursery:
                    await nursery.start(conn.run)
                    nursery.start_soon(self._break_when_closed, conn)
                    self._conn = conn
                    self._down_reason = None
                    self.connections += 1
                    self._backoff.reset()
                    self._attempt_finished()
                    await self._broken.wait()
                    conn.close()
                if conn.close_reason and conn.close_reason != "closed":
                    self._down_reason = (
                        f"Runtime Server {self.host}:{self.port}: {conn.close_reason}"
                    )
            except Exception as exc:  # connect refused, reset, unreachable
                self._down_reason = f"Runtime Server {self.host}:{self.port}: {exc!r}"
                log.info("%s", self._down_reason)
            finally:
                self._conn = None
                self._mark_broken()
                if self._down_reason is None:
                    self._down_reason = f"Runtime Server {self.host}:{self.port}: connection lost"
                self._broken = trio.Event()
                self._attempt_finished()
            await trio.sleep(self._backoff.next_delay())

    async def _break_when_closed(self, conn: GrpcConnection) -> None:
        await conn.wait_closed()
        self._mark_broken()

    def _attempt_finished(self) -> None:
        self._attempted.set()
        self._attempted = trio.Event()

    def _mark_broken(self) -> None:
        """Make :meth:`run` reconnect and fail every call waiting on the old connection now.

        Closing the connection fails its waiting calls synchronously
        (:meth:`GrpcConnection.close`), so calls need no cancel scope of their own (one per
        call was ~4 us of runtimed's CPU, issue 6).
        """
        self._broken.set()
        if self._conn is not None:
            self._conn.close(_LOST)

    async def _conn_now(self) -> GrpcConnection:
        while True:
            if self._conn is not None and self._conn.usable:
                return self._conn
            if self._down_reason is not None:
                raise ServerUnavailable(self._down_reason)
            await self._attempted.wait()

    async def call(self, method: str, request: Message) -> Any:
        """One unary call of ``method`` (e.g. ``"Execute"``) with ``request``.

        Returns:
            The response message.

        Raises:
            purerpc.RpcFailedError: the server answered with a non-OK status (its subclass
                for the code, e.g. ``purerpc.NotFoundError``; callers map the codes).
            ServerUnavailable: not connected, or the connection failed during the call
                (the connection is then re-established by :meth:`run`).
        """
        response_type = self._responses[method]
        conn = await self._conn_now()
        try:
            data = await conn.unary_call(self._service, method, request.SerializeToString())
            return response_type.FromString(data)
        except GrpcStatusError as exc:
            raise _rpc_failed(exc) from None
        except ConnectionLostError as exc:
            self._mark_broken()
            raise ServerUnavailable(f"{method} to {self.host}:{self.port}: {exc}") from exc
        except trio.Cancelled:
            self._mark_broken()
            raise
        except Exception as exc:  # an undecodable response
            self._mark_broken()
            raise ServerUnavailable(f"{method} to {self.host}:{self.port}: {exc!r}") from exc
