"""runtimed's client of the local Runtime Server (``executor.v1.Runtime`` over gRPC).

One long-lived channel, held by :meth:`RuntimeServerClient.run` in runtimed's outer nursery
(STYLE.md: long-lived clients outlive per-Run work). Until the first connection attempt
ends, calls wait for it; while the server is unreachable, calls fail fast with
:class:`ServerUnavailable` and ``run`` reconnects with jittered backoff. No method takes a
timeout: callers bound calls with ``trio.move_on_after`` / ``fail_after``.

The channel (:class:`~runtimed.server_channel.ServerChannel`, shared with the function
client) marks a connection broken when a caller abandons a call, so a crash of the Runtime
Server is noticed within one caller deadline (the readiness probe's, 2 s).

Only the base ``Runtime`` service is used, so any conforming Runtime Server works (one
without ``FunctionRuntime`` included). gRPC status codes are mapped once, here:
``Status``/``List`` NOT_FOUND is an answer (:attr:`ExecState.NOT_FOUND`), Cancel/Forget
NOT_FOUND is success (both are idempotent for runtimed), Forget of a running execution is
:class:`ExecutionStillRunning`, and any other status is :class:`RpcRejected` with the
server's code and message.

:class:`RuntimeServer` is the interface the task lifecycle depends on, so tests can run it
against an in-memory fake on pytest-trio's virtual clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import purerpc
import trio

from krt.kube.backoff import Backoff
from krt.proto.executor.v1 import runtime_pb2 as pb
from runtimed.server_channel import (
    ServerChannel,
    ServerUnavailable,
    status_code_name,
    status_detail,
)
from runtimed.task_decisions import ExecState, ServerView

__all__ = [
    "ExecuteSpec",
    "ExecutionStillRunning",
    "Listing",
    "RpcRejected",
    "RuntimeServer",
    "RuntimeServerClient",
    "ServerUnavailable",
    "listed_state",
    "parse_address",
]

_STATES: Mapping[int, ExecState] = {
    pb.EXECUTION_STATE_PENDING: ExecState.PENDING,
    pb.EXECUTION_STATE_RUNNING: ExecState.RUNNING,
    pb.EXECUTION_STATE_SUCCEEDED: ExecState.SUCCEEDED,
    pb.EXECUTION_STATE_FAILED: ExecState.FAILED,
}


class RpcRejected(Exception):
    """The Runtime Server answered with a gRPC error status.

    Attributes:
        code: the status name, e.g. ``INVALID_ARGUMENT``.
        detail: the status message.
    """

    def __init__(self, method: str, code: str, message: str) -> None:
        super().__init__(f"{method}: {code}: {message}")
        self.code = code
        self.detail = message


class ExecutionStillRunning(RpcRejected):
    """Forget was refused because the execution has not finished (FAILED_PRECONDITION)."""


@dataclass(frozen=True, slots=True)
class ExecuteSpec:
    """An ``Execute`` request as plain values.

    Attributes:
        id: the Run UID.
        working_dir: as the Runtime Server sees it.
        entrypoint: a path relative to ``working_dir``, or empty.
        args: task arguments.
        env: task environment.
        timeout_seconds: the server's own limit in seconds (0 = none); runtimed enforces
            ``spec.timeout`` independently.
    """

    id: str
    working_dir: str
    entrypoint: str = ""
    args: Sequence[str] = ()
    env: Mapping[str, str] | None = None
    timeout_seconds: int = 0


class RuntimeServer(Protocol):
    """The Runtime Server operations the task lifecycle uses (see the module docstring)."""

    async def execute(self, spec: ExecuteSpec) -> None:
        """Start an execution keyed by ``spec.id``."""
        ...

    async def status(self, uid: str) -> ServerView:
        """The execution's state (NOT_FOUND included; never UNREACHABLE: that raises)."""
        ...

    async def list(self) -> Mapping[str, ServerView]:
        """Every execution the server holds, by ID."""
        ...

    async def cancel(self, uid: str) -> None:
        """Cancel an execution (unknown IDs are fine)."""
        ...

    async def forget(self, uid: str) -> None:
        """Drop a finished execution (unknown IDs are fine)."""
        ...

    async def health(self) -> tuple[bool, str]:
        """``(healthy, message)``."""
        ...


def parse_address(address: str) -> tuple[str, int]:
    """Split ``HOST:PORT`` (``[v6]:PORT`` allowed).

    Raises:
        ValueError: not ``HOST:PORT`` with a port from 1 to 65535 (the message quotes it).
    """
    host, sep, port_text = address.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(
            f"Runtime Server address {address!r} must be HOST:PORT with a port from 1 to 65535"
        )
    return host, int(port_text)


def _view(response: Any) -> ServerView:
    return ServerView(
        state=_STATES.get(int(response.state), ExecState.PENDING),
        exit_code=int(response.exit_code),
        stdout=str(response.stdout),
        stderr=str(response.stderr),
        error_message=str(response.error_message),
    )


