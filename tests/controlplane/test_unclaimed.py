"""The reaper's decision for a Run its hung runtimed never claimed (:mod:`krt.controlplane.unclaimed`).

F23: a Run bound to a live Pod whose runtimed heartbeat is stale, and that no runtimed has
claimed (phase Scheduled), goes back to Pending without consuming an attempt; every other
Run on such a Pod is left to fencing as before (seed 000: a stale heartbeat alone is no fence).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from krt.api.conditions import find_condition, set_condition, wire_conditions
from krt.api.constants import REGISTRATION_CLEANUP_FINALIZER, Reason, RunConditionType
from krt.api.patches import apply_merge_patch
from krt.api.phases import Phase
from krt.api.retry import Retry
from krt.api.run import Run
from krt.api.times import format_time
from krt.controlplane.fencing import Fence, Healthy, NotFenced, Recover, decide_reap
from krt.controlplane.unclaimed import (
    Unassign,
    never_claimed,
    seconds_since_bind,
    unassign_patch,
)

from .builders import NOW, pod, run_dict

BOUND_AT = NOW - timedelta(seconds=45)


def bound_run(
    *, phase: Phase = Phase.SCHEDULED, status: dict[str, Any] | None = None, **kwargs: Any
) -> Run:
    """A Run bound to ``p-a`` 45 s before NOW (``Scheduled=True/Assigned`` at BOUND_AT)."""
    data = run_dict(phase=phase, pod="p-a", attempt=kwargs.pop("attempt", 1), **kwargs)
    conditions = set_condition(
        [],
        RunConditionType.SCHEDULED,
        True,
        reason=Reason.ASSIGNED,
        message="bound to Pod p-a",
        now=BOUND_AT,
    )
    data["status"]["conditions"] = wire_conditions(conditions)
    data["status"].update(status or {})
    return Run.from_dict(data)


HUNG = pod("p-a", fresh=False)


def applied(run: Run, decision: Unassign) -> Run:
    status = apply_merge_patch(run.status.to_dict(), decision.patch)
    return Run.from_dict({**run_dict(function=run.spec.is_function), "status": status})


@pytest.mark.parametrize("max_attempts", [None, 1, 3])
def test_unclaimed_task_on_a_hung_pod_returns_to_pending_with_its_attempt(
    max_attempts: int | None,
) -> None:
    run = bound_run(max_attempts=max_attempts)
    decision = decide_reap(run, pod=HUNG, pod_in_endpoints=True, now=NOW)
    assert isinstance(decision, Unassign)
    assert decision.message == (
        "runtimed on Pod p-a did not claim it within 45s; heartbeat stale; "
        "placing attempt 1 again on another Pod"
    )
    after = applied(run, decision)
    assert after.status.phase is Phase.PENDING
    assert after.status.assigned_pod is None
    assert after.status.assigned_pod_uid is None
    assert after.status.attempt == 1  # not a failed attempt: maxAttempts 1 is not Failed
    assert after.status.reason is None
    assert after.status.start_time is None
    scheduled = find_condition(after.status.conditions, RunConditionType.SCHEDULED)
    assert scheduled is not None
    assert (scheduled.status, scheduled.reason) == ("False", Reason.REQUEUED)
    assert scheduled.message == decision.message
    assert find_condition(after.status.conditions, RunConditionType.READY) is None


def test_unclaimed_function_run_is_unassigned_and_not_ready() -> None:
    run = bound_run(function=True)
    decision = decide_reap(run, pod=HUNG, pod_in_endpoints=True, now=NOW)
    assert isinstance(decision, Unassign)
    ready = find_condition(applied(run, decision).status.conditions, RunConditionType.READY)
    assert ready is not None
    assert (ready.status, ready.reason) == ("False", Reason.NOT_SCHEDULED)


def test_requeued_attempt_keeps_its_attempt_reason_and_start_time() -> None:
    """A Run requeued after PodLost has startTime from attempt 1; it is still unclaimed here."""
    started = format_time(NOW - timedelta(minutes=5))
    run = bound_run(
        attempt=2,
        max_attempts=2,
        status={"startTime": started, "reason": "PodLost", "message": "earlier pod lost"},
    )
    decision = decide_reap(run, pod=HUNG, pod_in_endpoints=False, now=NOW)
    assert isinstance(decision, Unassign)
    assert "placing attempt 2 again" in decision.message
    status = apply_merge_patch(run.status.to_dict(), decision.patch)
    assert status["attempt"] == 2
    assert status["startTime"] == started
    assert (status["reason"], status["message"]) == ("PodLost", "earlier pod lost")


@pytest.mark.parametrize("phase", [Phase.RUNNING, Phase.READY])
def test_a_claimed_run_on_a_hung_pod_is_not_moved(phase: Phase) -> None:
    run = bound_run(phase=phase, function=phase is Phase.READY, max_attempts=3)
    decision = decide_reap(run, pod=HUNG, pod_in_endpoints=True, now=NOW)
    assert isinstance(decision, NotFenced)
    assert not never_claimed(run)


def test_unclaimed_run_on_a_live_heartbeating_pod_is_healthy() -> None:
    assert isinstance(
        decide_reap(bound_run(), pod=pod("p-a"), pod_in_endpoints=True, now=NOW), Healthy
    )


def test_unclaimed_run_holding_the_finalizer_waits_for_fencing() -> None:
    run = bound_run(function=True, finalizers=(REGISTRATION_CLEANUP_FINALIZER,))
    assert isinstance(decide_reap(run, pod=HUNG, pod_in_endpoints=True, now=NOW), NotFenced)


def test_deleting_unclaimed_run_is_not_unassigned() -> None:
    run = bound_run(deleting=True)
    assert not never_claimed(run)
    assert not isinstance(decide_reap(run, pod=HUNG, pod_in_endpoints=True, now=NOW), Unassign)


@pytest.mark.parametrize(
    ("deleting", "exists"), [(True, True), (False, False)], ids=["pod-deleting", "pod-gone"]
)
def test_a_lost_pod_still_recovers_through_fencing(deleting: bool, exists: bool) -> None:
    """Only the live-but-hung Pod is new; a deleting or gone Pod keeps the PodLost path."""
    run = bound_run(max_attempts=2)
    lost = pod("p-a", fresh=False, deleting=deleting) if exists else None
    decision = decide_reap(run, pod=lost, pod_in_endpoints=False, now=NOW)
    assert isinstance(decision, Recover)
    assert decision.fence in (Fence.POD_GONE, Fence.DELETING_OUT_OF_ENDPOINTS)
    assert isinstance(decision.decision, Retry)


def test_message_without_a_bind_time_omits_the_wait() -> None:
    run = Run.from_dict(run_dict(phase=Phase.SCHEDULED, pod="p-a", attempt=1))
    assert seconds_since_bind(run, now=NOW) is None
    decision = decide_reap(run, pod=HUNG, pod_in_endpoints=True, now=NOW)
    assert isinstance(decision, Unassign)
    assert decision.message.startswith("runtimed on Pod p-a did not claim it; heartbeat stale")


@pytest.mark.parametrize("phase", [Phase.PENDING, Phase.RUNNING, Phase.SUCCEEDED])
def test_unassign_patch_refuses_a_run_that_is_not_unclaimed(phase: Phase) -> None:
    run = Run.from_dict(
        run_dict(phase=phase, pod=None if phase is Phase.PENDING else "p-a", attempt=1)
    )
    with pytest.raises(ValueError, match=f"is {phase.value}: only a Scheduled Run"):
        unassign_patch(run, message="m", now=NOW)
