"""gRPC servicers: translate protobuf messages to the plain logic and errors to statuses.

This is the only module of the shared machinery that knows purerpc and the generated
messages. Each RPC converts its request, calls :class:`ExecutionManager` or
:class:`FunctionService`, and turns :class:`ContractError` into purerpc's
``RpcFailedError`` carrying the same status code and message.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

import purerpc

from krt.grpc.unary_server import runs_inline
from krt.proto.executor.v1 import runtime_grpc, runtime_pb2
from servers.common.errors import ContractError
from servers.common.executions import ExecuteRequest, ExecutionManager, ExecutionStatus
from servers.common.functions import FunctionService, InvokeRequest, RegisterRequest
from servers.common.registrations import Registration

log = logging.getLogger("servers.rpc")

_T = TypeVar("_T")


def rpc_error(exc: ContractError) -> purerpc.RpcFailedError:
    """Return the purerpc exception that answers ``exc`` with its code and message."""
    return purerpc.RpcFailedError(purerpc.Status(purerpc.StatusCode(exc.code.value), exc.message))


def _mapped(
    method: Callable[[Any, Any], Awaitable[_T]],
) -> Callable[[Any, Any], Awaitable[_T]]:
    """Decorate an RPC method so ContractError becomes the matching gRPC status.

    Any other exception is a server bug: it is logged with its traceback and answered with
    INTERNAL naming the RPC (:mod:`krt.grpc.server` has the same fallback for
    failures outside the servicers, e.g. an undecodable request).
    """

    @functools.wraps(method)
    async def wrapper(self: Any, request: Any) -> _T:
        try:
            return await method(self, request)
        except ContractError as exc:
            raise rpc_error(exc) from None
        except Exception as exc:
            log.exception("internal error", extra={"rpc": method.__name__})
            raise purerpc.RpcFailedError(
                purerpc.Status(
                    purerpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}: {exc}"
                )
            ) from None

    return wrapper


#: every method of executor.v1.Runtime (all answer at once: see RuntimeServicer).
_RUNTIME_METHODS = ("Execute", "Status", "List", "Cancel", "Forget", "Health")


def _status_message(status: ExecutionStatus) -> runtime_pb2.StatusResponse:
    return runtime_pb2.StatusResponse(
        id=status.id,
        state=cast(runtime_pb2.ExecutionState, status.state.value),
        exit_code=status.exit_code,
        stdout=status.stdout,
        stderr=status.stderr,
        error_message=status.error_message,
    )


class RuntimeServicer(runtime_grpc.RuntimeServicer):  # type: ignore[misc]
    """``executor.v1.Runtime``: one-shot executions.

    Every method answers from local state without awaiting, so each runs in the connection's
    reader (:func:`krt.grpc.unary_server.runs_inline`); the executions themselves run in
    the manager's nursery.

    Args:
        executions: the execution manager.
        adapter_name: for the Health message.
    """

    def __init__(self, executions: ExecutionManager, *, adapter_name: str) -> None:
        self._executions = executions
        self._name = adapter_name

    @property
    def service(self) -> purerpc.Service:
        """The purerpc service, every method marked to run inline."""
        return runs_inline(super().service, *_RUNTIME_METHODS)

    @_mapped
    async def Execute(self, request: runtime_pb2.ExecuteRequest) -> runtime_pb2.ExecuteResponse:  # noqa: N802
        """Start a task; see :meth:`ExecutionManager.execute`."""
        exec_id = self._executions.execute(
            ExecuteRequest(
                id=request.id,
                args=list(request.args),
                env=dict(request.env),
                timeout_seconds=request.timeout_seconds,
                working_dir=request.working_dir,
                entrypoint=request.entrypoint,
                handler=request.handler,
            )
        )
        return runtime_pb2.ExecuteResponse(id=exec_id)

    @_mapped
    async def Status(self, request: runtime_pb2.StatusRequest) -> runtime_pb2.StatusResponse:  # noqa: N802
        """Read one execution; NOT_FOUND when unknown, INVALID_ARGUMENT for an invalid id."""
        return _status_message(self._executions.status(request.id))

    @_mapped
    async def List(self, request: runtime_pb2.ListRequest) -> runtime_pb2.ListResponse:  # noqa: N802
        """Read every execution's id, state, exit code and error (output: use Status)."""
        response = runtime_pb2.ListResponse()
        add = response.entries.add  # in place: no message built and copied per entry
        for status in self._executions.list():
            add(
                id=status.id,
                state=cast(runtime_pb2.ExecutionState, status.state.value),
                exit_code=status.exit_code,
                error_message=status.error_message,
            )
        return response

    @_mapped
    async def Cancel(self, request: runtime_pb2.CancelRequest) -> runtime_pb2.CancelResponse:  # noqa: N802
        """Terminate an execution's process group (SIGTERM, then SIGKILL after the grace)."""
        self._executions.cancel(request.id)
        return runtime_pb2.CancelResponse()

    @_mapped
    async def Forget(self, request: runtime_pb2.ForgetRequest) -> runtime_pb2.ForgetResponse:  # noqa: N802
        """Drop a terminal execution; FAILED_PRECONDITION while it runs."""
        self._executions.forget(request.id)
        return runtime_pb2.ForgetResponse()

    @_mapped
    async def Health(self, request: runtime_pb2.HealthRequest) -> runtime_pb2.HealthResponse:  # noqa: N802
        """Report that the server is serving."""
        return runtime_pb2.HealthResponse(healthy=True, message=f"{self._name} runtime serving")


