"""The trio side of FunctionRuntime: starts, invokes, drains and stops warm workers.

:class:`FunctionService` owns the :class:`~servers.common.registrations.RegistrationTable`
(the decisions) and one :class:`_Live` record per registration generation (the I/O
handles: the worker, the cancel scope of the start and of the in-flight invocation).
Background work (starting a worker, retiring a superseded one) runs in the service's
nursery, not in the RPC task, so a caller that goes away cannot leave a half-started
worker behind. Every wait is bounded by a trio cancel scope: the invocation timeout, the
drain timeout, or the shutdown deadline.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import trio

from krt.grpc.unary_server import current_call_scope
from servers.common import limits
from servers.common.adapter import (
    FunctionAdapter,
    FunctionWorker,
    InvalidInput,
    InvocationError,
    InvokeResult,
    RegistrationFailed,
)
from servers.common.errors import (
    Code,
    ContractError,
    failed_precondition,
    invalid_argument,
)
from servers.common.registrations import (
    Registration,
    RegistrationID,
    RegistrationSpec,
    RegistrationState,
    RegistrationTable,
    RunUID,
    WallClock,
)
from servers.common.validation import (
    bound_text,
    require_directory,
    resolve_working_dir,
    validate_digest,
    validate_env,
    validate_id,
)

log = logging.getLogger("servers.functions")

#: how long stopping one worker may take before we stop waiting (seconds).
_WORKER_CLOSE_SECONDS = 5.0
#: longest wait for a cancelled in-flight invocation to free the Run's slot (seconds).
RELEASE_WAIT_SECONDS = 1.0


def new_registration_id() -> RegistrationID:
    """Return a fresh opaque registration ID (``reg_`` + 32 hex digits)."""
    return RegistrationID(f"reg_{uuid.uuid4().hex}")


def new_invocation_id() -> str:
    """Return a fresh opaque invocation ID (32 hex digits)."""
    return uuid.uuid4().hex


def require_reference(run_uid: str, registration_id: str) -> None:
    """Check a FunctionRegistration reference has both fields (seed 002, "Scope").

    A Runtime Server always requires a non-empty registration ID (only runtimed's proxy hop
    accepts an empty one); an empty field is a caller bug, never an absent registration.

    Raises:
        ContractError: INVALID_ARGUMENT naming the empty field.
    """
    if not run_uid:
        raise invalid_argument("registration.run_uid is required")
    if not registration_id:
        raise invalid_argument("registration.registration_id is required")


@dataclass(frozen=True)
class RegisterRequest:
    """The fields of RegisterFunctionRequest, as plain Python values."""

    run_uid: str
    registration_attempt: int
    working_dir: str
    handler: str
    env: Mapping[str, str]
    idle_timeout_seconds: int
    registration_digest: str


@dataclass(frozen=True)
class InvokeRequest:
    """The fields of InvokeFunctionRequest, as plain Python values."""

    run_uid: str
    registration_id: str
    invocation_id: str
    input: bytes
    content_type: str
    timeout_millis: int


@dataclass
class _Live:
    """I/O handles of one registration generation."""

    registration: Registration
    worker: FunctionWorker | None = None
    #: set once the registration left REGISTERING (READY, FAILED or abandoned).
    settled: trio.Event = field(default_factory=trio.Event)
    start_scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    invoke_scope: trio.CancelScope | None = None
    #: the gRPC call of the in-flight invocation (``current_call_scope()``), if any.
    call_scope: trio.CancelScope | None = None
    #: set whenever no invocation is in flight.
    idle: trio.Event = field(default_factory=trio.Event)
    #: set once the worker is closed and local state removed.
    removed: trio.Event = field(default_factory=trio.Event)
    cancel_reason: str = ""

    def __post_init__(self) -> None:
        self.idle.set()


class FunctionService:
    """FunctionRuntime semantics over a language adapter (seed 002).

    Args:
        adapter: turns handlers into warm workers.
        work_dir: the server's work dir (resolved); working dirs must lie under it.
        nursery: where background work (worker start, retirement) runs; it must outlive
            the service.
        clock: wall clock in nanoseconds for ``last_activity_unix_nano``.
    """

    def __init__(
        self,
        adapter: FunctionAdapter,
        *,
        work_dir: Path,
        nursery: trio.Nursery,
        clock: WallClock = time.time_ns,
    ) -> None:
        self._adapter = adapter
        self._work_dir = work_dir
        self._nursery = nursery
        self.table = RegistrationTable(clock=clock)
        self._live: dict[RegistrationID, _Live] = {}

    # -- RegisterFunction -----------------------------------------------------------

    def _validate(self, req: RegisterRequest) -> RegistrationSpec:
        run_uid = validate_id("run_uid", req.run_uid)
        if req.registration_attempt < 1:
            raise invalid_argument(
                f"registration_attempt must be one-based (>= 1), got {req.registration_attempt}"
            )
        if not req.handler:
            raise invalid_argument("handler is required")
        handler_bytes = len(req.handler.encode())
        if handler_bytes > limits.MAX_HANDLER_BYTES:
            raise invalid_argument(
                f"handler is {handler_bytes} bytes; the limit is {limits.MAX_HANDLER_BYTES} bytes"
            )
        problem = self._adapter.handler_error(req.handler)
        if problem is not None:
            raise invalid_argument(problem)
        env = validate_env(req.env)
        if req.idle_timeout_seconds < 0:
            raise invalid_argument(
                f"idle_timeout_seconds must be >= 0, got {req.idle_timeout_seconds}"
            )
        digest = validate_digest(req.registration_digest)
        working_dir = resolve_working_dir(
            self._work_dir, req.working_dir, default=self._work_dir / run_uid, field="working_dir"
        )
        require_directory(working_dir, field="working_dir")
        return RegistrationSpec(
            run_uid=RunUID(run_uid),
            attempt=req.registration_attempt,
            digest=digest,
            working_dir=working_dir,
            handler=req.handler,
            env=env,
            idle_timeout_seconds=req.idle_timeout_seconds,
        )

    async def register(self, req: RegisterRequest) -> Registration:
        """Create or resume a registration and wait until it is READY or FAILED.

        Returns:
            The READY registration.

        Raises:
            ContractError: INVALID_ARGUMENT for bad fields, ALREADY_EXISTS for a different
                digest, FAILED_PRECONDITION for a lower attempt, a draining registration, or
                a failed initialisation (the detail carries ``fatal_error``).
        """
        spec = self._validate(req)
        decision = self.table.register(spec, new_registration_id())
        reg = decision.registration
        if decision.superseded is not None:
            old = self._live.get(decision.superseded.registration_id)
            if old is not None:
                self._nursery.start_soon(
                    self._retire, old, f"superseded by registration attempt {spec.attempt}"
                )
        live = self._live.get(reg.registration_id)
        if live is None:
            live = _Live(registration=reg)
            self._live[reg.registration_id] = live
            self._nursery.start_soon(self._start, live)
        await live.settled.wait()
        # runtimed copies these details into Run status: they name the attempt, never the
        # opaque registration ID (seed 000: such IDs do not belong in Run status).
        attempt = f"registration attempt {spec.attempt}"
        if self.table.get(reg.registration_id) is not reg:
            raise failed_precondition(
                f"{attempt} was superseded or unregistered while it was starting"
            )
        if reg.state is RegistrationState.FAILED:
            raise failed_precondition(f"{attempt} failed: {reg.fatal_error}")
        if reg.state is not RegistrationState.READY:
            raise failed_precondition(f"{attempt} is {reg.state.name}")
        return reg

    async def _start_worker(self, reg: Registration) -> FunctionWorker:
        spec = reg.spec
        return await self._adapter.start_worker(
            working_dir=spec.working_dir, handler=spec.handler, env=spec.env, run_uid=spec.run_uid
        )

    async def _start(self, live: _Live) -> None:
        try:
            await self._start_or_fail(live)
        finally:
            live.settled.set()

    async def _start_or_fail(self, live: _Live) -> None:
        reg = live.registration
        worker: FunctionWorker | None = None
        try:
            with live.start_scope:
                worker = await self._start_worker(reg)
        except RegistrationFailed as exc:
            self.table.mark_failed(reg.registration_id, str(exc))
            log.warning(
                "registration failed",
                extra={
                    "run_uid": reg.run_uid,
                    "registration_id": reg.registration_id,
                    "error": bound_text(str(exc)),
                },
            )
        except Exception as exc:  # an adapter bug must not take the server down
            self.table.mark_failed(reg.registration_id, f"{type(exc).__name__}: {exc}")
            log.exception("worker start crashed", extra={"run_uid": reg.run_uid})
        if worker is not None:
            if (
                self.table.get(reg.registration_id) is reg
                and reg.state is RegistrationState.REGISTERING
            ):
                live.worker = worker
                self.table.mark_ready(reg.registration_id)
                log.info(
                    "registration ready",
                    extra={"run_uid": reg.run_uid, "registration_id": reg.registration_id},
                )
            else:
                with trio.CancelScope(shield=True), trio.move_on_after(_WORKER_CLOSE_SECONDS):
                    await worker.aclose()

    # -- FunctionStatus -------------------------------------------------------------

    def status(self, run_uid: str, registration_id: str) -> Registration:
        """Return the current registration named by the reference (read only).

        Raises:
            ContractError: INVALID_ARGUMENT for an empty field, NOT_FOUND for an unknown Run
                UID, FAILED_PRECONDITION for a stale ID.
        """
        require_reference(run_uid, registration_id)
        return self.table.resolve(run_uid, registration_id)

    # -- InvokeFunction -------------------------------------------------------------

    async def invoke(self, req: InvokeRequest) -> tuple[str, InvokeResult]:
        """Run one invocation under its timeout.

        Returns:
            (the invocation ID in use, the result).

        Raises:
            ContractError: INVALID_ARGUMENT (fields, payload), NOT_FOUND, FAILED_PRECONDITION
                (stale, not ready, draining; the worker could not be restarted),
                RESOURCE_EXHAUSTED (one already in flight), DEADLINE_EXCEEDED (this
                invocation only), CANCELLED (unregister or supersede), UNKNOWN (handler error).
        """
        require_reference(req.run_uid, req.registration_id)
        invocation_id = req.invocation_id or new_invocation_id()
        if len(invocation_id.encode()) > limits.MAX_INVOCATION_ID_BYTES:
            raise invalid_argument(
                f"invocation_id is longer than {limits.MAX_INVOCATION_ID_BYTES} bytes"
            )
        if req.timeout_millis < 0:
            raise invalid_argument(f"timeout_millis must be >= 0, got {req.timeout_millis}")
        if len(req.input) > limits.MAX_INVOKE_INPUT_BYTES:
            raise invalid_argument(
                f"input is {len(req.input)} bytes; the limit is {limits.MAX_INVOKE_INPUT_BYTES}"
            )
        timeout = (
            req.timeout_millis / 1000
            if req.timeout_millis
            else limits.DEFAULT_INVOKE_TIMEOUT_SECONDS
        )
        reg = await self._admit(req, invocation_id)
        live = self._live[reg.registration_id]
        live.idle = trio.Event()
        live.call_scope = current_call_scope()
        fields = {"run_uid": reg.run_uid, "invocation_id": invocation_id}
        start = trio.current_time()
        answered = False
        try:
            with trio.CancelScope() as scope:
                live.invoke_scope = scope
                with trio.move_on_after(timeout) as deadline:
                    result = await self._call(live, req, invocation_id)
                if deadline.cancelled_caught:
                    raise ContractError(
                        Code.DEADLINE_EXCEEDED,
                        f"invocation {invocation_id} exceeded its timeout of"
                        f" {math.ceil(timeout * 1000)} ms; the worker was stopped",
                    )
            if scope.cancelled_caught:
                raise ContractError(
                    Code.CANCELLED, f"invocation {invocation_id} cancelled: {live.cancel_reason}"
                )
            answered = True
        except ContractError as exc:
            log.info(
                "invocation failed",
                extra={
                    **fields,
                    "code": exc.code.name,
                    "error": exc.message,
                    "duration_ms": round((trio.current_time() - start) * 1000, 3),
                },
            )
            raise
        except trio.Cancelled:
            # from outside: the caller went away (cancelled call, closed connection,
            # grpc-timeout) or the server is stopping; the worker was stopped.
            log.info(
                "invocation cancelled by the caller",
                extra={**fields, "duration_ms": round((trio.current_time() - start) * 1000, 3)},
            )
            raise
        finally:
            live.invoke_scope = None
            live.call_scope = None
            self.table.end_invocation(reg.registration_id)
            live.idle.set()
            if not answered:
                # the slot is free first (seed 000: a caller that goes away frees it at once);
                # then a worker stopped mid-call is reaped before this call's outcome leaves
                await self._reap_stopped(live)
        if log.isEnabledFor(logging.DEBUG):  # per invocation: skip building the fields
            log.debug(
                "invocation done",
                extra={**fields, "duration_ms": round((trio.current_time() - start) * 1000, 3)},
            )
        return invocation_id, result

    async def _admit(self, req: InvokeRequest, invocation_id: str) -> Registration:
        """Take the Run's one in-flight slot (``RegistrationTable.begin_invocation``).

        When the slot is held by an invocation whose gRPC call was cancelled (its caller
        reset the stream or went away: recorded when the reset was read, before this
        request), that invocation is unwinding and frees the slot within a scheduler pass
        or two; this waits for it (at most :data:`RELEASE_WAIT_SECONDS`) instead of
        answering RESOURCE_EXHAUSTED. Issue 8: the next invoke after a caller disconnected
        succeeds at once, even when the reset and the next request arrive in one read.

        Raises:
            ContractError: as ``begin_invocation``; RESOURCE_EXHAUSTED at once when the
                in-flight invocation's call is live (a genuine overlap, no queue).
        """
        try:
            return self.table.begin_invocation(req.run_uid, req.registration_id, invocation_id)
        except ContractError as exc:
            if exc.code is not Code.RESOURCE_EXHAUSTED:
                raise
            reg = self.table.resolve(req.run_uid, req.registration_id)
            live = self._live.get(reg.registration_id)
            holder = None if live is None else live.call_scope
            if live is None or holder is None or not holder.cancel_called:
                raise
            with trio.move_on_after(RELEASE_WAIT_SECONDS):
                await live.idle.wait()
        return self.table.begin_invocation(req.run_uid, req.registration_id, invocation_id)

    @staticmethod
    async def _reap_stopped(live: _Live) -> None:
        """Reap the worker's process if a cancelled call killed it without reaping (shielded).

        Workers that leave that to the service have a ``reap`` method (the Python worker:
        waiting for a SIGKILLed process); the others reap before their ``invoke`` returns.
        """
        reap = getattr(live.worker, "reap", None)
        if reap is not None:
            with trio.CancelScope(shield=True):
                await reap()

    async def _call(self, live: _Live, req: InvokeRequest, invocation_id: str) -> InvokeResult:
        reg = live.registration
        worker = live.worker
        if worker is None or not worker.alive:
            live.worker = None
            if worker is not None:
                await worker.aclose()
            try:
                worker = await self._start_worker(reg)
            except RegistrationFailed as exc:
                self.table.mark_failed(reg.registration_id, str(exc))
                raise failed_precondition(
                    f"registration {reg.registration_id} of run {reg.run_uid} failed while"
                    f" restarting its worker: {reg.fatal_error}"
                ) from None
            live.worker = worker
        try:
            return await worker.invoke(
                req.input, content_type=req.content_type, invocation_id=invocation_id
            )
        except InvalidInput as exc:
            raise invalid_argument(bound_text(str(exc))) from None
        except InvocationError as exc:
            raise ContractError(
                Code.UNKNOWN, bound_text(f"{exc.error_type}: {exc.message}")
            ) from None

    # -- UnregisterFunction ---------------------------------------------------------

    async def unregister(
        self,
        run_uid: str,
        registration_id: str,
        *,
        cancel_in_flight: bool,
        drain_timeout_millis: int,
    ) -> None:
        """Drain or cancel the registration's work, stop its worker and forget it.

        Waits at most ``drain_timeout_millis`` (milliseconds) for an in-flight invocation
        when ``cancel_in_flight`` is false, then cancels it.

        Raises:
            ContractError: INVALID_ARGUMENT for an empty reference field or a negative
                drain timeout, FAILED_PRECONDITION for a stale ID. An absent registration (no
                registration has this Run UID) is a success. If the caller gives up (its RPC
                is cancelled), the drain and removal still finish in the background.
        """
        require_reference(run_uid, registration_id)
        if drain_timeout_millis < 0:
            raise invalid_argument(f"drain_timeout_millis must be >= 0, got {drain_timeout_millis}")
        try:
            previous = self.table.resolve(run_uid, registration_id).state
        except ContractError as exc:
            if exc.code is Code.NOT_FOUND:
                return
            raise
        reg = self.table.begin_unregister(run_uid, registration_id)
        if reg is None:
            return
        live = self._live[reg.registration_id]
        if previous is not RegistrationState.DRAINING:
            log.info(
                "unregistering",
                extra={
                    "run_uid": run_uid,
                    "registration_id": registration_id,
                    "cancel_in_flight": cancel_in_flight,
                    "drain_timeout_ms": drain_timeout_millis,
                },
            )
            # in the service's nursery, so a caller that gives up (cancelled RPC) cannot
            # leave the registration DRAINING for ever: the drain is bounded on its own.
            self._nursery.start_soon(
                self._drain_and_remove, live, cancel_in_flight, drain_timeout_millis
            )
        await live.removed.wait()

    async def _drain_and_remove(
        self, live: _Live, cancel_in_flight: bool, drain_timeout_millis: int
    ) -> None:
        """Wait up to ``drain_timeout_millis`` for the in-flight invocation, then retire."""
        if not cancel_in_flight:
            with trio.move_on_after(drain_timeout_millis / 1000):
                await live.idle.wait()
        await self._retire(live, "registration unregistered")

    async def _retire(self, live: _Live, reason: str) -> None:
        """Cancel the start and the in-flight invocation, stop the worker, drop the state.

        The table entry is removed only if this registration is still the current one (a
        superseded registration's Run UID belongs to its successor).
        """
        live.cancel_reason = reason
        live.start_scope.cancel()
        if live.invoke_scope is not None:
            live.invoke_scope.cancel()
        with trio.CancelScope(shield=True):
            with trio.move_on_after(_WORKER_CLOSE_SECONDS):
                await live.settled.wait()
                await live.idle.wait()
            if live.worker is not None:
                with trio.move_on_after(_WORKER_CLOSE_SECONDS):
                    await live.worker.aclose()
                live.worker = None
        self._live.pop(live.registration.registration_id, None)
        self.table.remove(live.registration.registration_id)
        live.removed.set()

    async def aclose(self) -> None:
        """Stop every worker (server shutdown); bounded by a shielded deadline."""
        with trio.CancelScope(shield=True), trio.move_on_after(_WORKER_CLOSE_SECONDS):
            for live in list(self._live.values()):
                live.start_scope.cancel()
                if live.invoke_scope is not None:
                    live.invoke_scope.cancel()
                if live.worker is not None:
                    await live.worker.aclose()
                    live.worker = None
