"""The pure decision of the function-Run lifecycle: given the Run and what this Pod knows
locally, what is the next step? (seeds 000 and 002; issue 7).

No I/O, no clock reads: :func:`decide_function` gets the Run as cached, the local view and
``now``, and returns one action; :mod:`runtimed.functions.lifecycle` performs it and asks
again. Order of the rules (first match wins), for a function Run assigned to this Pod:

1. deleting (``deletionTimestamp``) with the ``kruntimes.io/registration-cleanup``
   finalizer: :class:`Cleanup` (kind DELETE), then :class:`RemoveFinalizer` (seed 000,
   Cleanup and Finalization);
2. terminal: release local leftovers (:class:`Release`), then drop our finalizer;
3. Scheduled: cancel -> Cancelled, lifetime over -> Timeout, else :class:`Claim` (Running +
   ``startTime``);
4. Running/Ready: cancel -> :class:`Cleanup` then Cancelled; ``spec.timeout`` past
   ``startTime`` -> Cleanup then Timeout/LifetimeExceeded; idle expiry observed by the
   poller -> Cleanup then Timeout/IdleTimeout; a registration failure or loss of the
   *current* attempt -> :class:`Fail` through the shared retry engine (in place: attempt + 1
   and a new registration, or Failed); in retry backoff -> :class:`Wait` /
   :class:`ResumeRetry`; no finalizer -> :class:`AddFinalizer` (always before
   registration); Ready while the local Runtime Server fails its health checks ->
   :class:`MarkUnavailable` (``Ready=False Unavailable``, once per outage), then
   :class:`Serve` until it answers again; a registration not confirmed since such an outage
   -> :class:`Confirm` (FunctionStatus); not registered for the current attempt ->
   :class:`Register` (``adopt`` when the phase is already Ready: re-adoption after a
   runtimed restart writes no status); registered while Running, or Ready with the
   condition not ``True/FunctionRegistered`` -> :class:`MarkReady`; otherwise :class:`Serve`.

Seed 000: "Ready=True means the assigned runtimed has registered the Run UID with the local
Runtime Server and can accept invokes"; while the server fails its health checks (runtimed
sets its Pod's ``RuntimedReady`` False and answers invokes 503) it cannot. The phase stays
Ready: the Run is still registered and holds its reservation, no attempt is consumed and
nothing re-registers (``Ready -> Running`` is the in-place retry of a new attempt); the
condition says it is not invocable now, as a Pod's ``Ready`` condition does within its
phase. Once the server answers, FunctionStatus confirms the registration (READY: back to
``Ready=True``; gone or failed: the registration failure path, ``RegistrationLost``).

A Run not (or no longer) assigned to this Pod, or Pending again after the reaper's requeue,
only has its local leftovers released. Nothing here writes status per invocation: the
only inputs that change while a Run is Ready are the poller's observations (failure, loss,
idle expiry).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import TypeAlias

from krt.api.conditions import bound_message, find_condition, set_condition, wire_conditions
from krt.api.constants import (
    REGISTRATION_CLEANUP_FINALIZER,
    ConditionStatus,
    Reason,
    RunConditionType,
)
from krt.api.lifecycle import (
    cancelled_patch,
    claim_patch,
    ready_patch,
    timed_out_patch,
    timeout_deadline,
)
from krt.api.patches import StatusPatch
from krt.api.phases import Phase, is_terminal
from krt.api.retry import (
    Failure,
    FailureReason,
    Reentry,
    Retry,
    Stale,
    Terminal,
    decide,
    resume_patch,
    retry_wait_seconds,
)
from krt.api.run import Endpoint, FunctionMode, Run

__all__ = [
    "AddFinalizer",
    "Claim",
    "Cleanup",
    "CleanupKind",
    "Fail",
    "FunctionAction",
    "Ignore",
    "LocalView",
    "MarkReady",
    "MarkUnavailable",
    "Confirm",
    "Register",
    "Release",
    "RemoveFinalizer",
    "ResumeRetry",
    "Serve",
    "Wait",
    "decide_function",
    "failure_from_register_error",
    "is_function_run",
    "unavailable_patch",
]


@dataclass(frozen=True, slots=True)
class LocalView:
    """What this runtimed knows about one function Run (none of it is in status).

    Attributes:
        attempt: the attempt the local state belongs to (``None``: nothing registered yet).
        registered: RegisterFunction of :attr:`attempt` succeeded (the ID is in memory).
        failure: a registration failure or loss of :attr:`attempt` not yet applied.
        idle_expired: the idle poller saw ``idleTimeoutSeconds`` pass with nothing in flight.
        cleaned: cleanup ran to the end (unregistered, files removed): nothing is held here.
        unconfirmed: the Runtime Server failed its health checks since the registration was
            last confirmed: ask FunctionStatus before saying ``Ready=True`` again.
    """

    attempt: int | None = None
    registered: bool = False
    failure: Failure | None = None
    idle_expired: bool = False
    cleaned: bool = False
    unconfirmed: bool = False


class CleanupKind(StrEnum):
    """Why a function Run's registration is being cleaned up."""

    CANCEL = "Cancel"
    DELETE = "Delete"
    LIFETIME = "Lifetime"
    IDLE = "Idle"