class Listing(Mapping[str, ServerView]):
    """A ``List`` answer: execution ID -> :class:`ServerView`, each built on first read.

    The RLEG reads only the entries of the executions it watches, while the answer holds
    every execution the server knows (under a burst of 50 Runs, ~50 entries, and building
    all their views cost ~200 us per List, about as much as the call itself: issue 6).

    Args:
        entries: the ``ListResponse.entries`` messages.
    """

    __slots__ = ("_entries", "_views")

    def __init__(self, entries: Iterable[Any]) -> None:
        self._entries: dict[str, Any] = {str(entry.id): entry for entry in entries}
        self._views: dict[str, ServerView] = {}

    def __getitem__(self, uid: str) -> ServerView:
        view = self._views.get(uid)
        if view is None:
            view = self._views[uid] = _view(self._entries[uid])
        return view

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, uid: object) -> bool:
        return uid in self._entries

    def state(self, uid: str) -> ExecState:
        """The state of execution ``uid`` (NOT_FOUND when not listed); builds no view."""
        entry = self._entries.get(uid)
        if entry is None:
            return ExecState.NOT_FOUND
        return _STATES.get(int(entry.state), ExecState.PENDING)


def listed_state(entries: Mapping[str, ServerView], uid: str) -> ExecState:
    """The state of execution ``uid`` in a ``List`` answer (NOT_FOUND when not listed).

    The RLEG compares every watched execution's state with the last one it saw and needs a
    whole :class:`ServerView` only for those that changed (issue 6).
    """
    if isinstance(entries, Listing):
        return entries.state(uid)
    view = entries.get(uid)
    return view.state if view is not None else ExecState.NOT_FOUND


class RuntimeServerClient:
    """The gRPC client of one Runtime Server (implements :class:`RuntimeServer`).

    Args:
        host: the server's host or IP.
        port: its gRPC port.
        backoff: reconnect delays (default 0.05 s doubling to 2 s, jittered).
    """

    def __init__(self, host: str, port: int, *, backoff: Backoff | None = None) -> None:
        self.host = host
        self.port = port
        self._channel = ServerChannel(host, port, "Runtime", backoff=backoff)

    @property
    def connections(self) -> int:
        """Completed connections (1 after the first connect; more after reconnects)."""
        return self._channel.connections

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Hold the channel and reconnect when it breaks; never returns unless cancelled.

        ``task_status.started()`` is called at once: the server may come up after runtimed.
        """
        await self._channel.run(task_status=task_status)

    async def _call(self, method: str, request: Any) -> Any:
        """One unary call; transport trouble becomes :class:`ServerUnavailable`."""
        return await self._channel.call(method, request)

    async def execute(self, spec: ExecuteSpec) -> None:
        """Call ``Execute``.

        Raises:
            RpcRejected: the server refused (e.g. INVALID_ARGUMENT, ALREADY_EXISTS).
            ServerUnavailable: no answer.
        """
        request = pb.ExecuteRequest(
            id=spec.id,
            args=list(spec.args),
            env=dict(spec.env or {}),
            timeout_seconds=spec.timeout_seconds,
            working_dir=spec.working_dir,
            entrypoint=spec.entrypoint,
        )
        try:
            await self._call("Execute", request)
        except purerpc.RpcFailedError as exc:
            raise RpcRejected("Execute", status_code_name(exc), status_detail(exc)) from None

    async def status(self, uid: str) -> ServerView:
        """Call ``Status``; NOT_FOUND is returned as :attr:`ExecState.NOT_FOUND`.

        Raises:
            RpcRejected: another error status. ServerUnavailable: no answer.
        """
        try:
            return _view(await self._call("Status", pb.StatusRequest(id=uid)))
        except purerpc.NotFoundError:
            return ServerView(ExecState.NOT_FOUND)
        except purerpc.RpcFailedError as exc:
            raise RpcRejected("Status", status_code_name(exc), status_detail(exc)) from None

    async def list(self) -> Mapping[str, ServerView]:
        """Call ``List``; each entry becomes a :class:`ServerView` only when read.

        Raises:
            RpcRejected, ServerUnavailable: as for :meth:`status`.
        """
        try:
            response = await self._call("List", pb.ListRequest())
        except purerpc.RpcFailedError as exc:
            raise RpcRejected("List", status_code_name(exc), status_detail(exc)) from None
        return Listing(response.entries)

    async def cancel(self, uid: str) -> None:
        """Call ``Cancel``; an unknown execution counts as cancelled.

        Raises:
            RpcRejected, ServerUnavailable: as for :meth:`status`.
        """
        try:
            await self._call("Cancel", pb.CancelRequest(id=uid))
        except purerpc.NotFoundError:
            return
        except purerpc.RpcFailedError as exc:
            raise RpcRejected("Cancel", status_code_name(exc), status_detail(exc)) from None

    async def forget(self, uid: str) -> None:
        """Call ``Forget``; an unknown execution counts as forgotten.

        Raises:
            ExecutionStillRunning: the execution has not finished.
            RpcRejected, ServerUnavailable: as for :meth:`status`.
        """
        try:
            await self._call("Forget", pb.ForgetRequest(id=uid))
        except purerpc.NotFoundError:
            return
        except purerpc.FailedPreconditionError as exc:
            raise ExecutionStillRunning(
                "Forget", "FAILED_PRECONDITION", status_detail(exc)
            ) from None
        except purerpc.RpcFailedError as exc:
            raise RpcRejected("Forget", status_code_name(exc), status_detail(exc)) from None

    async def health(self) -> tuple[bool, str]:
        """Call ``Health``.

        Raises:
            RpcRejected, ServerUnavailable: as for :meth:`status`.
        """
        try:
            response = await self._call("Health", pb.HealthRequest())
        except purerpc.RpcFailedError as exc:
            raise RpcRejected("Health", status_code_name(exc), status_detail(exc)) from None
        return bool(response.healthy), str(response.message)
