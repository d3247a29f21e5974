"""The stale-Run reaper's decision (issue 5 item 4; seed 000 Ownership Epoch and Fencing)."""

from __future__ import annotations

import pytest

from krt.api.conditions import find_condition
from krt.api.constants import REGISTRATION_CLEANUP_FINALIZER, Reason, RunConditionType
from krt.api.patches import apply_merge_patch
from krt.api.phases import Phase
from krt.api.retry import Retry, Terminal
from krt.api.run import Run
from krt.controlplane.fencing import Fence, Healthy, NotFenced, Recover, decide_reap, in_scope

from .builders import NOW, make_run, pod, run_dict

FIN = (REGISTRATION_CLEANUP_FINALIZER,)


def _assigned(**kwargs: object) -> Run:
    base: dict[str, object] = {"phase": Phase.RUNNING, "pod": "p-a", "attempt": 1}
    base.update(kwargs)
    return make_run(**base)  # type: ignore[arg-type]


def test_alive_pod_is_healthy() -> None:
    assert isinstance(
        decide_reap(_assigned(), pod=pod("p-a"), pod_in_endpoints=True, now=NOW), Healthy
    )


def test_pod_gone_requeues_with_attempt_two() -> None:
    run = _assigned(max_attempts=3)
    decision = decide_reap(run, pod=None, pod_in_endpoints=False, now=NOW)
    assert isinstance(decision, Recover)
    assert decision.fence is Fence.POD_GONE
    assert isinstance(decision.decision, Retry)
    status = apply_merge_patch(run.status.to_dict(), decision.decision.patch)
    assert status["phase"] == "Pending"
    assert status["attempt"] == 2
    assert status["reason"] == "PodLost"
    assert "assignedPod" not in status
    assert "assignedPodUID" not in status
    requeued = Run.from_dict({**run_dict(), "status": status})
    scheduled = find_condition(requeued.status.conditions, RunConditionType.SCHEDULED)
    assert scheduled is not None
    assert scheduled.reason == Reason.REQUEUED


def test_pod_gone_with_one_attempt_fails() -> None:
    run = _assigned(max_attempts=1)
    decision = decide_reap(run, pod=None, pod_in_endpoints=False, now=NOW)
    assert isinstance(decision, Recover)
    assert isinstance(decision.decision, Terminal)
    assert decision.decision.patch["phase"] == "Failed"
    assert decision.decision.patch["reason"] == "PodLost"


def test_default_policy_is_one_attempt() -> None:
    decision = decide_reap(_assigned(), pod=None, pod_in_endpoints=False, now=NOW)
    assert isinstance(decision, Recover)
    assert isinstance(decision.decision, Terminal)


def test_uid_mismatch_is_pod_gone() -> None:
    replaced = pod("p-a", uid="new-uid")
    decision = decide_reap(_assigned(max_attempts=2), pod=replaced, pod_in_endpoints=True, now=NOW)
    assert isinstance(decision, Recover)
    assert decision.fence is Fence.POD_GONE
    assert "new-uid" in decision.message


def test_deleting_in_endpoints_with_fresh_heartbeat_is_not_fenced() -> None:
    decision = decide_reap(
        _assigned(), pod=pod("p-a", deleting=True), pod_in_endpoints=True, now=NOW
    )
    assert isinstance(decision, NotFenced)


def test_deleting_out_of_endpoints_is_fenced() -> None:
    decision = decide_reap(
        _assigned(max_attempts=2), pod=pod("p-a", deleting=True), pod_in_endpoints=False, now=NOW
    )
    assert isinstance(decision, Recover)
    assert decision.fence is Fence.DELETING_OUT_OF_ENDPOINTS
    assert isinstance(decision.decision, Retry)


def test_deleting_with_stale_heartbeat_is_fenced() -> None:
    decision = decide_reap(
        _assigned(max_attempts=2),
        pod=pod("p-a", deleting=True, fresh=False),
        pod_in_endpoints=True,
        now=NOW,
    )
    assert isinstance(decision, Recover)
    assert decision.fence is Fence.DELETING_HEARTBEAT_STALE


