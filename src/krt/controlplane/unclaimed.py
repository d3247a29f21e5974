"""Unassigning a Run its hung runtimed never claimed (a pure decision and its status patch).

A Run the scheduler bound to a Pod stays ``Scheduled`` until that Pod's runtimed claims it
(seed 003, Lifecycle step 1; seed 000: ``startTime`` is set on claim). If that runtimed hangs
(the process lives but does nothing: stopped, wedged), the Run would wait for it forever
while other Pods have room, because "a stale heartbeat alone is not proof that an old
function has stopped" (seed 000, Ownership Epoch and Fencing) keeps the reaper's Pod-loss
recovery away from a live Pod.

That rule guards an assignment that may have *started* something. A ``Scheduled`` Run has
started nothing on its Pod: runtimed's first step for both modes is the claim, a status
update conditional on the Run's resourceVersion (Scheduled -> Running, ``startTime``);
source preparation, Execute, the registration-cleanup finalizer and RegisterFunction all
come after it (``runtimed.task_decisions``, ``runtimed.functions.decisions``), and the
gateway routes only to a ``Ready`` Run. Writing the unassignment changes the resourceVersion,
so a late claim by the old runtimed gets 409 and drops the Run; if its claim wins the race,
the reaper's own conditional write gets 409 and it re-reads a Running Run. Exactly one of the
two writes succeeds, and no fence beyond that conditional write is needed. This holds for
task and function Runs alike, as long as the Run does not hold the registration-cleanup
finalizer (it never does before a claim; one left over from an earlier attempt keeps the
Run on the ordinary fenced path).

The unassignment is not a failed attempt: ``status.attempt``, ``reason`` and ``message`` are
left as they are (a requeued attempt 2 stays attempt 2), the Run goes back to Pending with
``Scheduled=False/Requeued`` saying why, and the scheduler places it again on a Pod whose
runtimed heartbeats (never this one while its heartbeat is stale).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from krt.api.conditions import bound_message, find_condition, wire_conditions
from krt.api.constants import (
    REGISTRATION_CLEANUP_FINALIZER,
    ConditionStatus,
    Reason,
    RunConditionType,
)
from krt.api.lifecycle import run_conditions
from krt.api.patches import StatusPatch
from krt.api.phases import Phase
from krt.api.run import Run

#: Event reason of an unassignment (a Warning Event on the Run).
NOT_CLAIMED_EVENT_REASON = "NotClaimed"


@dataclass(frozen=True, slots=True)
class Unassign:
    """The Run was never claimed and its Pod's runtimed heartbeat is stale: place it again.

    Attributes:
        patch: the status merge patch (phase Pending, assignment removed, attempt unchanged,
            ``Scheduled=False/Requeued``; function Runs also ``Ready=False/NotScheduled``).
        message: why, for the condition, the ``NotClaimed`` Event and logs.
    """

    patch: StatusPatch
    message: str


def never_claimed(run: Run) -> bool:
    """True when no runtimed has claimed the Run's current assignment (seed 003 claim).

    That is phase ``Scheduled`` (a claim moves it to Running), not being deleted, and not
    holding the registration-cleanup finalizer (runtimed adds it only after claiming).
    ``startTime`` may be set by an earlier attempt on another Pod (it is never cleared); it
    says nothing about this assignment.
    """
    return (
        run.status.phase is Phase.SCHEDULED
        and bool(run.status.assigned_pod_uid)
        and not run.metadata.is_deleting
        and REGISTRATION_CLEANUP_FINALIZER not in run.metadata.finalizers
    )


def seconds_since_bind(run: Run, *, now: datetime) -> float | None:
    """Seconds since the scheduler bound the Run (``Scheduled=True``), or ``None`` if unknown."""
    scheduled = find_condition(run.status.conditions, RunConditionType.SCHEDULED)
    if scheduled is None or scheduled.status is not ConditionStatus.TRUE:
        return None
    return max(0.0, (now - scheduled.last_transition_time).total_seconds())


def unclaimed_message(run: Run, *, now: datetime) -> str:
    """``runtimed on Pod P did not claim it within N s; heartbeat stale; ...``."""
    pod = run.status.assigned_pod or "?"
    waited = seconds_since_bind(run, now=now)
    within = f" within {waited:.0f}s" if waited is not None else ""
    return bound_message(
        f"runtimed on Pod {pod} did not claim it{within}; heartbeat stale; "
        f"placing attempt {max(1, run.status.attempt)} again on another Pod"
    )


def unassign_patch(run: Run, *, message: str, now: datetime) -> StatusPatch:
    """The status merge patch that returns a never-claimed Run to Pending.

    Removes ``assignedPod`` and ``assignedPodUID`` and sets ``Scheduled=False/Requeued``
    with ``message`` (function Runs: ``Ready=False/NotScheduled``). ``attempt``, ``reason``,
    ``message``, ``startTime`` and ``retryAfter`` are not touched: no attempt was consumed.

    Args:
        run: the Run as read (:func:`never_claimed` must hold).
        message: why (see :func:`unclaimed_message`).
        now: the current wall-clock time (aware).

    Returns:
        The patch, for a write conditional on the resourceVersion ``run`` was read at.

    Raises:
        ValueError: the Run is not a never-claimed assigned Run.
    """
    if not never_claimed(run):
        raise ValueError(
            f"Run {run.key} is {run.status.phase.value}"
            f"{', deleting' if run.metadata.is_deleting else ''}: only a Scheduled Run no "
            "runtimed has claimed can be unassigned"
        )
    conditions = run_conditions(
        run,
        RunConditionType.SCHEDULED,
        False,
        reason=Reason.REQUEUED,
        message=message,
        now=now,
        ready_reason=Reason.NOT_SCHEDULED,
    )
    return {
        "phase": Phase.PENDING.value,
        "assignedPod": None,
        "assignedPodUID": None,
        "conditions": wire_conditions(conditions),
    }


def decide_unclaimed(run: Run, *, now: datetime) -> Unassign | None:
    """:class:`Unassign` for a never-claimed Run on a live Pod whose heartbeat is stale.

    The caller (:func:`krt.controlplane.fencing.decide_reap`) has established that the Pod
    with the exact ``assignedPodUID`` exists, is not deleting, and that its runtimed heartbeat
    Lease is stale; this adds the condition that the Run was never claimed.

    Args:
        run: the Run as cached.
        now: the current wall-clock time (aware).

    Returns:
        The decision, or ``None`` when the Run may have been claimed (leave it to fencing).
    """
    if not never_claimed(run):
        return None
    message = unclaimed_message(run, now=now)
    return Unassign(patch=unassign_patch(run, message=message, now=now), message=message)
