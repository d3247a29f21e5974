"""Status patches for the ordinary lifecycle transitions, so every writer sets them alike.

Seed 000 (Lifecycle State Machine, Run Status API) and seed 003 (Task Execution Lifecycle):

* scheduler: :func:`unschedulable_patch` (stays Pending, ``Scheduled=False`` with why),
  :func:`bind_patch` (Pending -> Scheduled, ``attempt`` 1 on first bind),
  :func:`cancelled_patch` for a cancel before assignment;
* runtimed: :func:`claim_patch` (Scheduled -> Running, ``startTime``),
  :func:`ready_patch` (function registered), :func:`succeeded_patch`,
  :func:`timed_out_patch`, :func:`cancelled_patch`; failures go through
  :func:`krt.api.retry.decide`.

Each function is pure, returns a :data:`~krt.api.patches.StatusPatch` for a conditional
update, and raises ``ValueError`` when the Run's current phase does not allow the transition
(:func:`krt.api.phases.can_transition`), so a writer acting on a stale read fails loudly
instead of writing a transition the state machine forbids.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta

from krt.api.conditions import Condition, bound_message, set_condition, wire_conditions
from krt.api.constants import Reason, RunConditionType
from krt.api.limits import MAX_MESSAGE_CHARS
from krt.api.outputs import validate_outputs
from krt.api.patches import StatusPatch
from krt.api.phases import Phase, can_transition
from krt.api.run import Endpoint, Run, RunStatus
from krt.api.times import format_time

UNSCHEDULABLE_REASONS = frozenset(
    {Reason.RUNTIME_NOT_FOUND, Reason.NO_READY_POD, Reason.INSUFFICIENT_CAPACITY}
)
TIMEOUT_REASONS = frozenset(
    {Reason.TIMEOUT_EXCEEDED, Reason.LIFETIME_EXCEEDED, Reason.IDLE_TIMEOUT}
)


def _require(run: Run, new: Phase) -> None:
    if not can_transition(run.status.phase, new):
        raise ValueError(f"Run {run.key}: phase {run.status.phase.value} cannot become {new.value}")


def run_conditions(
    run: Run,
    ctype: RunConditionType,
    status: bool,
    *,
    reason: str,
    message: str,
    now: datetime,
    ready_reason: str | None = None,
    base: Sequence[Condition] | None = None,
) -> list[Condition]:
    """Set one condition of a Run and, for a function Run, ``Ready=False`` alongside it.

    Every lifecycle transition of a function Run except registration makes it not Ready
    (seed 002: invokes are accepted only while ``Ready=True``), with the same message.

    Args:
        run: the Run (its ``spec`` says whether it is a function Run).
        ctype: the condition to set (``Scheduled``, ``Running``, ...).
        status: its new status.
        reason: its reason (a :class:`~krt.api.constants.Reason` or failure reason).
        message: its message (also ``Ready``'s). now: current time.
        ready_reason: ``Ready``'s reason (default ``reason``).
        base: the conditions to start from (default ``run.status.conditions``).

    Returns:
        The new condition list (``run`` is not changed).
    """
    conditions = set_condition(
        run.status.conditions if base is None else base,
        ctype,
        status,
        reason=reason,
        message=message,
        now=now,
    )
    if run.spec.is_function:
        conditions = set_condition(
            conditions,
            RunConditionType.READY,
            False,
            reason=ready_reason or reason,
            message=message,
            now=now,
        )
    return conditions


def ended_patch(
    phase: Phase, reason: str, message: str, conditions: Sequence[Condition], now: datetime
) -> StatusPatch:
    """The status patch of a Run ending in the terminal ``phase`` (pure; no phase check).

    Sets ``phase``, ``reason``, ``message``, ``completionTime`` and ``conditions`` and
    removes ``retryAfter``. Callers check the transition first (:func:`_require`, the
    scheduler's and the retry engine's own rules).
    """
    return {
        "phase": phase.value,
        "reason": str(reason),
        "message": message,
        "completionTime": format_time(now),
        "retryAfter": None,
        "conditions": wire_conditions(conditions),
    }


def unschedulable_patch(run: Run, *, reason: Reason, message: str, now: datetime) -> StatusPatch:
    """Keep a Pending Run Pending and say why it cannot be placed.

    Args:
        run: a Pending Run.
        reason: ``RuntimeNotFound``, ``NoReadyPod`` or ``InsufficientCapacity``.
        message: detail for users (``"0 of 3 Pods have 1 free runs"``).
        now: current time.

    Returns:
        The patch, or ``{}`` when the Run already says exactly this (no write needed).

    Raises:
        ValueError: the Run is not Pending or ``reason`` is not an unschedulable reason.
    """
    if run.status.phase is not Phase.PENDING:
        raise ValueError(f"Run {run.key} is {run.status.phase.value}, not Pending")
    if reason not in UNSCHEDULABLE_REASONS:
        raise ValueError(f"{reason!r} is not a reason a Run cannot be scheduled")
    conditions = set_condition(
        run.status.conditions,
        RunConditionType.SCHEDULED,
        False,
        reason=reason,
        message=message,
        now=now,
    )
    if conditions == list(run.status.conditions):
        return {}
    return {"phase": Phase.PENDING.value, "conditions": wire_conditions(conditions)}


def bind_patch(run: Run, *, pod_name: str, pod_uid: str, now: datetime) -> StatusPatch:
    """Bind a Pending Run to a Runtime Pod (the scheduler's conditional update).

    The one bind implementation (the scheduler's :func:`krt.controlplane.scheduling.
    bind_decision` writes it). Sets phase Scheduled, ``assignedPod``/``assignedPodUID``,
    ``attempt`` (1 on the first bind; a requeued Run keeps the attempt the retry engine gave
    it), ``message`` (``"bound to Pod p (attempt n)"``), removes ``retryAfter`` and sets
    ``Scheduled=True/Assigned``; a function Run also gets ``Ready=False/Registering`` (seed
    000: Ready is false with a specific reason during registration; it replaces the
    scheduler's ``NotScheduled``). A requeued retry (``status.reason`` set by the retry
    engine) has ``reason`` cleared and the failed attempt named in the message, so the
    top-level reason and message describe the new attempt (Kubernetes convention).

    Args:
        run: a Pending Run. pod_name, pod_uid: the chosen Pod. now: current time.

    Returns:
        The status merge patch.

    Raises:
        ValueError: the Run is not Pending, or the Pod name or UID is empty.
    """
    status = run.status
    if status.phase is not Phase.PENDING:
        raise ValueError(f"Run {run.key} is {status.phase.value}, not Pending")
    if not pod_name or not pod_uid:
        raise ValueError("bind needs the Pod's name and UID")
    return bind_patch_unchecked(run, pod_name, pod_uid, now)


def bind_patch_unchecked(run: Run, pod_name: str, pod_uid: str, now: datetime) -> StatusPatch:
    """:func:`bind_patch` without its checks, for a caller that made them (the scheduler).

    Args:
        run: a Pending Run. pod_name, pod_uid: the chosen Pod (not empty). now: current time.

    Returns:
        The status merge patch (see :func:`bind_patch`).
    """
    status = run.status
    attempt = max(1, status.attempt)
    previous = previous_failure(status) if status.reason is not None else None
    if previous is None:
        message = f"bound to Pod {pod_name} (attempt {attempt})"
    else:
        message = with_previous_failure(f"bound to Pod {pod_name} (attempt {attempt}; ", previous)
    # (run_conditions spelled out: the bind is on the task burst's hot path)
    conditions = set_condition(
        status.conditions,
        RunConditionType.SCHEDULED,
        True,
        reason=Reason.ASSIGNED,
        message=message,
        now=now,
    )
    if run.spec.is_function:
        conditions = set_condition(
            conditions,
            RunConditionType.READY,
            False,
            reason=Reason.REGISTERING,
            message=message,
            now=now,
        )
    patch: StatusPatch = {
        "phase": Phase.SCHEDULED.value,
        "assignedPod": pod_name,
        "assignedPodUID": pod_uid,
        "attempt": attempt,
        "retryAfter": None,
        "message": message,
        "conditions": wire_conditions(conditions),
    }
    if previous is not None:
        patch["reason"] = None
    return patch


_FAILED_SUMMARY = re.compile(r"attempt (\d+) of \d+ failed \(([^)]*)\)(?:: )?")
_NEXT_ATTEMPT = re.compile(r"; attempt \d+ after [^;]*s\Z")


def previous_failure(status: RunStatus) -> str | None:
    """Name the failed attempt a retry follows, for the message of the attempt now running.

    Reads ``status.reason`` and the message :func:`krt.api.retry.decide` wrote for the
    retry (``"attempt 1 of 3 failed (ExecutionFailed): exit code 3; ...; attempt 2 after
    1s"``) and drops the backoff part, which no longer applies once the attempt runs.

    Args:
        status: the Run's status while it waits for (or just left) retry backoff.

    Returns:
        ``"attempt 1 failed: ExecutionFailed: exit code 3; stderr: ..."``, or ``None``
        when ``status.reason`` is unset (no failure to name).
    """
    reason = status.reason
    if reason is None:
        return None
    failed = max(1, status.attempt - 1)
    detail = _NEXT_ATTEMPT.sub("", status.message or "")
    summary = _FAILED_SUMMARY.match(detail)
    if summary is not None:
        failed = int(summary.group(1))
        reason = summary.group(2) or reason
        detail = detail[summary.end() :]
    return f"attempt {failed} failed: {reason}" + (f": {detail}" if detail else "")


def with_previous_failure(head: str, previous: str) -> str:
    """``head + previous + ")"`` within the message bound, keeping ``previous``'s tail.

    Args:
        head: the start of the message, ending in ``"("`` or ``"; "`` (kept whole).
        previous: :func:`previous_failure`'s text (its end, a stderr tail, is kept).

    Returns:
        At most :data:`~krt.api.limits.MAX_MESSAGE_CHARS` characters.
    """
    room = max(2, MAX_MESSAGE_CHARS - len(head) - 1)
    return bound_message(head + bound_message(previous, limit=room) + ")")


def claim_patch(run: Run, *, now: datetime) -> StatusPatch:
    """runtimed claims a Scheduled Run: phase Running, ``Running=True/Claimed``.

    ``startTime`` is set only when unset, so ``spec.timeout`` bounds the Run across attempts.

    Raises:
        ValueError: the Run is not Scheduled.
    """
    if run.status.phase is not Phase.SCHEDULED:
        raise ValueError(f"Run {run.key} is {run.status.phase.value}, not Scheduled")
    conditions = set_condition(
        run.status.conditions,
        RunConditionType.RUNNING,
        True,
        reason=Reason.CLAIMED,
        message=f"attempt {max(1, run.status.attempt)} claimed by Pod {run.status.assigned_pod}",
        now=now,
    )
    patch: StatusPatch = {"phase": Phase.RUNNING.value, "conditions": wire_conditions(conditions)}
    if run.status.start_time is None:
        patch["startTime"] = format_time(now)
    return patch


def ready_patch(run: Run, *, endpoint: Endpoint, now: datetime) -> StatusPatch:
    """A function Run is registered and accepts invokes: phase Ready, ``Ready=True``.

    Raises:
        ValueError: not a function Run, or not Running/Ready.
    """
    if not run.spec.is_function:
        raise ValueError(f"Run {run.key} is a task; only function Runs become Ready")
    _require(run, Phase.READY)
    conditions = set_condition(
        run.status.conditions,
        RunConditionType.READY,
        True,
        reason=Reason.FUNCTION_REGISTERED,
        message=f"registered on Pod {run.status.assigned_pod}",
        now=now,
    )
    return {
        "phase": Phase.READY.value,
        "reason": Reason.FUNCTION_REGISTERED.value,
        "message": None,
        "endpoint": endpoint.to_dict(),
        "conditions": wire_conditions(conditions),
    }


def succeeded_patch(run: Run, *, outputs: Mapping[str, str], now: datetime) -> StatusPatch:
    """A task's execution succeeded: phase Succeeded with its bounded outputs.

    Raises:
        OutputsError: ``outputs`` break a bound; fail the attempt with reason
            ``OutputsInvalid`` (through :func:`krt.api.retry.decide`) instead.
        ValueError: the Run cannot become Succeeded from its phase.
    """
    _require(run, Phase.SUCCEEDED)
    valid = validate_outputs(outputs)
    conditions = set_condition(
        run.status.conditions,
        RunConditionType.RUNNING,
        False,
        reason=Reason.SUCCEEDED,
        message="the execution succeeded",
        now=now,
    )
    patch: StatusPatch = {
        "phase": Phase.SUCCEEDED.value,
        "reason": Reason.SUCCEEDED.value,
        "message": None,
        "completionTime": format_time(now),
        "retryAfter": None,
        "conditions": wire_conditions(conditions),
    }
    patch["outputs"] = valid if valid else None
    return patch


def _ended(run: Run, phase: Phase, reason: Reason, message: str, now: datetime) -> StatusPatch:
    _require(run, phase)
    message = bound_message(message)
    conditions = list(run.status.conditions)
    if run.status.phase is not Phase.PENDING:
        conditions = set_condition(
            conditions, RunConditionType.RUNNING, False, reason=reason, message=message, now=now
        )
    if run.spec.is_function:
        conditions = set_condition(
            conditions, RunConditionType.READY, False, reason=reason, message=message, now=now
        )
    return ended_patch(phase, reason, message, conditions, now)


def timed_out_patch(run: Run, *, reason: Reason, message: str, now: datetime) -> StatusPatch:
    """End a Run Timeout (after runtimed cancelled / unregistered it).

    Args:
        run: an active Run.
        reason: ``TimeoutExceeded`` (task), ``LifetimeExceeded`` (function ``spec.timeout``)
            or ``IdleTimeout`` (function idle timeout).
        message: detail.
        now: current time.

    Raises:
        ValueError: ``reason`` is not a timeout reason, or the phase cannot become Timeout.
    """
    if reason not in TIMEOUT_REASONS:
        raise ValueError(f"{reason!r} is not a timeout reason")
    return _ended(run, Phase.TIMEOUT, reason, message, now)


def cancelled_patch(run: Run, *, now: datetime, message: str = "cancel requested") -> StatusPatch:
    """End a Run Cancelled (scheduler before assignment; runtimed after cleanup).

    Raises:
        ValueError: the Run is already terminal.
    """
    return _ended(run, Phase.CANCELLED, Reason.CANCELLED, message, now)


def timeout_deadline(run: Run) -> datetime | None:
    """When ``spec.timeout`` expires: ``startTime + timeout``, or ``None`` if either is unset.

    Never overflows: a deadline past the last representable instant is that instant
    (``datetime.max``, in UTC when ``startTime`` is zone-aware), which no clock reaches.

    Raises:
        DurationError: ``spec.timeout`` is malformed.
    """
    seconds = run.spec.timeout_seconds
    start = run.status.start_time
    if seconds is None or start is None:
        return None
    try:
        return start + timedelta(seconds=seconds)
    except OverflowError:
        return datetime.max if start.tzinfo is None else datetime.max.replace(tzinfo=UTC)
