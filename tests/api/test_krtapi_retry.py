"""The shared retry engine (seed 003 Retry; seed 000 Lifecycle State Machine and fencing)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from krtapi_crd_harness import Admission
from krtapi_samples import function_run, task_run, with_changes

from krt.api.constants import Reason
from krt.api.errors import DurationError
from krt.api.limits import MAX_BACKOFF_SECONDS, MAX_MESSAGE_CHARS
from krt.api.patches import apply_merge_patch
from krt.api.phases import Phase, can_transition
from krt.api.retry import (
    DEFAULT_BACKOFF_SECONDS,
    PERMANENT_REASONS,
    RETRYABLE_REASONS,
    Failure,
    FailureReason,
    Reentry,
    Retry,
    Stale,
    Terminal,
    backoff_seconds,
    decide,
    resume_patch,
    retry_wait_seconds,
    retryable_reasons,
)
from krt.api.run import RetryPolicy, Run

T0 = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)
POD = {"assignedPod": "runtime-python-abc", "assignedPodUID": "pod-uid-1"}


def _running(
    *,
    attempt: int = 1,
    policy: dict[str, Any] | None = None,
    function: bool = False,
    phase: str = "Running",
) -> dict[str, Any]:
    base = function_run() if function else task_run()
    spec_policy = policy if policy is not None else {"maxAttempts": 3, "backoff": "2s"}
    obj = with_changes(base, spec__retryPolicy=spec_policy)
    if spec_policy == {}:
        obj = with_changes(obj, spec__retryPolicy=None)
    obj["status"] = {
        "phase": phase,
        "attempt": attempt,
        "startTime": "2026-11-29T07:59:00.000000Z",
        **POD,
        "conditions": [
            {"type": "Scheduled", "status": "True", "reason": "Assigned",
             "lastTransitionTime": "2026-11-29T07:58:00.000000Z"},
            {"type": "Running", "status": "True", "reason": "Claimed",
             "lastTransitionTime": "2026-11-29T07:59:00.000000Z"},
        ],
    }  # fmt: skip
    return obj


def _apply(obj: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    return apply_merge_patch(obj, {"status": patch})


def _conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in obj["status"].get("conditions", [])}


# --- vocabulary ----------------------------------------------------------------------------


def test_reason_vocabulary() -> None:
    assert {r.value for r in FailureReason} == {
        "ExecutionFailed", "ExecutionLost", "StartFailed", "PreparationFailed", "PodLost",
        "RegistrationFailed", "RegistrationLost", "FunctionUnimplemented", "OutputsInvalid",
        "ExecuteRejected",
    }  # fmt: skip
    assert PERMANENT_REASONS == {
        FailureReason.FUNCTION_UNIMPLEMENTED,
        FailureReason.OUTPUTS_INVALID,
        FailureReason.EXECUTE_REJECTED,
    }
    assert RETRYABLE_REASONS | PERMANENT_REASONS == set(FailureReason)
    assert not RETRYABLE_REASONS & PERMANENT_REASONS
    # failure reasons and the other condition reasons never share a string
    assert not {r.value for r in FailureReason} & {r.value for r in Reason}


def test_retryable_reasons_policy() -> None:
    assert retryable_reasons(RetryPolicy()) == RETRYABLE_REASONS
    chosen = RetryPolicy(retryable_reasons=("PodLost", "FunctionUnimplemented", "Bogus"))
    assert retryable_reasons(chosen) == {FailureReason.POD_LOST}
    assert retryable_reasons(RetryPolicy(retryable_reasons=())) == frozenset()


# --- backoff -------------------------------------------------------------------------------


def test_backoff_is_exponential_and_capped() -> None:
    policy = RetryPolicy(max_attempts=10, backoff="2s")
    assert [backoff_seconds(policy, n) for n in range(1, 6)] == [2, 4, 8, 16, 32]
    assert backoff_seconds(policy, 9) == MAX_BACKOFF_SECONDS == 300
    assert backoff_seconds(policy, 10**6) == MAX_BACKOFF_SECONDS
    assert backoff_seconds(RetryPolicy(), 1) == DEFAULT_BACKOFF_SECONDS == 1.0
    assert backoff_seconds(RetryPolicy(backoff="0s"), 5) == 0.0
    assert backoff_seconds(RetryPolicy(backoff="1h"), 1) == 300.0
    with pytest.raises(DurationError):
        backoff_seconds(RetryPolicy(backoff="soon"), 1)


# --- decisions -----------------------------------------------------------------------------


def test_default_policy_never_retries() -> None:
    run = Run.from_dict(_running(policy={}))
    decision = decide(run, Failure(FailureReason.EXECUTION_FAILED, "exit 1"), now=T0,
                      reentry=Reentry.IN_PLACE)  # fmt: skip
    assert isinstance(decision, Terminal)
    assert decision.why == "exhausted"
    assert decision.patch["phase"] == "Failed"
    assert (
        decision.patch["message"]
        == "attempt 1 of 1 failed (ExecutionFailed): exit 1; no attempts left"
    )


def test_in_place_retry_patch() -> None:
    obj = _running(attempt=1)
    decision = decide(Run.from_dict(obj), Failure(FailureReason.EXECUTION_FAILED, "exit code 1"),
                      now=T0, reentry=Reentry.IN_PLACE)  # fmt: skip
    assert isinstance(decision, Retry)
    assert decision.attempt == 2
    assert decision.delay_seconds == 2.0
    assert decision.retry_after == T0 + timedelta(seconds=2)
    after = _apply(obj, decision.patch)
    status = after["status"]
    assert status["phase"] == "Running"
    assert status["attempt"] == 2
    assert status["reason"] == "ExecutionFailed"
    assert status["retryAfter"] == "2026-11-29T08:00:02.000000Z"
    assert (
        status["message"]
        == "attempt 1 of 3 failed (ExecutionFailed): exit code 1; attempt 2 after 2s"
    )
    assert status["assignedPod"] == POD["assignedPod"]  # same Pod
    assert status["startTime"] == "2026-11-29T07:59:00.000000Z"  # timeout spans attempts
    running = _conditions(after)["Running"]
    assert (running["status"], running["reason"]) == ("False", "RetryBackoff")
    assert running["lastTransitionTime"] == "2026-11-29T08:00:00.000000Z"
    assert _conditions(after)["Scheduled"]["status"] == "True"
    assert "Ready" not in _conditions(after)


def test_requeue_retry_patch_clears_assignment() -> None:
    obj = _running(attempt=1, phase="Running")
    decision = decide(Run.from_dict(obj), Failure(FailureReason.POD_LOST, "Pod pod-uid-1 is gone"),
                      now=T0, reentry=Reentry.REQUEUE)  # fmt: skip
    assert isinstance(decision, Retry)
    status = _apply(obj, decision.patch)["status"]
    assert status["phase"] == "Pending"
    assert status["attempt"] == 2
    assert "assignedPod" not in status
    assert "assignedPodUID" not in status
    assert status["reason"] == "PodLost"
    scheduled = _conditions({"status": status})["Scheduled"]
    assert (scheduled["status"], scheduled["reason"]) == ("False", "Requeued")


def test_function_runs_also_report_ready_false() -> None:
    obj = _running(attempt=1, function=True, phase="Ready")
    obj["status"]["conditions"].append(
        {"type": "Ready", "status": "True", "reason": "FunctionRegistered",
         "lastTransitionTime": "2026-11-29T07:59:30.000000Z"}
    )  # fmt: skip
    obj["status"]["endpoint"] = {"protocol": "HTTPS", "url": "https://gw/x"}
    decision = decide(Run.from_dict(obj), Failure(FailureReason.POD_LOST), now=T0,
                      reentry=Reentry.REQUEUE)  # fmt: skip
    assert isinstance(decision, Retry)
    after = _apply(obj, decision.patch)
    ready = _conditions(after)["Ready"]
    assert (ready["status"], ready["reason"]) == ("False", "PodLost")
    assert after["status"]["endpoint"] == {"protocol": "HTTPS", "url": "https://gw/x"}
    assert after["status"]["message"] == "attempt 1 of 3 failed (PodLost); attempt 2 after 2s"
    terminal = decide(Run.from_dict(obj), Failure(FailureReason.FUNCTION_UNIMPLEMENTED), now=T0,
                      reentry=Reentry.IN_PLACE)  # fmt: skip
    assert isinstance(terminal, Terminal)
    assert terminal.why == "permanent"
    ready = _conditions(_apply(obj, terminal.patch))["Ready"]
    assert (ready["status"], ready["reason"]) == ("False", "FunctionUnimplemented")


@pytest.mark.parametrize("reentry", list(Reentry))
def test_exhaustion_ends_failed(reentry: Reentry) -> None:
    obj = _running(attempt=3)
    decision = decide(Run.from_dict(obj), Failure(FailureReason.EXECUTION_LOST, "gone"), now=T0,
                      reentry=reentry)  # fmt: skip
    assert isinstance(decision, Terminal)
    assert decision.why == "exhausted"
    status = _apply(obj, decision.patch)["status"]
    assert status["phase"] == "Failed"
    assert status["reason"] == "ExecutionLost"
    assert status["completionTime"] == "2026-11-29T08:00:00.000000Z"
    assert status["attempt"] == 3
    assert "retryAfter" not in status
    assert status["message"] == "attempt 3 of 3 failed (ExecutionLost): gone; no attempts left"
    running = _conditions({"status": status})["Running"]
    assert (running["status"], running["reason"]) == ("False", "ExecutionLost")


def test_reason_not_listed_is_terminal() -> None:
    obj = _running(policy={"maxAttempts": 3, "retryableReasons": ["PodLost"]})
    decision = decide(Run.from_dict(obj), Failure(FailureReason.EXECUTION_FAILED), now=T0,
                      reentry=Reentry.IN_PLACE)  # fmt: skip
    assert isinstance(decision, Terminal)
    assert decision.why == "not-retryable"
    assert "not in spec.retryPolicy.retryableReasons" in decision.patch["message"]


@pytest.mark.parametrize("reason", sorted(PERMANENT_REASONS))
def test_permanent_reasons_never_retry(reason: FailureReason) -> None:
    obj = _running(policy={"maxAttempts": 100, "retryableReasons": [reason.value]})
    decision = decide(Run.from_dict(obj), Failure(reason), now=T0, reentry=Reentry.IN_PLACE)
    assert isinstance(decision, Terminal)
    assert decision.why == "permanent"
    assert f"{reason.value} is permanent" in decision.patch["message"]


def test_stale_failures_write_nothing() -> None:
    run = Run.from_dict(_running(attempt=2))
    late = decide(run, Failure(FailureReason.EXECUTION_FAILED, attempt=1), now=T0,
                  reentry=Reentry.IN_PLACE)  # fmt: skip
    assert isinstance(late, Stale)
    assert "attempt 1" in late.detail
    current = decide(run, Failure(FailureReason.EXECUTION_FAILED, attempt=2), now=T0,
                     reentry=Reentry.IN_PLACE)  # fmt: skip
    assert isinstance(current, Retry)
    done = Run.from_dict(_running(phase="Succeeded"))
    assert isinstance(decide(done, Failure(FailureReason.POD_LOST), now=T0,
                             reentry=Reentry.REQUEUE), Stale)  # fmt: skip


def test_attempt_zero_counts_as_first() -> None:
    run = Run.from_dict(_running(attempt=0))
    decision = decide(run, Failure(FailureReason.POD_LOST), now=T0, reentry=Reentry.REQUEUE)
    assert isinstance(decision, Retry)
    assert decision.attempt == 2


def test_long_messages_are_bounded() -> None:
    run = Run.from_dict(_running())
    decision = decide(run, Failure(FailureReason.EXECUTION_FAILED, "e" * 10_000 + "TAIL"), now=T0,
                      reentry=Reentry.IN_PLACE)  # fmt: skip
    assert isinstance(decision, Retry)
    assert len(decision.patch["message"]) == 2048
    assert decision.patch["message"].endswith("attempt 2 after 2s")


# --- seed 003's sequence, end to end over the status -----------------------------------------


def test_seed_003_in_place_retry_sequence(run_admission: Admission) -> None:
    """fail -> persist retry status (then Forget) -> wait backoff -> resume (Running=True,
    no Execute) -> next attempt fails -> ... -> exhausted; every written status is admitted
    by the CRD and every phase change is allowed by the state machine."""
    obj = _running(attempt=1, policy={"maxAttempts": 3, "backoff": "1s"})
    now = T0
    seen_attempts = []
    while True:
        run = Run.from_dict(obj)
        seen_attempts.append(run.status.attempt)
        decision = decide(run, Failure(FailureReason.EXECUTION_FAILED, "exit 1", attempt=run.status.attempt),
                          now=now, reentry=Reentry.IN_PLACE)  # fmt: skip
        new = _apply(obj, decision.patch) if not isinstance(decision, Stale) else obj
        assert run_admission.errors(new, obj) == []
        assert can_transition(run.status.phase, Run.from_dict(new).status.phase)
        obj = new
        if isinstance(decision, Terminal):
            break
        assert isinstance(decision, Retry)
        backing_off = Run.from_dict(obj)
        assert retry_wait_seconds(backing_off.status, now=now) == decision.delay_seconds
        with pytest.raises(ValueError, match="backoff runs until"):
            resume_patch(backing_off, now=now)
        now = decision.retry_after
        assert retry_wait_seconds(backing_off.status, now=now) == 0.0
        resumed = _apply(obj, resume_patch(backing_off, now=now))
        assert run_admission.errors(resumed, obj) == []
        assert "retryAfter" not in resumed["status"]
        running = _conditions(resumed)["Running"]
        assert (running["status"], running["reason"]) == ("True", "Claimed")
        assert (
            running["lastTransitionTime"]
            == resumed["status"]["conditions"][1]["lastTransitionTime"]
        )
        obj = resumed
        now += timedelta(seconds=10)
    assert seen_attempts == [1, 2, 3]
    assert obj["status"]["phase"] == "Failed"
    assert obj["status"]["attempt"] == 3
    # backoff doubled: 1s after attempt 1, 2s after attempt 2
    assert now == T0 + timedelta(seconds=1 + 10 + 2 + 10)


def test_resume_patch_for_a_function_run_keeps_ready_false() -> None:
    obj = _running(function=True)
    decision = decide(Run.from_dict(obj), Failure(FailureReason.REGISTRATION_FAILED), now=T0,
                      reentry=Reentry.IN_PLACE)  # fmt: skip
    assert isinstance(decision, Retry)
    obj = _apply(obj, decision.patch)
    resumed = _apply(obj, resume_patch(Run.from_dict(obj), now=decision.retry_after))
    ready = _conditions(resumed)["Ready"]
    assert (ready["status"], ready["reason"]) == ("False", "Registering")


def test_resume_patch_describes_the_attempt_now_running() -> None:
    """F2: reason cleared; message names the running attempt and the failed one, no backoff."""
    obj = _running()
    failure = Failure(FailureReason.EXECUTION_FAILED, "exit code 3; stderr: first")
    decision = decide(Run.from_dict(obj), failure, now=T0, reentry=Reentry.IN_PLACE)
    assert isinstance(decision, Retry)
    obj = _apply(obj, decision.patch)
    assert obj["status"]["message"].endswith("; attempt 2 after 2s")
    resumed = _apply(obj, resume_patch(Run.from_dict(obj), now=decision.retry_after))
    assert "reason" not in resumed["status"]
    expected = (
        "attempt 2 of 3 running (attempt 1 failed: ExecutionFailed: exit code 3; stderr: first)"
    )
    assert resumed["status"]["message"] == expected
    assert _conditions(resumed)["Running"]["message"] == expected


def test_resume_message_of_a_failure_without_detail_and_of_a_huge_one() -> None:
    obj = _apply(_running(), {"attempt": 2, "reason": "ExecutionLost",
                              "message": "attempt 1 of 3 failed (ExecutionLost); attempt 2 after 1s",
                              "retryAfter": "2026-11-29T08:00:00.000000Z"})  # fmt: skip
    patch = resume_patch(Run.from_dict(obj), now=T0)
    assert patch["message"] == "attempt 2 of 3 running (attempt 1 failed: ExecutionLost)"
    # a message the retry engine cut to its bound (keeping the stderr tail) still fits, and
    # the new message keeps its head and the tail of the failure
    cut = "\u2026" + "y" * (MAX_MESSAGE_CHARS - 30) + "END; attempt 2 after 1s"
    obj = _apply(obj, {"message": cut})
    message = resume_patch(Run.from_dict(obj), now=T0)["message"]
    assert len(message) <= MAX_MESSAGE_CHARS
    assert message.startswith("attempt 2 of 3 running (")
    assert message.endswith("yyyEND)")


def test_resume_patch_refuses_runs_not_in_backoff() -> None:
    with pytest.raises(ValueError, match="not in in-place retry backoff"):
        resume_patch(Run.from_dict(_running()), now=T0)


def test_reaper_requeue_then_scheduler_waits_for_retry_after(run_admission: Admission) -> None:
    obj = _running(attempt=1, policy={"maxAttempts": 2, "backoff": "5s"})
    decision = decide(Run.from_dict(obj), Failure(FailureReason.POD_LOST), now=T0,
                      reentry=Reentry.REQUEUE)  # fmt: skip
    assert isinstance(decision, Retry)
    requeued = _apply(obj, decision.patch)
    assert run_admission.errors(requeued, obj) == []
    status = Run.from_dict(requeued).status
    assert status.phase is Phase.PENDING
    assert status.attempt == 2
    assert retry_wait_seconds(status, now=T0 + timedelta(seconds=1)) == 4.0
    # second Pod loss: attempts exhausted
    final = decide(Run.from_dict(requeued), Failure(FailureReason.POD_LOST), now=T0,
                   reentry=Reentry.REQUEUE)  # fmt: skip
    assert isinstance(final, Terminal)


# --- properties ----------------------------------------------------------------------------

_POLICY = st.fixed_dictionaries(
    {"maxAttempts": st.integers(min_value=1, max_value=100)},
    optional={
        "backoff": st.sampled_from(["0", "0s", "100ms", "1s", "2s", "1m", "1h"]),
        "retryableReasons": st.lists(
            st.sampled_from(sorted(r.value for r in RETRYABLE_REASONS)), unique=True
        ),
    },
)


@settings(max_examples=150, deadline=None)
@given(
    policy=_POLICY,
    attempt=st.integers(min_value=0, max_value=100),
    reason=st.sampled_from(list(FailureReason)),
    reentry=st.sampled_from(list(Reentry)),
    function=st.booleans(),
    message=st.text(max_size=3000),
)
def test_decision_properties(
    run_admission: Admission,
    policy: dict[str, Any],
    attempt: int,
    reason: FailureReason,
    reentry: Reentry,
    function: bool,
    message: str,
) -> None:
    obj = _running(attempt=attempt, policy=policy, function=function)
    run = Run.from_dict(obj)
    decision = decide(run, Failure(reason, message), now=T0, reentry=reentry)
    current = max(1, attempt)
    listed = policy.get("retryableReasons")
    allowed = reason in RETRYABLE_REASONS and (listed is None or reason.value in listed)
    should_retry = allowed and current < policy["maxAttempts"]
    assert isinstance(decision, Retry) is should_retry
    assert isinstance(decision, Terminal) is (not should_retry)
    assert not isinstance(decision, Stale)
    assert isinstance(decision, Retry | Terminal)
    new = _apply(obj, decision.patch)
    assert run_admission.errors(new, obj) == []
    parsed = Run.from_dict(new)
    assert can_transition(run.status.phase, parsed.status.phase)
    assert parsed.status.reason == reason.value
    assert len(parsed.status.message or "") <= 2048
    if isinstance(decision, Retry):
        assert parsed.status.attempt == current + 1 <= policy["maxAttempts"]
        assert 0 <= decision.delay_seconds <= MAX_BACKOFF_SECONDS
        assert parsed.status.retry_after == T0 + timedelta(seconds=decision.delay_seconds)
        assert parsed.status.phase is (
            Phase.RUNNING if reentry is Reentry.IN_PLACE else Phase.PENDING
        )
        assert (parsed.status.assigned_pod is None) is (reentry is Reentry.REQUEUE)
        assert parsed.status.completion_time is None
    else:
        assert parsed.status.phase is Phase.FAILED
        assert parsed.status.completion_time == T0
        assert parsed.status.retry_after is None
        assert parsed.status.attempt == attempt


@given(st.integers(min_value=1, max_value=60))
def test_backoff_is_monotonic(n: int) -> None:
    policy = RetryPolicy(max_attempts=100, backoff="250ms")
    assert backoff_seconds(policy, n) <= backoff_seconds(policy, n + 1) <= MAX_BACKOFF_SECONDS


def test_decide_does_not_mutate_the_run() -> None:
    run = Run.from_dict(_running())
    snapshot = dataclasses.replace(run)
    decide(run, Failure(FailureReason.EXECUTION_FAILED), now=T0, reentry=Reentry.IN_PLACE)
    assert run == snapshot