@dataclass(frozen=True, slots=True)
class Ignore:
    """Nothing to do."""

    why: str


@dataclass(frozen=True, slots=True)
class Release:
    """Clean up local leftovers (unregister, files, registry) without any status write."""

    why: str


@dataclass(frozen=True, slots=True)
class Claim:
    """Write ``patch`` (Scheduled -> Running, ``startTime``)."""

    patch: StatusPatch


@dataclass(frozen=True, slots=True)
class AddFinalizer:
    """Add ``kruntimes.io/registration-cleanup`` (conditional on resourceVersion)."""


@dataclass(frozen=True, slots=True)
class RemoveFinalizer:
    """Remove ``kruntimes.io/registration-cleanup`` (cleanup is complete)."""


@dataclass(frozen=True, slots=True)
class Register:
    """Prepare the source and call RegisterFunction with ``attempt``.

    Attributes:
        attempt: ``status.attempt``.
        adopt: the Run is already Ready (runtimed restarted): success writes no status.
            The lifecycle first checks that the server still holds a registration for the
            Run UID; if not, the loss is a ``RegistrationLost`` failure, never a silent
            fresh registration under the old attempt.
    """

    attempt: int
    adopt: bool


@dataclass(frozen=True, slots=True)
class MarkReady:
    """Write ``patch``: phase Ready, ``Ready=True/FunctionRegistered``, ``status.endpoint``."""

    patch: StatusPatch


@dataclass(frozen=True, slots=True)
class MarkUnavailable:
    """Write ``patch``: ``Ready=False/Unavailable`` (phase kept), the health failure as message."""

    patch: StatusPatch


@dataclass(frozen=True, slots=True)
class Confirm:
    """Ask FunctionStatus whether the registration survived the Runtime Server's outage."""


@dataclass(frozen=True, slots=True)
class Serve:
    """Ready and registered: keep the idle poller running.

    Attributes:
        after: seconds until ``spec.timeout`` expires (look again then), or ``None``.
    """

    after: float | None


@dataclass(frozen=True, slots=True)
class Fail:
    """Apply a registration failure: persist ``decision.patch`` (Retry or Failed)."""

    decision: Retry | Terminal


@dataclass(frozen=True, slots=True)
class ResumeRetry:
    """Backoff over: write ``patch`` (``retryAfter`` removed); register in a later step."""

    patch: StatusPatch


@dataclass(frozen=True, slots=True)
class Wait:
    """Look again after ``after`` seconds (retry backoff)."""

    after: float


@dataclass(frozen=True, slots=True)
class Cleanup:
    """Run the cleanup sequence, then write ``patch`` (or, for DELETE, remove the finalizer).

    Attributes:
        kind: why.
        patch: the terminal status patch to write after cleanup (``None`` for DELETE).
        lookup: a registration may exist on the Runtime Server whose ID this runtimed does
            not know (it restarted): learn it by an idempotent RegisterFunction with the
            same attempt and digest before unregistering.
    """

    kind: CleanupKind
    patch: StatusPatch | None
    lookup: bool


