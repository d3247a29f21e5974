"""The scheduler's decision for one Run: bind, cancel, wait, or stay Pending and say why.

Issue 5, Scheduler; seed 000, Lifecycle State Machine ("cancellation before assignment ends
as Cancelled in the scheduler") and Capacity and Concurrency. Pure: the adapter
(:mod:`krt.controlplane.scheduler_loop`) passes in the Run as cached, the Runtime (or
``None``), the Runtime's Pods and the per-Pod usage, and performs the returned decision as a
conditional status update.

Placement:

1. candidates are the Runtime's Pods in the Run's namespace that are schedulable
   (:attr:`~krt.controlplane.podstate.PodState.schedulable`: Ready, not deleting, heartbeat
   fresh);
2. of those, the Pods where the Run's effective requests fit the Runtime's per-Pod capacity
   minus the usage derived from active Runs (:mod:`krt.controlplane.capacity`);
3. the winner has the most free ``runs`` left, then the most free of every other resource
   (summed), then the smallest Pod name: deterministic, and spreading load.

A Run that cannot be placed stays Pending with ``Scheduled=False`` and reason
``RuntimeNotFound``, ``NoReadyPod`` or ``InsufficientCapacity``. The patch is empty when the
condition already says exactly that, so an unplaceable Run costs no write per retry.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TypeAlias

from krt.api.conditions import find_condition, wire_conditions
from krt.api.constants import ConditionStatus, Reason, RunConditionType
from krt.api.lifecycle import bind_patch_unchecked, ended_patch, run_conditions
from krt.api.patches import StatusPatch
from krt.api.phases import Phase
from krt.api.resources import RUNS, fits, free
from krt.api.retry import retry_wait_seconds
from krt.api.run import Run
from krt.api.runtime import Runtime
from krt.controlplane.podstate import PodState


@dataclass(frozen=True, slots=True)
class Bind:
    """Bind the Run to :attr:`pod` by writing :attr:`patch` conditionally.

    Attributes:
        pod: the chosen Pod.
        patch: status merge patch: phase Scheduled, assignedPod, assignedPodUID, attempt,
            ``Scheduled=True/Assigned``, ``retryAfter`` removed.
        attempt: the attempt this bind starts.
    """

    pod: PodState
    patch: StatusPatch
    attempt: int


@dataclass(frozen=True, slots=True)
class Cancel:
    """``spec.cancelRequested`` on a Pending Run: end it Cancelled with :attr:`patch`."""

    patch: StatusPatch


@dataclass(frozen=True, slots=True)
class Unschedulable:
    """The Run stays Pending.

    Attributes:
        reason: ``RuntimeNotFound``, ``NoReadyPod`` or ``InsufficientCapacity``.
        message: why, for the condition and an Event.
        patch: the status patch recording it; ``{}`` when the Run already says so.
    """

    reason: Reason
    message: str
    patch: StatusPatch


@dataclass(frozen=True, slots=True)
class Backoff:
    """The Run was requeued and its retry backoff has not expired: look again later.

    Attributes:
        delay_seconds: seconds until ``status.retryAfter``.
    """

    delay_seconds: float


@dataclass(frozen=True, slots=True)
class Skip:
    """Nothing for the scheduler to do (not Pending, or being deleted)."""

    why: str


ScheduleDecision: TypeAlias = Bind | Cancel | Unschedulable | Backoff | Skip


def decide_schedule(
    run: Run,
    *,
    runtime: Runtime | None,
    pods: Sequence[PodState],
    usage: Mapping[str, Mapping[str, int]],
    now: datetime,
) -> ScheduleDecision:
    """Decide what to do with one Run.

    Args:
        run: the Run as cached.
        runtime: the Runtime named by ``spec.runtime`` in the Run's namespace, or ``None``.
        pods: Pods labelled for that Runtime in that namespace (others are ignored).
        usage: Pod UID -> resources in use (:func:`krt.controlplane.capacity.usage_by_pod`).
        now: the current wall-clock time (aware).

    Returns:
        One of :class:`Bind`, :class:`Cancel`, :class:`Unschedulable`, :class:`Backoff`,
        :class:`Skip`.

    Raises:
        ResourceError: the Run's requests are malformed (``runs`` 0); the CRD prevents it.
    """
    status = run.status
    if status.phase is not Phase.PENDING:
        return Skip(f"phase is {status.phase.value}")
    if run.metadata.is_deleting:
        return Skip("the Run is being deleted")
    if run.spec.cancel_requested:
        return Cancel(cancel_patch(run, now=now))
    wait = retry_wait_seconds(status, now=now)
    if wait > 0:
        return Backoff(wait)
    if runtime is None:
        return _unschedulable(
            run,
            Reason.RUNTIME_NOT_FOUND,
            f'Runtime "{run.spec.runtime}" does not exist in namespace "{run.metadata.namespace}"',
            now,
        )
    candidates = [
        pod
        for pod in pods
        if pod.schedulable
        and pod.runtime == run.spec.runtime
        and pod.namespace == run.metadata.namespace
    ]
    if not candidates:
        return _unschedulable(
            run,
            Reason.NO_READY_POD,
            f'Runtime "{run.spec.runtime}" has no ready Pod with a fresh runtimed heartbeat',
            now,
        )
    requests = run.spec.effective_requests
    capacity = runtime.spec.effective_capacity
    fitting = [pod for pod in candidates if fits(requests, usage.get(pod.uid, {}), capacity)]
    if not fitting:
        wanted = ", ".join(f"{name}={quantity}" for name, quantity in sorted(requests.items()))
        return _unschedulable(
            run,
            Reason.INSUFFICIENT_CAPACITY,
            f'no ready Pod of Runtime "{run.spec.runtime}" has free capacity for {wanted} '
            f"({len(candidates)} ready, per-Pod capacity "
            + ", ".join(f"{name}={quantity}" for name, quantity in sorted(capacity.items()))
            + ")",
            now,
        )

    def rank(pod: PodState) -> tuple[int, int, str]:
        left = free(capacity, usage.get(pod.uid, {}))
        others = sum(quantity for name, quantity in left.items() if name != RUNS)
        return (-left.get(RUNS, 0), -others, pod.name)

    chosen = min(fitting, key=rank)
    return bind_decision(run, chosen, now=now)


def bind_decision(run: Run, pod: PodState, *, now: datetime) -> Bind:
    """The :class:`Bind` of ``run`` (Pending) to ``pod``: :func:`krt.api.lifecycle.bind_patch`.

    ``attempt`` is 1 on the first bind and kept on a re-bind (the reaper's retry engine
    already advanced it when it requeued the Run); a function Run gets ``Ready=False/
    Registering``.
    """
    # decide_schedule checked the phase; a Pod from the cache has a name and UID
    patch = bind_patch_unchecked(run, pod.name, pod.uid, now)
    return Bind(pod=pod, patch=patch, attempt=patch["attempt"])


def cancel_patch(run: Run, *, now: datetime) -> StatusPatch:
    """The patch ending a Pending Run Cancelled (seed 000: cancellation before assignment).

    Sets phase Cancelled, reason Cancelled, ``completionTime``, ``Scheduled=False/Cancelled``
    and, for a function Run, ``Ready=False/Cancelled``; removes ``retryAfter``.
    """
    message = "cancelled before it was scheduled (spec.cancelRequested)"
    conditions = run_conditions(
        run, RunConditionType.SCHEDULED, False, reason=Reason.CANCELLED, message=message, now=now
    )
    return ended_patch(Phase.CANCELLED, Reason.CANCELLED, message, conditions, now)


def _unschedulable(run: Run, reason: Reason, message: str, now: datetime) -> Unschedulable:
    current = find_condition(run.status.conditions, RunConditionType.SCHEDULED)
    if (
        current is not None
        and current.status is ConditionStatus.FALSE
        and current.reason == reason.value
        and current.message == message
        and run.status.message == message
    ):
        return Unschedulable(reason, message, {})
    conditions = run_conditions(
        run,
        RunConditionType.SCHEDULED,
        False,
        reason=reason,
        message=message,
        now=now,
        ready_reason=Reason.NOT_SCHEDULED,
    )
    patch: StatusPatch = {
        "phase": Phase.PENDING.value,
        "message": message,
        "conditions": wire_conditions(conditions),
    }
    return Unschedulable(reason, message, patch)
