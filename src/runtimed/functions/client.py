"""runtimed's client of the local Runtime Server's ``executor.v1.FunctionRuntime`` (seed 002).

One long-lived reconnecting channel (:class:`~runtimed.server_channel.ServerChannel`, the
same machinery as the task lifecycle's ``Runtime`` client) held by
:meth:`FunctionRuntimeClient.run` in runtimed's outer nursery; calls made while the server
is unreachable fail fast with :class:`~runtimed.server_channel.ServerUnavailable`, and a
call abandoned by its caller's deadline marks the connection broken, so a killed Runtime
Server is noticed within one deadline. Invocations do not use this client (the invoke
proxy has its own connections that cancel one call without breaking the others).

gRPC status codes are mapped once, here (seed 002, "Registration and Status Semantics"):

* FunctionStatus NOT_FOUND is an answer (:attr:`RegState.NOT_FOUND`: the server lost the
  registration, e.g. it restarted); FAILED_PRECONDITION is :attr:`RegState.STALE`;
* UnregisterFunction NOT_FOUND is success (unregistering an absent registration succeeds);
* every other non-OK status raises :class:`FunctionRpcError` with the code name and the
  server's bounded detail (RegisterFunction FAILED_PRECONDITION carries the fatal error,
  UNIMPLEMENTED means the server has no FunctionRuntime: a permanent configuration error).

No method takes a timeout: callers bound calls with ``trio.move_on_after`` / ``fail_after``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

import purerpc
import trio

from krt.kube.backoff import Backoff
from krt.proto.executor.v1 import runtime_pb2 as pb
from runtimed.runtime_client import RpcRejected
from runtimed.server_channel import ServerChannel, status_code_name, status_detail

__all__ = [
    "FunctionRpcError",
    "FunctionRuntimeClient",
    "FunctionServer",
    "FunctionView",
    "InvokeOutcome",
    "RegState",
    "RegisterSpec",
]


class RegState(StrEnum):
    """What FunctionStatus said about one registration reference."""

    REGISTERING = "REGISTERING"
    READY = "READY"
    DRAINING = "DRAINING"
    FAILED = "FAILED"
    NOT_FOUND = "NOT_FOUND"
    """No registration has this Run UID (the server restarted or it was unregistered)."""
    STALE = "STALE"
    """FAILED_PRECONDITION: the ID is stale, or the registration is draining/unready."""


_STATES: Mapping[int, RegState] = {
    pb.FUNCTION_REGISTRATION_STATE_REGISTERING: RegState.REGISTERING,
    pb.FUNCTION_REGISTRATION_STATE_READY: RegState.READY,
    pb.FUNCTION_REGISTRATION_STATE_DRAINING: RegState.DRAINING,
    pb.FUNCTION_REGISTRATION_STATE_FAILED: RegState.FAILED,
}


class FunctionRpcError(RpcRejected):
    """The Runtime Server answered a FunctionRuntime call with a non-OK status.

    Attributes:
        code: the status name (``FAILED_PRECONDITION``, ``UNIMPLEMENTED``, ...).
        detail: the server's (bounded) message, e.g. the import error of a bad handler.
    """

    def __init__(self, method: str, code: str, detail: str) -> None:
        super().__init__(method, code, detail)
        self.detail = detail


@dataclass(frozen=True, slots=True)
class RegisterSpec:
    """A RegisterFunction request as plain values (seed 002, Proposed Protobuf API).

    Attributes:
        run_uid: the Run UID.
        attempt: ``status.attempt`` (>= 1).
        working_dir: the working directory as the Runtime Server sees it.
        handler: ``module.function`` (Python) or ``file.function`` (Bash).
        env: the handler's environment.
        idle_timeout_seconds: informational for the server (runtimed enforces it); 0 = none.
        digest: :func:`runtimed.functions.digest.registration_digest`.
    """

    run_uid: str
    attempt: int
    working_dir: str
    handler: str
    env: Mapping[str, str] = field(default_factory=dict)
    idle_timeout_seconds: int = 0
    digest: str = ""


@dataclass(frozen=True, slots=True)
class FunctionView:
    """A FunctionStatus answer.

    Attributes:
        state: see :class:`RegState`.
        in_flight: invocations running now (0 or 1 in v0.x).
        last_activity_unix_nano: wall-clock ns of the last readiness/invocation start/end.
        fatal_error: bounded diagnostic of a FAILED registration (or the STALE detail).
    """

    state: RegState
    in_flight: int = 0
    last_activity_unix_nano: int = 0
    fatal_error: str = ""


@dataclass(frozen=True, slots=True)
class InvokeOutcome:
    """An InvokeFunction answer (for the invoke proxy)."""

    invocation_id: str
    output: bytes
    content_type: str
    outputs: Mapping[str, str]


class FunctionServer(Protocol):
    """The FunctionRuntime operations the function lifecycle uses (fakes implement it)."""

    async def register(self, spec: RegisterSpec) -> str:
        """RegisterFunction; returns the opaque registration ID.

        Raises:
            FunctionRpcError: a non-OK status. ServerUnavailable: no answer.
        """
        ...

    async def status(self, run_uid: str, registration_id: str) -> FunctionView:
        """FunctionStatus (NOT_FOUND and FAILED_PRECONDITION are answers).

        Raises:
            FunctionRpcError: another non-OK status. ServerUnavailable: no answer.
        """
        ...

    async def unregister(
        self,
        run_uid: str,
        registration_id: str,
        *,
        cancel_in_flight: bool,
        drain_timeout_millis: int,
    ) -> None:
        """UnregisterFunction (an absent registration is success).

        Raises:
            FunctionRpcError: e.g. FAILED_PRECONDITION for a stale ID. ServerUnavailable.
        """
        ...


def _error(method: str, exc: purerpc.RpcFailedError) -> FunctionRpcError:
    return FunctionRpcError(method, status_code_name(exc), status_detail(exc))


class FunctionRuntimeClient:
    """The gRPC client of one Runtime Server's FunctionRuntime (a :class:`FunctionServer`).

    Args:
        host: the server's host or IP.
        port: its gRPC port.
        backoff: reconnect delays (default 0.05 s doubling to 2 s, jittered).
    """

    def __init__(self, host: str, port: int, *, backoff: Backoff | None = None) -> None:
        self.host = host
        self.port = port
        self._channel = ServerChannel(host, port, "FunctionRuntime", backoff=backoff)

    @property
    def connections(self) -> int:
        """Completed connections (1 after the first connect; more after reconnects)."""
        return self._channel.connections

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Hold the channel and reconnect when it breaks; never returns unless cancelled.

        ``task_status.started()`` is called at once (the server may start after runtimed).
        """
        await self._channel.run(task_status=task_status)

    async def _call(self, method: str, request: Any) -> Any:
        return await self._channel.call(method, request)

    async def register(self, spec: RegisterSpec) -> str:
        """Call RegisterFunction; returns the registration ID (see :class:`FunctionServer`)."""
        request = pb.RegisterFunctionRequest(
            run_uid=spec.run_uid,
            registration_attempt=spec.attempt,
            working_dir=spec.working_dir,
            handler=spec.handler,
            env=dict(spec.env),
            idle_timeout_seconds=spec.idle_timeout_seconds,
            registration_digest=spec.digest,
        )
        try:
            response = await self._call("RegisterFunction", request)
        except purerpc.RpcFailedError as exc:
            raise _error("RegisterFunction", exc) from None
        return str(response.registration.registration_id)

    async def status(self, run_uid: str, registration_id: str) -> FunctionView:
        """Call FunctionStatus (see :class:`FunctionServer`)."""
        request = pb.FunctionStatusRequest(
            registration=pb.FunctionRegistration(run_uid=run_uid, registration_id=registration_id)
        )
        try:
            response = await self._call("FunctionStatus", request)
        except purerpc.NotFoundError:
            return FunctionView(RegState.NOT_FOUND)
        except purerpc.FailedPreconditionError as exc:
            return FunctionView(RegState.STALE, fatal_error=status_detail(exc))
        except purerpc.RpcFailedError as exc:
            raise _error("FunctionStatus", exc) from None
        return FunctionView(
            state=_STATES.get(int(response.state), RegState.REGISTERING),
            in_flight=int(response.in_flight),
            last_activity_unix_nano=int(response.last_activity_unix_nano),
            fatal_error=str(response.fatal_error),
        )

    async def unregister(
        self,
        run_uid: str,
        registration_id: str,
        *,
        cancel_in_flight: bool,
        drain_timeout_millis: int,
    ) -> None:
        """Call UnregisterFunction (see :class:`FunctionServer`)."""
        request = pb.UnregisterFunctionRequest(
            registration=pb.FunctionRegistration(run_uid=run_uid, registration_id=registration_id),
            cancel_in_flight=cancel_in_flight,
            drain_timeout_millis=drain_timeout_millis,
        )
        try:
            await self._call("UnregisterFunction", request)
        except purerpc.NotFoundError:
            return
        except purerpc.RpcFailedError as exc:
            raise _error("UnregisterFunction", exc) from None

    async def invoke(
        self,
        run_uid: str,
        registration_id: str,
        *,
        input: bytes,  # noqa: A002 - the protocol's field name
        content_type: str = "application/json",
        invocation_id: str = "",
        timeout_millis: int = 0,
    ) -> InvokeOutcome:
        """Call InvokeFunction once (never retried: seed 000, Invoke Contract).

        Args:
            run_uid: the Run UID.
            registration_id: the current registration ID (from the registry).
            input: request bytes (at most 1 MiB; the server enforces it).
            content_type: media type of ``input``.
            invocation_id: correlation ID (<= 128 bytes), or empty for a server-made one.
            timeout_millis: milliseconds; 0 is the server's bounded default.

        Raises:
            FunctionRpcError: RESOURCE_EXHAUSTED (one already in flight), FAILED_PRECONDITION
                (stale/draining), DEADLINE_EXCEEDED, UNKNOWN (handler error), ...
            ServerUnavailable: no answer (the outcome is unknown; do not retry).
        """
        request = pb.InvokeFunctionRequest(
            registration=pb.FunctionRegistration(run_uid=run_uid, registration_id=registration_id),
            invocation_id=invocation_id,
            input=input,
            content_type=content_type,
            timeout_millis=timeout_millis,
        )
        try:
            response = await self._call("InvokeFunction", request)
        except purerpc.RpcFailedError as exc:
            raise _error("InvokeFunction", exc) from None
        return InvokeOutcome(
            invocation_id=str(response.invocation_id),
            output=bytes(response.output),
            content_type=str(response.content_type),
            outputs=dict(response.outputs),
        )