FunctionAction: TypeAlias = (
    Ignore
    | Release
    | Claim
    | AddFinalizer
    | RemoveFinalizer
    | Register
    | MarkReady
    | MarkUnavailable
    | Confirm
    | Serve
    | Fail
    | ResumeRetry
    | Wait
    | Cleanup
)


def is_function_run(obj: object) -> bool:
    """True when a raw Run dict has ``spec.mode.function`` (the daemon's dispatch test)."""
    if not isinstance(obj, dict):
        return False
    mode = (obj.get("spec") or {}).get("mode") or {}
    return isinstance(mode, dict) and mode.get("function") is not None


def failure_from_register_error(code: str, detail: str, *, attempt: int) -> Failure | None:
    """Map a RegisterFunction error status to a registration failure (seed 002).

    Args:
        code: the gRPC status name.
        detail: the server's bounded message (the import error, the missing function, ...).
        attempt: the attempt that was registered.

    Returns:
        ``FunctionUnimplemented`` for UNIMPLEMENTED (permanent), ``RegistrationFailed``
        for every refusal the same request would meet again, or ``None`` for transient
        codes (UNAVAILABLE, DEADLINE_EXCEEDED, CANCELLED, RESOURCE_EXHAUSTED): retry the RPC.
    """
    if code in ("UNAVAILABLE", "DEADLINE_EXCEEDED", "CANCELLED", "RESOURCE_EXHAUSTED", "ABORTED"):
        return None
    if code == "UNIMPLEMENTED":
        return Failure(
            FailureReason.FUNCTION_UNIMPLEMENTED,
            f"the Runtime Server does not implement executor.v1.FunctionRuntime: {detail}",
            attempt=attempt,
        )
    return Failure(
        FailureReason.REGISTRATION_FAILED, f"RegisterFunction {code}: {detail}", attempt=attempt
    )


def _has_finalizer(run: Run) -> bool:
    return REGISTRATION_CLEANUP_FINALIZER in run.metadata.finalizers


def _needs_lookup(run: Run, local: LocalView | None) -> bool:
    """A registration this runtimed does not know may exist (it restarted mid-lifecycle)."""
    if run.status.phase not in (Phase.RUNNING, Phase.READY):
        return False
    return local is None or not (local.registered or local.cleaned)


def _marked_unavailable(run: Run) -> bool:
    ready = find_condition(run.status.conditions, RunConditionType.READY)
    return (
        ready is not None
        and ready.status is ConditionStatus.FALSE
        and ready.reason == Reason.UNAVAILABLE
    )


def unavailable_patch(run: Run, *, problem: str, now: datetime) -> StatusPatch:
    """A Ready function Run whose Runtime Server fails its health checks: ``Ready=False``.

    The phase stays Ready (see the module docstring); ``status.reason``/``message`` say why
    (``krt get -o wide``), as the condition does.

    Args:
        run: the Run (phase Ready).
        problem: the health failure, e.g. ``"RuntimeServerUnreachable: connection refused"``.
        now: the wall clock (``lastTransitionTime``).
    """
    message = bound_message(
        f"the local Runtime Server is not answering its health checks ({problem}); "
        "invokes get 503 until it answers again and the registration is confirmed"
    )
    conditions = set_condition(
        run.status.conditions,
        RunConditionType.READY,
        False,
        reason=Reason.UNAVAILABLE,
        message=message,
        now=now,
    )
    return {
        "reason": Reason.UNAVAILABLE.value,
        "message": message,
        "conditions": wire_conditions(conditions),
    }


def _ready_and_current(run: Run, endpoint: Endpoint) -> bool:
    ready = find_condition(run.status.conditions, RunConditionType.READY)
    return (
        ready is not None
        and ready.status is ConditionStatus.TRUE
        and ready.reason == Reason.FUNCTION_REGISTERED
        and run.status.endpoint == endpoint
    )


