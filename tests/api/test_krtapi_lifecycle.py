"""Lifecycle patch builders: whole task and function lifecycles written through the CRD."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from krtapi_crd_harness import Admission
from krtapi_samples import function_run, task_run, with_changes

from krt.api.constants import Reason
from krt.api.errors import OutputsError
from krt.api.lifecycle import (
    bind_patch,
    cancelled_patch,
    claim_patch,
    ready_patch,
    succeeded_patch,
    timed_out_patch,
    timeout_deadline,
    unschedulable_patch,
)
from krt.api.patches import StatusPatch, apply_merge_patch
from krt.api.phases import Phase, can_transition
from krt.api.retry import Failure, FailureReason, Reentry, Retry, decide
from krt.api.run import Endpoint, EndpointProtocol, Run

T0 = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)
ENDPOINT = Endpoint(
    EndpointProtocol.HTTPS, "https://gw/v1/namespaces/a/runtimes/b/functions/c:invoke"
)


class Store:
    """Applies patches like the API server's status subresource, checking the CRD each time."""

    def __init__(self, admission: Admission, obj: dict[str, Any]) -> None:
        self.admission = admission
        self.obj = obj
        assert admission.errors(obj) == []

    @property
    def run(self) -> Run:
        return Run.from_dict(self.obj)

    def write(self, patch: StatusPatch) -> Run:
        before = self.run
        new = apply_merge_patch(self.obj, {"status": patch})
        assert self.admission.errors(new, self.obj) == []
        assert can_transition(before.status.phase, Run.from_dict(new).status.phase)
        self.obj = new
        return self.run


def _cond(run: Run, ctype: str) -> tuple[str, str]:
    for condition in run.status.conditions:
        if condition.type == ctype:
            return condition.status.value, condition.reason
    raise AssertionError(f"no {ctype} condition")


def test_task_lifecycle(run_admission: Admission) -> None:
    store = Store(run_admission, task_run())
    run = store.write(
        unschedulable_patch(store.run, reason=Reason.NO_READY_POD, message="no pod", now=T0)
    )
    assert run.status.phase is Phase.PENDING
    assert _cond(run, "Scheduled") == ("False", "NoReadyPod")
    same = unschedulable_patch(run, reason=Reason.NO_READY_POD, message="no pod", now=T0)
    assert same == {}
    run = store.write(bind_patch(run, pod_name="pod-a", pod_uid="uid-a", now=T0))
    assert (run.status.phase, run.status.attempt, run.status.assigned_pod) == (
        Phase.SCHEDULED,
        1,
        "pod-a",
    )
    assert _cond(run, "Scheduled") == ("True", "Assigned")
    run = store.write(claim_patch(run, now=T0 + timedelta(seconds=1)))
    assert run.status.phase is Phase.RUNNING
    assert run.status.start_time == T0 + timedelta(seconds=1)
    assert timeout_deadline(run) == T0 + timedelta(seconds=1, hours=1, minutes=30)
    run = store.write(succeeded_patch(run, outputs={"answer": "42"}, now=T0 + timedelta(seconds=2)))
    assert run.status.phase is Phase.SUCCEEDED
    assert run.status.outputs == {"answer": "42"}
    assert run.status.completion_time == T0 + timedelta(seconds=2)
    assert _cond(run, "Running") == ("False", "Succeeded")
    with pytest.raises(ValueError, match="cannot become Cancelled"):
        cancelled_patch(run, now=T0)


def test_function_lifecycle_with_pod_loss(run_admission: Admission) -> None:
    store = Store(run_admission, with_changes(function_run(), spec__retryPolicy={"maxAttempts": 2}))
    run = store.write(bind_patch(store.run, pod_name="pod-a", pod_uid="uid-a", now=T0))
    assert _cond(run, "Ready") == ("False", "Registering")
    run = store.write(claim_patch(run, now=T0))
    run = store.write(ready_patch(run, endpoint=ENDPOINT, now=T0))
    assert run.status.phase is Phase.READY
    assert _cond(run, "Ready") == ("True", "FunctionRegistered")
    assert run.status.endpoint == ENDPOINT
    decision = decide(run, Failure(FailureReason.POD_LOST), now=T0, reentry=Reentry.REQUEUE)
    assert isinstance(decision, Retry)
    run = store.write(decision.patch)
    assert (run.status.phase, run.status.attempt) == (Phase.PENDING, 2)
    assert run.status.endpoint == ENDPOINT  # stable while recovering
    run = store.write(bind_patch(run, pod_name="pod-b", pod_uid="uid-b", now=T0))
    assert run.status.attempt == 2  # the bind keeps the retry engine's attempt
    assert run.status.retry_after is None
    run = store.write(claim_patch(run, now=T0 + timedelta(seconds=9)))
    assert run.status.start_time == T0  # lifetime counts from the first claim
    run = store.write(ready_patch(run, endpoint=ENDPOINT, now=T0))
    run = store.write(
        timed_out_patch(run, reason=Reason.IDLE_TIMEOUT, message="idle for 600s", now=T0)
    )
    assert (run.status.phase, run.status.reason) == (Phase.TIMEOUT, "IdleTimeout")
    assert _cond(run, "Ready") == ("False", "IdleTimeout")


