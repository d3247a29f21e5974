"""The scheduler's pure decision (issue 5, Scheduler; seed 000 capacity and cancellation)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from krt.api.conditions import find_condition
from krt.api.constants import ConditionStatus, Reason, RunConditionType
from krt.api.patches import apply_merge_patch
from krt.api.phases import Phase
from krt.api.retry import Failure, FailureReason, Reentry, Retry, decide
from krt.api.run import Run
from krt.controlplane.capacity import AssumedBinds, usage_by_pod
from krt.controlplane.scheduling import (
    Backoff,
    Bind,
    Cancel,
    Skip,
    Unschedulable,
    decide_schedule,
)

from .builders import NOW, make_run, make_runtime, pod, run_dict


def _apply(run: Run, patch: dict[str, object]) -> Run:
    data = run_dict(run.metadata.name)
    data["status"] = apply_merge_patch(run.status.to_dict(), patch)
    data["spec"] = run.spec.to_dict()
    return Run.from_dict(data)


def test_binds_first_attempt_with_all_fields() -> None:
    run = make_run()
    decision = decide_schedule(run, runtime=make_runtime(), pods=[pod("p-a")], usage={}, now=NOW)
    assert isinstance(decision, Bind)
    assert decision.pod.name == "p-a"
    assert decision.attempt == 1
    patch = decision.patch
    assert patch["phase"] == "Scheduled"
    assert patch["assignedPod"] == "p-a"
    assert patch["assignedPodUID"] == "uid-p-a"
    assert patch["attempt"] == 1
    assert "retryAfter" in patch
    assert patch["retryAfter"] is None
    bound = _apply(run, patch)
    scheduled = find_condition(bound.status.conditions, RunConditionType.SCHEDULED)
    assert scheduled is not None
    assert scheduled.status is ConditionStatus.TRUE
    assert scheduled.reason == Reason.ASSIGNED


def test_rebind_keeps_attempt_bumped_by_retry_engine() -> None:
    run = make_run(phase=Phase.PENDING, attempt=2)
    decision = decide_schedule(run, runtime=make_runtime(), pods=[pod("p-a")], usage={}, now=NOW)
    assert isinstance(decision, Bind)
    assert decision.patch["attempt"] == 2


@pytest.mark.parametrize(
    "phase", [p for p in Phase if p is not Phase.PENDING], ids=lambda p: p.value
)
def test_only_pending_runs_are_scheduled(phase: Phase) -> None:
    run = make_run(phase=phase, pod="p-a", attempt=1)
    decision = decide_schedule(run, runtime=make_runtime(), pods=[pod("p-b")], usage={}, now=NOW)
    assert isinstance(decision, Skip)


def test_deleting_pending_run_is_skipped() -> None:
    run = make_run(deleting=True, finalizers=("x/y",))
    assert isinstance(
        decide_schedule(run, runtime=make_runtime(), pods=[pod("p-a")], usage={}, now=NOW), Skip
    )


@pytest.mark.parametrize("function", [False, True])
def test_cancel_before_assignment_ends_cancelled(function: bool) -> None:
    run = make_run(cancel=True, function=function)
    decision = decide_schedule(run, runtime=make_runtime(), pods=[pod("p-a")], usage={}, now=NOW)
    assert isinstance(decision, Cancel)
    done = _apply(run, decision.patch)
    assert done.status.phase is Phase.CANCELLED
    assert done.status.completion_time == NOW
    assert done.status.assigned_pod is None
    ready = find_condition(done.status.conditions, RunConditionType.READY)
    if function:
        assert ready is not None
        assert ready.reason == Reason.CANCELLED
    else:
        assert ready is None


def test_cancel_wins_over_missing_runtime() -> None:
    run = make_run(cancel=True)
    assert isinstance(decide_schedule(run, runtime=None, pods=[], usage={}, now=NOW), Cancel)


def test_requeued_run_waits_for_retry_after() -> None:
    run = make_run(phase=Phase.PENDING, attempt=2, retry_after=NOW + timedelta(seconds=3))
    decision = decide_schedule(run, runtime=make_runtime(), pods=[pod("p-a")], usage={}, now=NOW)
    assert decision == Backoff(3.0)
    later = decide_schedule(
        run, runtime=make_runtime(), pods=[pod("p-a")], usage={}, now=NOW + timedelta(seconds=3)
    )
    assert isinstance(later, Bind)


def test_runtime_not_found() -> None:
    decision = decide_schedule(make_run(), runtime=None, pods=[pod("p-a")], usage={}, now=NOW)
    assert isinstance(decision, Unschedulable)
    assert decision.reason is Reason.RUNTIME_NOT_FOUND
    assert '"python"' in decision.message
    assert '"demo"' in decision.message
    assert decision.patch["phase"] == "Pending"


@pytest.mark.parametrize(
    "bad",
    [
        pod("p-a", ready=False),
        pod("p-a", deleting=True),
        pod("p-a", fresh=False),
        pod("p-a", runtime="bash"),
        pod("p-a", namespace="other"),
    ],
    ids=["not-ready", "deleting", "stale-heartbeat", "other-runtime", "other-namespace"],
)
def test_no_ready_pod(bad: object) -> None:
    decision = decide_schedule(make_run(), runtime=make_runtime(), pods=[bad], usage={}, now=NOW)  # type: ignore[list-item]
    assert isinstance(decision, Unschedulable)
    assert decision.reason is Reason.NO_READY_POD


def test_insufficient_capacity_names_request_and_capacity() -> None:
    decision = decide_schedule(
        make_run(),
        runtime=make_runtime(runs=2),
        pods=[pod("p-a")],
        usage={"uid-p-a": {"runs": 2}},
        now=NOW,
    )
    assert isinstance(decision, Unschedulable)
    assert decision.reason is Reason.INSUFFICIENT_CAPACITY
    assert "runs=1" in decision.message
    assert "runs=2" in decision.message


def test_other_resource_must_fit_too() -> None:
    run = make_run(requests={"runs": 1, "gpu": 1})
    no_gpu = decide_schedule(run, runtime=make_runtime(), pods=[pod("p-a")], usage={}, now=NOW)
    assert isinstance(no_gpu, Unschedulable)
    assert no_gpu.reason is Reason.INSUFFICIENT_CAPACITY
    with_gpu = decide_schedule(
        run, runtime=make_runtime(extra={"gpu": 1}), pods=[pod("p-a")], usage={}, now=NOW
    )
    assert isinstance(with_gpu, Bind)


def test_unchanged_unschedulable_condition_writes_nothing() -> None:
    run = make_run()
    first = decide_schedule(run, runtime=None, pods=[], usage={}, now=NOW)
    assert isinstance(first, Unschedulable)
    assert first.patch
    stored = _apply(run, first.patch)
    again = decide_schedule(stored, runtime=None, pods=[], usage={}, now=NOW + timedelta(seconds=5))
    assert isinstance(again, Unschedulable)
    assert again.patch == {}
    other = decide_schedule(stored, runtime=make_runtime(), pods=[], usage={}, now=NOW)
    assert isinstance(other, Unschedulable)
    assert other.reason is Reason.NO_READY_POD
    assert other.patch != {}


def test_function_run_unschedulable_sets_ready_false_not_scheduled() -> None:
    run = make_run(function=True)
    decision = decide_schedule(run, runtime=None, pods=[], usage={}, now=NOW)
    assert isinstance(decision, Unschedulable)
    ready = find_condition(_apply(run, decision.patch).status.conditions, RunConditionType.READY)
    assert ready is not None
    assert ready.status is ConditionStatus.FALSE
    assert ready.reason == Reason.NOT_SCHEDULED


def test_function_run_bound_at_once_is_ready_false_registering() -> None:
    """F15: seed 000, Ready is False with a specific reason during registration."""
    run = make_run(function=True)
    decision = decide_schedule(run, runtime=make_runtime(), pods=[pod("p-a")], usage={}, now=NOW)
    assert isinstance(decision, Bind)
    bound = _apply(run, decision.patch)
    ready = find_condition(bound.status.conditions, RunConditionType.READY)
    assert ready is not None
    assert (ready.status, ready.reason) == (ConditionStatus.FALSE, Reason.REGISTERING)
    assert bound.status.message == "bound to Pod p-a (attempt 1)"


def test_function_run_pending_first_loses_the_stale_not_scheduled() -> None:
    """F15: a Run that waited Pending must not say NotScheduled once it is bound."""
    run = make_run(function=True)
    waiting = decide_schedule(run, runtime=make_runtime(), pods=[], usage={}, now=NOW)
    assert isinstance(waiting, Unschedulable)
    run = _apply(run, waiting.patch)
    decision = decide_schedule(run, runtime=make_runtime(), pods=[pod("p-a")], usage={}, now=NOW)
    assert isinstance(decision, Bind)
    bound = _apply(run, decision.patch)
    ready = find_condition(bound.status.conditions, RunConditionType.READY)
    assert ready is not None
    assert (ready.status, ready.reason) == (ConditionStatus.FALSE, Reason.REGISTERING)
    assert ready.message == "bound to Pod p-a (attempt 1)"
    assert [c.type for c in bound.status.conditions] == ["Scheduled", "Ready"]


def test_task_run_bind_adds_no_ready_condition() -> None:
    run = make_run()
    decision = decide_schedule(run, runtime=make_runtime(), pods=[pod("p-a")], usage={}, now=NOW)
    assert isinstance(decision, Bind)
    assert [c["type"] for c in decision.patch["conditions"]] == ["Scheduled"]
    assert "reason" not in decision.patch  # a first bind leaves status.reason alone


def test_rebind_of_a_requeued_retry_clears_the_failure_reason() -> None:
    """F2: once the next attempt is placed, reason/message describe it, naming the failure."""
    run = make_run(phase=Phase.RUNNING, pod="p-old", attempt=1, max_attempts=3)
    retry = decide(
        run,
        Failure(FailureReason.POD_LOST, "Pod p-old was deleted"),
        now=NOW,
        reentry=Reentry.REQUEUE,
    )
    assert isinstance(retry, Retry)
    requeued = _apply(run, retry.patch)
    assert requeued.status.reason == "PodLost"
    decision = decide_schedule(
        requeued, runtime=make_runtime(), pods=[pod("p-a")], usage={}, now=NOW
    )
    assert isinstance(decision, Bind)
    bound = _apply(requeued, decision.patch)
    assert bound.status.reason is None
    assert bound.status.message == (
        "bound to Pod p-a (attempt 2; attempt 1 failed: PodLost: Pod p-old was deleted)"
    )


def test_tie_break_most_free_then_name() -> None:
    runtime = make_runtime(runs=4)
    pods = [pod("p-c"), pod("p-b"), pod("p-a")]
    usage = {"uid-p-a": {"runs": 1}, "uid-p-b": {"runs": 0}, "uid-p-c": {"runs": 0}}
    decision = decide_schedule(make_run(), runtime=runtime, pods=pods, usage=usage, now=NOW)
    assert isinstance(decision, Bind)
    assert decision.pod.name == "p-b"
    # order of the candidate list does not matter
    decision2 = decide_schedule(
        make_run(), runtime=runtime, pods=list(reversed(pods)), usage=usage, now=NOW
    )
    assert isinstance(decision2, Bind)
    assert decision2.pod.name == "p-b"


def test_skips_full_pod_and_picks_other() -> None:
    runtime = make_runtime(runs=2)
    usage = {"uid-p-a": {"runs": 2}, "uid-p-b": {"runs": 1}}
    decision = decide_schedule(
        make_run(), runtime=runtime, pods=[pod("p-a"), pod("p-b")], usage=usage, now=NOW
    )
    assert isinstance(decision, Bind)
    assert decision.pod.name == "p-b"


def test_assumed_binds_prevent_overfill_in_a_burst() -> None:
    """Binding a burst from one stale cache never exceeds capacity (the assumed cache)."""
    runtime = make_runtime(runs=3)
    pods = [pod("p-a"), pod("p-b")]
    runs = [make_run(f"r{i}") for i in range(10)]
    assumed = AssumedBinds()
    placed: dict[str, int] = {}
    for run in runs:  # the cache never changes: every Run still looks Pending
        usage = usage_by_pod(runs, assumed)
        decision = decide_schedule(run, runtime=runtime, pods=pods, usage=usage, now=NOW)
        if isinstance(decision, Bind):
            assumed.assume(run, decision.pod.uid)
            placed[decision.pod.name] = placed.get(decision.pod.name, 0) + 1
        else:
            assert isinstance(decision, Unschedulable)
            assert decision.reason is Reason.INSUFFICIENT_CAPACITY
    assert placed == {"p-a": 3, "p-b": 3}