@pytest.mark.parametrize("in_endpoints", [True, False])
def test_stale_heartbeat_alone_is_not_a_fence(in_endpoints: bool) -> None:
    decision = decide_reap(
        _assigned(),
        pod=pod("p-a", fresh=False, ready=False),
        pod_in_endpoints=in_endpoints,
        now=NOW,
    )
    assert isinstance(decision, NotFenced)


@pytest.mark.parametrize("phase", [Phase.SCHEDULED, Phase.RUNNING, Phase.READY])
def test_every_active_phase_is_recovered(phase: Phase) -> None:
    run = _assigned(phase=phase, max_attempts=2, function=phase is Phase.READY)
    assert in_scope(run)
    decision = decide_reap(run, pod=None, pod_in_endpoints=False, now=NOW)
    assert isinstance(decision, Recover)
    assert isinstance(decision.decision, Retry)


@pytest.mark.parametrize("phase", [Phase.PENDING, Phase.SUCCEEDED, Phase.FAILED])
def test_out_of_scope_without_finalizer(phase: Phase) -> None:
    run = make_run(phase=phase, pod="p-a" if phase is not Phase.PENDING else None)
    assert not in_scope(run)
    assert isinstance(decide_reap(run, pod=None, pod_in_endpoints=False, now=NOW), Healthy)


def test_function_run_finalizer_removed_only_when_uid_gone() -> None:
    run = _assigned(phase=Phase.READY, function=True, finalizers=FIN, max_attempts=2)
    gone = decide_reap(run, pod=None, pod_in_endpoints=False, now=NOW)
    assert isinstance(gone, Recover)
    assert gone.remove_finalizer
    assert isinstance(gone.decision, Retry)


@pytest.mark.parametrize(
    ("deleting_pod", "in_endpoints", "fresh"),
    [(True, False, True), (True, True, False)],
    ids=["out-of-endpoints", "heartbeat-stale"],
)
def test_run_with_finalizer_waits_for_pod_uid_gone(
    deleting_pod: bool, in_endpoints: bool, fresh: bool
) -> None:
    """A deleting Pod fences a task Run, but a finalizer-holding Run waits for the UID to go."""
    run = _assigned(phase=Phase.READY, function=True, finalizers=FIN, max_attempts=2)
    lost = pod("p-a", deleting=deleting_pod, fresh=fresh)
    decision = decide_reap(run, pod=lost, pod_in_endpoints=in_endpoints, now=NOW)
    assert isinstance(decision, NotFenced)
    assert "finalizer" in decision.why
    task = _assigned(max_attempts=2)
    assert isinstance(decide_reap(task, pod=lost, pod_in_endpoints=in_endpoints, now=NOW), Recover)


def test_deleting_run_with_finalizer_on_gone_pod_only_drops_finalizer() -> None:
    run = _assigned(phase=Phase.READY, function=True, finalizers=FIN, deleting=True)
    decision = decide_reap(run, pod=None, pod_in_endpoints=False, now=NOW)
    assert isinstance(decision, Recover)
    assert decision.decision is None
    assert decision.remove_finalizer


def test_deleting_run_on_deleting_pod_waits_for_uid_gone() -> None:
    run = _assigned(phase=Phase.READY, function=True, finalizers=FIN, deleting=True)
    decision = decide_reap(run, pod=pod("p-a", deleting=True), pod_in_endpoints=False, now=NOW)
    assert isinstance(decision, NotFenced)


def test_terminal_run_with_finalizer_on_gone_pod_drops_finalizer() -> None:
    run = make_run(phase=Phase.CANCELLED, pod="p-a", function=True, finalizers=FIN)
    assert in_scope(run)
    decision = decide_reap(run, pod=None, pod_in_endpoints=False, now=NOW)
    assert isinstance(decision, Recover)
    assert decision.decision is None
    assert decision.remove_finalizer