def decide_function(
    run: Run,
    *,
    pod_uid: str,
    local: LocalView | None,
    endpoint: Endpoint,
    now: datetime,
    server_down: str | None = None,
) -> FunctionAction:
    """The next step for one function Run (see the module docstring for the rule order).

    Args:
        run: the Run as cached (or as our last write returned it).
        pod_uid: this Pod's UID (the assignment fence).
        local: local knowledge, ``None`` when this runtimed holds nothing for the Run.
        endpoint: the ``status.endpoint`` this Run must publish.
        now: the wall clock.
        server_down: why the local Runtime Server fails its health checks (the readiness
            loop's last answer), or ``None`` while it passes them.

    Returns:
        One action.

    Raises:
        DurationError: ``spec.timeout`` or ``retryPolicy.backoff`` is malformed (the CRD
            rejects both).
    """
    if not isinstance(run.spec.mode, FunctionMode):
        return Ignore("a task Run")
    status = run.status
    phase = status.phase
    mine = bool(pod_uid) and status.assigned_pod_uid == pod_uid
    held = local is not None and not local.cleaned
    if not mine:
        return Release("not assigned to this Pod") if held else Ignore("not assigned to this Pod")
    if run.metadata.is_deleting:
        if not _has_finalizer(run):
            return Release("deleted") if held else Ignore("deleting, finalizer already removed")
        if local is None or not local.cleaned:
            return Cleanup(CleanupKind.DELETE, None, _needs_lookup(run, local))
        return RemoveFinalizer()
    if is_terminal(phase):
        if held:
            return Release(f"phase {phase.value}")
        if _has_finalizer(run):
            return RemoveFinalizer()
        return Ignore(f"phase {phase.value}")
    if phase is Phase.PENDING:
        return Release("requeued") if held else Ignore("Pending")

    deadline = timeout_deadline(run)
    expired = deadline is not None and now >= deadline
    lookup = _needs_lookup(run, local)
    if run.spec.cancel_requested:
        return Cleanup(CleanupKind.CANCEL, cancelled_patch(run, now=now), lookup)
    if expired:
        message = f"spec.timeout {run.spec.timeout} elapsed since startTime"
        return Cleanup(
            CleanupKind.LIFETIME,
            timed_out_patch(run, reason=Reason.LIFETIME_EXCEEDED, message=message, now=now),
            lookup,
        )
    if phase is Phase.SCHEDULED:
        return Claim(claim_patch(run, now=now))

    current = max(1, status.attempt)
    if local is not None and local.attempt == current and local.idle_expired:
        mode = run.spec.mode
        message = f"no invocation for idleTimeoutSeconds={mode.idle_timeout_seconds}"
        return Cleanup(
            CleanupKind.IDLE,
            timed_out_patch(run, reason=Reason.IDLE_TIMEOUT, message=message, now=now),
            lookup,
        )
    if local is not None and local.failure is not None and local.attempt == current:
        decision = decide(run, local.failure, now=now, reentry=Reentry.IN_PLACE)
        if not isinstance(decision, Stale):
            return Fail(decision)
    if phase is Phase.RUNNING and status.retry_after is not None:
        wait = retry_wait_seconds(status, now=now)
        if wait > 0:
            return Wait(wait)
        return ResumeRetry(resume_patch(run, now=now))
    if not _has_finalizer(run):
        return AddFinalizer()
    after = (deadline - now).total_seconds() if deadline is not None else None
    if phase is Phase.READY and server_down is not None:
        if not _marked_unavailable(run):
            return MarkUnavailable(unavailable_patch(run, problem=server_down, now=now))
        return Serve(after)  # the health change enqueues the Run again
    registered = local is not None and local.registered and local.attempt == current
    if registered and local is not None and local.unconfirmed:
        return Confirm()
    if local is None or not local.registered or local.attempt != current:
        return Register(current, adopt=phase is Phase.READY)
    if phase is Phase.RUNNING or not _ready_and_current(run, endpoint):
        return MarkReady(ready_patch(run, endpoint=endpoint, now=now))
    return Serve(after)
