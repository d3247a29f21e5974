"""The stale-Run reaper's decision: is the old assignment fenced, and what happens next.

Seed 000, Ownership Epoch and Fencing: "Pod readiness or a stale heartbeat alone is not
proof that an old function has stopped." Recovery first confirms a fence, then applies the
shared retry engine (:func:`krt.api.retry.decide` with ``Reentry.REQUEUE``: assignment
cleared, Pending with ``attempt + 1`` and reason ``PodLost``, or Failed when attempts are
exhausted). The fences the control plane can observe (the third one of the seed, an
acknowledged unregister, is runtimed's to act on):

* :attr:`Fence.POD_GONE`: no Pod with the exact ``assignedPodUID`` exists (gone, or its name
  now belongs to a new Pod);
* :attr:`Fence.DELETING_OUT_OF_ENDPOINTS`: the Pod is deleting and the Runtime Service's
  EndpointSlices no longer route to it;
* :attr:`Fence.DELETING_HEARTBEAT_STALE`: the Pod is deleting and runtimed's heartbeat Lease
  has expired (issue 5: "heartbeat stale beyond a bound and Pod gone or deleting").

The ``kruntimes.io/registration-cleanup`` finalizer (seed 000, Cleanup and Finalization) is
removed here only under :attr:`Fence.POD_GONE`: only then can no Pod-local registration
still serve. A Run that holds the finalizer is therefore recovered only under
:attr:`Fence.POD_GONE` (at most the Pod's termination grace period later than a Run
without it): requeueing it earlier would clear the assignment while the finalizer still
stands, and nothing would be left to tell, once the old Pod is gone, that the finalizer may
go (a Run deleted before its re-bind would hang). Runs without the finalizer (tasks) are
recovered on any fence. A live Pod with a stale heartbeat is left alone (it may be
restarting runtimed); it is not schedulable, and once it is deleted the rules above apply.
The one exception: a Run on it that no runtimed has claimed yet (phase Scheduled) is
unassigned without a fence and without consuming an attempt (:class:`Unassign`; why that is
safe: :mod:`krt.controlplane.unclaimed`).

Pure: the adapter (:mod:`krt.controlplane.reaper_loop`) supplies the cached Pod and the
endpoint set, and performs the decision with conditional writes (status first, then the
finalizer).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import TypeAlias

from krt.api.constants import REGISTRATION_CLEANUP_FINALIZER
from krt.api.phases import is_terminal, needs_stale_recovery_check
from krt.api.retry import Failure, FailureReason, Reentry, Retry, Stale, Terminal, decide
from krt.api.run import Run
from krt.controlplane.podstate import PodState
from krt.controlplane.unclaimed import Unassign, decide_unclaimed


class Fence(StrEnum):
    """Which fence proved the old assignment can no longer serve."""

    POD_GONE = "PodGone"
    DELETING_OUT_OF_ENDPOINTS = "PodDeletingOutOfEndpoints"
    DELETING_HEARTBEAT_STALE = "PodDeletingHeartbeatStale"


@dataclass(frozen=True, slots=True)
class Healthy:
    """The assignment is intact (or the Run has none to check): nothing to do."""

    why: str


@dataclass(frozen=True, slots=True)
class NotFenced:
    """The Pod looks lost but no fence holds yet: check again when Pods or endpoints change.

    Attributes:
        why: what is suspicious and which fence is missing.
    """

    why: str


@dataclass(frozen=True, slots=True)
class Recover:
    """The old assignment is fenced.

    Attributes:
        fence: the fence that holds.
        decision: the retry engine's :class:`~krt.api.retry.Retry` (requeue) or
            :class:`~krt.api.retry.Terminal` (Failed) patch to write, or ``None`` when the
            Run is already terminal or being deleted (only the finalizer may change).
        remove_finalizer: remove ``kruntimes.io/registration-cleanup`` after the status write.
        message: what happened, for logs and the ``PodLost`` Event.
    """

    fence: Fence
    decision: Retry | Terminal | None
    remove_finalizer: bool
    message: str


ReapDecision: TypeAlias = Healthy | NotFenced | Recover | Unassign


def in_scope(run: Run) -> bool:
    """True when the reaper must watch this Run's assignment.

    An assigned Run in an active phase (Ready included), or any assigned Run still holding
    the registration-cleanup finalizer (a terminal or deleting Run whose Pod may vanish
    before runtimed removes it).
    """
    if not run.status.assigned_pod_uid:
        return False
    return (
        needs_stale_recovery_check(run.status.phase)
        or REGISTRATION_CLEANUP_FINALIZER in run.metadata.finalizers
    )


def decide_reap(
    run: Run,
    *,
    pod: PodState | None,
    pod_in_endpoints: bool,
    now: datetime,
) -> ReapDecision:
    """Decide whether ``run``'s assignment is lost and fenced, and how to recover.

    Args:
        run: the Run as cached.
        pod: the cached Pod named ``status.assignedPod`` in the Run's namespace, whatever its
            UID, or ``None`` when there is none.
        pod_in_endpoints: the Runtime Service's EndpointSlices still route to the assigned
            Pod UID (ready and not terminating).
        now: the current wall-clock time (aware).

    Returns:
        :class:`Healthy`, :class:`NotFenced`, :class:`Recover` or :class:`Unassign` (a
        never-claimed Run on a live Pod whose heartbeat is stale).

    Raises:
        DurationError: ``spec.retryPolicy.backoff`` is malformed (the CRD prevents it).
    """
    if not in_scope(run):
        return Healthy("no assignment to check")
    assigned_uid = run.status.assigned_pod_uid
    assigned_name = run.status.assigned_pod or "?"
    exact = pod if pod is not None and pod.uid == assigned_uid else None
    if exact is None:
        fence = Fence.POD_GONE
        if pod is None:
            message = f"assigned Pod {assigned_name} (uid {assigned_uid}) no longer exists"
        else:
            message = (
                f"assigned Pod {assigned_name} was replaced (uid {assigned_uid} is gone, "
                f"the name now has uid {pod.uid})"
            )
    elif exact.deleting and not pod_in_endpoints:
        fence = Fence.DELETING_OUT_OF_ENDPOINTS
        message = f"assigned Pod {assigned_name} is deleting and out of the Service endpoints"
    elif exact.deleting and not exact.heartbeat_fresh:
        fence = Fence.DELETING_HEARTBEAT_STALE
        message = f"assigned Pod {assigned_name} is deleting and its runtimed heartbeat expired"
    elif exact.deleting:
        return NotFenced(
            f"assigned Pod {assigned_name} is deleting but still in the Service endpoints "
            "with a fresh heartbeat"
        )
    elif not exact.heartbeat_fresh:
        unassign = decide_unclaimed(run, now=now)
        if unassign is not None:
            return unassign
        return NotFenced(
            f"assigned Pod {assigned_name} has a stale runtimed heartbeat but is not deleting"
        )
    else:
        return Healthy(f"assigned Pod {assigned_name} is alive")

    holds_finalizer = REGISTRATION_CLEANUP_FINALIZER in run.metadata.finalizers
    if holds_finalizer and fence is not Fence.POD_GONE:
        return NotFenced(
            f"{message}; the Run holds the registration-cleanup finalizer, so recovery waits "
            "for the Pod UID to be gone"
        )
    if is_terminal(run.status.phase) or run.metadata.is_deleting:
        if not holds_finalizer:
            return NotFenced(f"{message}; nothing to recover")
        return Recover(fence, None, True, message)
    decision = decide(
        run,
        Failure(FailureReason.POD_LOST, message, attempt=max(1, run.status.attempt)),
        now=now,
        reentry=Reentry.REQUEUE,
    )
    if isinstance(decision, Stale):  # pragma: no cover - excluded by the checks above
        return Healthy(decision.detail)
    return Recover(fence, decision, holds_finalizer, message)