def _reference(reg: Registration) -> runtime_pb2.FunctionRegistration:
    return runtime_pb2.FunctionRegistration(
        run_uid=reg.run_uid, registration_id=reg.registration_id
    )


class FunctionRuntimeServicer(runtime_grpc.FunctionRuntimeServicer):  # type: ignore[misc]
    """``executor.v1.FunctionRuntime``: registrations and invocations (seed 002).

    Args:
        functions: the function service.
    """

    def __init__(self, functions: FunctionService) -> None:
        self._functions = functions

    @_mapped
    async def RegisterFunction(  # noqa: N802
        self, request: runtime_pb2.RegisterFunctionRequest
    ) -> runtime_pb2.RegisterFunctionResponse:
        """Create or resume a registration; see :meth:`FunctionService.register`."""
        reg = await self._functions.register(
            RegisterRequest(
                run_uid=request.run_uid,
                registration_attempt=request.registration_attempt,
                working_dir=request.working_dir,
                handler=request.handler,
                env=dict(request.env),
                idle_timeout_seconds=request.idle_timeout_seconds,
                registration_digest=request.registration_digest,
            )
        )
        return runtime_pb2.RegisterFunctionResponse(
            registration=_reference(reg),
            state=cast(runtime_pb2.FunctionRegistrationState, reg.state.value),
        )

    @_mapped
    async def FunctionStatus(  # noqa: N802
        self, request: runtime_pb2.FunctionStatusRequest
    ) -> runtime_pb2.FunctionStatusResponse:
        """Read local state; NOT_FOUND for an unknown Run UID, FAILED_PRECONDITION if stale."""
        ref = request.registration
        reg = self._functions.status(ref.run_uid, ref.registration_id)
        return runtime_pb2.FunctionStatusResponse(
            registration=_reference(reg),
            state=cast(runtime_pb2.FunctionRegistrationState, reg.state.value),
            in_flight=reg.in_flight,
            last_activity_unix_nano=reg.last_activity_unix_nano,
            fatal_error=reg.fatal_error,
        )

    @_mapped
    async def InvokeFunction(  # noqa: N802
        self, request: runtime_pb2.InvokeFunctionRequest
    ) -> runtime_pb2.InvokeFunctionResponse:
        """Run one invocation; see :meth:`FunctionService.invoke`."""
        ref = request.registration
        invocation_id, result = await self._functions.invoke(
            InvokeRequest(
                run_uid=ref.run_uid,
                registration_id=ref.registration_id,
                invocation_id=request.invocation_id,
                input=request.input,
                content_type=request.content_type,
                timeout_millis=request.timeout_millis,
            )
        )
        return runtime_pb2.InvokeFunctionResponse(
            registration=ref,
            invocation_id=invocation_id,
            output=result.output,
            content_type=result.content_type,
            outputs=dict(result.outputs),
        )

    @_mapped
    async def UnregisterFunction(  # noqa: N802
        self, request: runtime_pb2.UnregisterFunctionRequest
    ) -> runtime_pb2.UnregisterFunctionResponse:
        """Drain or cancel, then remove; absent registrations succeed."""
        ref = request.registration
        await self._functions.unregister(
            ref.run_uid,
            ref.registration_id,
            cancel_in_flight=request.cancel_in_flight,
            drain_timeout_millis=request.drain_timeout_millis,
        )
        return runtime_pb2.UnregisterFunctionResponse(registration=ref)