def test_function_run_bound_after_waiting_is_ready_false_registering(
    run_admission: Admission,
) -> None:
    """F15: the bind replaces Pending's Ready=False/NotScheduled with Registering, and the
    claim keeps it until registration (seed 000)."""
    store = Store(run_admission, function_run())
    run = store.write(
        {"conditions": [{"type": "Ready", "status": "False", "reason": "NotScheduled",
                         "lastTransitionTime": "2026-11-29T07:59:00.000000Z"}]}
    )  # fmt: skip
    patch = bind_patch(run, pod_name="pod-a", pod_uid="uid-a", now=T0)
    assert patch["message"] == "bound to Pod pod-a (attempt 1)"
    run = store.write(patch)
    assert _cond(run, "Ready") == ("False", "Registering")
    run = store.write(claim_patch(run, now=T0))
    assert _cond(run, "Ready") == ("False", "Registering")
    assert _cond(run, "Running") == ("True", "Claimed")


def test_cancel_before_assignment(run_admission: Admission) -> None:
    store = Store(run_admission, with_changes(task_run(), spec__cancelRequested=True))
    run = store.write(cancelled_patch(store.run, now=T0))
    assert (run.status.phase, run.status.reason) == (Phase.CANCELLED, "Cancelled")
    assert run.status.completion_time == T0


def test_guards() -> None:
    pending = Run.from_dict(task_run())
    with pytest.raises(ValueError, match="not Scheduled"):
        claim_patch(pending, now=T0)
    with pytest.raises(ValueError, match="only function Runs"):
        ready_patch(pending, endpoint=ENDPOINT, now=T0)
    with pytest.raises(ValueError, match="not a reason a Run cannot be scheduled"):
        unschedulable_patch(pending, reason=Reason.CLAIMED, message="", now=T0)
    with pytest.raises(ValueError, match="not a timeout reason"):
        timed_out_patch(pending, reason=Reason.CANCELLED, message="", now=T0)
    with pytest.raises(ValueError, match="needs the Pod's name and UID"):
        bind_patch(pending, pod_name="p", pod_uid="", now=T0)
    scheduled = Run.from_dict(apply_merge_patch(task_run(), {"status": bind_patch(
        pending, pod_name="p", pod_uid="u", now=T0)}))  # fmt: skip
    with pytest.raises(ValueError, match="not Pending"):
        bind_patch(scheduled, pod_name="p", pod_uid="u", now=T0)
    with pytest.raises(ValueError, match="not Pending"):
        unschedulable_patch(scheduled, reason=Reason.NO_READY_POD, message="", now=T0)
    with pytest.raises(OutputsError):
        succeeded_patch(
            Run.from_dict(apply_merge_patch(task_run(), {"status": {"phase": "Running"}})),
            outputs={"bad key": "x"},
            now=T0,
        )
    assert timeout_deadline(pending) is None


@pytest.mark.parametrize("make", [task_run, function_run], ids=["task", "function"])
def test_run_conditions_make_only_function_runs_not_ready(make: Any) -> None:
    from krt.api.constants import RunConditionType
    from krt.api.lifecycle import run_conditions

    run = Run.from_dict(make())
    conditions = run_conditions(
        run,
        RunConditionType.SCHEDULED,
        False,
        reason=Reason.CANCELLED,
        message="m",
        now=T0,
        ready_reason=Reason.NOT_SCHEDULED,
    )
    by_type = {c.type: (c.status.value, c.reason, c.message) for c in conditions}
    assert by_type["Scheduled"] == ("False", "Cancelled", "m")
    if run.spec.is_function:
        assert by_type["Ready"] == ("False", "NotScheduled", "m")
    else:
        assert "Ready" not in by_type
    assert run.status.conditions == Run.from_dict(make()).status.conditions  # unchanged


def test_ended_patch_fields() -> None:
    from krt.api.lifecycle import ended_patch
    from krt.api.times import format_time

    patch = ended_patch(Phase.FAILED, FailureReason.EXECUTION_FAILED, "boom", [], T0)
    assert patch == {
        "phase": "Failed",
        "reason": "ExecutionFailed",
        "message": "boom",
        "completionTime": format_time(T0),
        "retryAfter": None,
        "conditions": [],
    }
    assert type(patch["reason"]) is str


def _running(timeout: str, *, start: str = "2026-11-29T08:00:00Z", backoff: str = "2s") -> Run:
    obj = with_changes(task_run(), spec__timeout=timeout, spec__retryPolicy__backoff=backoff)
    return Run.from_dict(
        apply_merge_patch(obj, {"status": {"phase": "Running", "attempt": 1, "startTime": start}})
    )


def test_stored_overlong_timeout_reads_as_go_maximum_not_an_overflow() -> None:
    """F1: an object stored before the CRD bounded spec.timeout must not wedge runtimed."""
    run = _running("1000000000h")
    deadline = timeout_deadline(run)
    assert deadline == T0 + timedelta(seconds=(2**63 - 1) / 1e9)


def test_deadline_past_the_last_datetime_is_clamped() -> None:
    run = _running("2562047h", start="9999-06-01T00:00:00Z")
    assert timeout_deadline(run) == datetime.max.replace(tzinfo=UTC)
    assert timeout_deadline(run) > datetime(9999, 12, 31, tzinfo=UTC)  # comparable, no error


def test_stored_overlong_backoff_is_capped_not_an_error() -> None:
    from krt.api.retry import backoff_seconds

    run = _running("1h", backoff="1000000000h")
    assert backoff_seconds(run.spec.effective_retry_policy, 1) == 300.0
