"""The pure task-Run decision (seed 003), rule by rule, plus invariants over all inputs."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from runtimed_builders import NOW, POD_UID, make_run, patched, running

from krt.api import Phase, Retry, Terminal
from runtimed.runtime_client import RpcRejected
from runtimed.task_decisions import (
    CANCEL_POLL_SECONDS,
    STDERR_TAIL_CHARS,
    UNREACHABLE_RETRY_SECONDS,
    CancelExecution,
    Claim,
    End,
    ExecState,
    Fail,
    ForgetExecution,
    Ignore,
    LocalView,
    NeedStatus,
    Observe,
    Release,
    Resume,
    ServerView,
    StartExecution,
    StartState,
    Succeed,
    Wait,
    decide_release,
    decide_task,
    execution_failure_message,
)

NOT_FOUND = ServerView(ExecState.NOT_FOUND)
RUNNING = ServerView(ExecState.RUNNING)
PENDING = ServerView(ExecState.PENDING)
UNREACHABLE = ServerView(ExecState.UNREACHABLE)


def decide(run: Any, local: LocalView | None = None, server: ServerView | None = None) -> Any:
    return decide_task(run, pod_uid=POD_UID, local=local, server=server, now=NOW)


# -- fencing and ignored Runs -----------------------------------------------------------------


@pytest.mark.parametrize("pod_uid", ["other-pod", None])
def test_run_of_another_pod_is_ignored(pod_uid: str | None) -> None:
    assert isinstance(decide(make_run(pod_uid=pod_uid)), Ignore)
    assert isinstance(decide(running(pod_uid=pod_uid), server=RUNNING), Ignore)


def test_empty_own_uid_never_matches() -> None:
    run = make_run(pod_uid=None)
    assert isinstance(decide_task(run, pod_uid="", local=None, server=None, now=NOW), Ignore)


@pytest.mark.parametrize("phase", ["Succeeded", "Failed", "Timeout", "Cancelled", "Pending"])
def test_terminal_and_pending_runs_are_ignored(phase: str) -> None:
    assert isinstance(decide(make_run(phase=phase)), Ignore)


def test_function_runs_are_left_to_the_function_lifecycle() -> None:
    assert isinstance(decide(make_run(function=True)), Ignore)


# -- Scheduled --------------------------------------------------------------------------------


def test_scheduled_run_is_claimed_with_start_time() -> None:
    action = decide(make_run())
    assert isinstance(action, Claim)
    assert action.patch["phase"] == "Running"
    assert action.patch["startTime"].startswith("2026-11-29T09:00:00")
    running_condition = next(c for c in action.patch["conditions"] if c["type"] == "Running")
    assert running_condition["status"] == "True"


def test_requeued_scheduled_run_keeps_its_start_time() -> None:
    run = make_run(start_time=NOW - timedelta(seconds=5), timeout="1m")
    action = decide(run)
    assert isinstance(action, Claim)
    assert "startTime" not in action.patch


def test_scheduled_run_with_cancel_requested_ends_cancelled_without_server() -> None:
    action = decide(make_run(cancel=True))
    assert isinstance(action, End)
    assert action.patch["phase"] == "Cancelled"


def test_scheduled_run_past_its_timeout_ends_timeout() -> None:
    action = decide(make_run(start_time=NOW - timedelta(seconds=11), timeout="10s"))
    assert isinstance(action, End)
    assert action.patch["phase"] == "Timeout"
    assert action.patch["reason"] == "TimeoutExceeded"


# -- Running: the normal path -----------------------------------------------------------------


def test_running_run_asks_the_server_first() -> None:
    assert isinstance(decide(running()), NeedStatus)


def test_not_found_without_observation_starts_and_prepares() -> None:
    assert decide(running(), None, NOT_FOUND) == StartExecution(prepare=True)


def test_not_found_after_preparation_starts_without_preparing_again() -> None:
    local = LocalView(attempt=1, prepared=True)
    assert decide(running(), local, NOT_FOUND) == StartExecution(prepare=False)


def test_in_flight_start_is_never_duplicated() -> None:
    local = LocalView(attempt=1, prepared=True, start=StartState.IN_FLIGHT)
    assert decide(running(), local, None) == Wait(None, "start in flight")
    assert isinstance(decide(running(), local, NOT_FOUND), Wait)


def test_in_flight_start_of_an_older_attempt_still_blocks_a_new_start() -> None:
    local = LocalView(attempt=1, start=StartState.IN_FLIGHT)
    action = decide(running(attempt=2), local, NOT_FOUND)
    assert isinstance(action, Wait)


@pytest.mark.parametrize("server", [PENDING, RUNNING])
def test_active_execution_is_observed(server: ServerView) -> None:
    assert decide(running(), LocalView(attempt=1), server) == Observe(None)


def test_observation_wakes_up_at_the_timeout() -> None:
    run = running(timeout="10s", start_time=NOW - timedelta(seconds=4))
    action = decide(run, LocalView(attempt=1), RUNNING)
    assert action == Observe(pytest.approx(6.0))


def test_unreachable_server_changes_nothing() -> None:
    action = decide(running(), LocalView(attempt=1, observed=True), UNREACHABLE)
    assert action == Wait(UNREACHABLE_RETRY_SECONDS, "Runtime Server unreachable")


def test_success_with_outputs_succeeds() -> None:
    server = ServerView(ExecState.SUCCEEDED, outputs={"a": "1"})
    action = decide(running(), LocalView(attempt=1, observed=True), server)
    assert isinstance(action, Succeed)
    assert action.patch["phase"] == "Succeeded"
    assert action.patch["outputs"] == {"a": "1"}


def test_success_without_outputs_has_no_outputs_field() -> None:
    action = decide(running(), None, ServerView(ExecState.SUCCEEDED, outputs={}))
    assert isinstance(action, Succeed)
    assert action.patch["outputs"] is None


def test_success_with_invalid_outputs_fails_permanently_naming_key_and_bound() -> None:
    server = ServerView(
        ExecState.SUCCEEDED, outputs_error="output 'big' is 5000 bytes, over the limit"
    )
    run = running(retry={"maxAttempts": 3})
    action = decide(run, LocalView(attempt=1, observed=True), server)
    assert isinstance(action, Fail)
    assert isinstance(action.decision, Terminal)
    assert action.decision.patch["reason"] == "OutputsInvalid"
    assert "'big'" in action.decision.patch["message"]
    assert action.forget


def test_failure_without_retry_ends_failed_with_exit_code_and_stderr_tail() -> None:
    server = ServerView(ExecState.FAILED, exit_code=3, stderr="boom\n")
    action = decide(running(), LocalView(attempt=1, observed=True), server)
    assert isinstance(action, Fail)
    assert isinstance(action.decision, Terminal)
    patch = action.decision.patch
    assert patch["phase"] == "Failed"
    assert patch["reason"] == "ExecutionFailed"
    assert "exit code 3" in patch["message"]
    assert "stderr: boom" in patch["message"]
    assert action.forget


def test_failure_with_attempts_left_retries_in_place() -> None:
    server = ServerView(ExecState.FAILED, exit_code=1)
    run = running(retry={"maxAttempts": 3, "backoff": "2s"})
    action = decide(run, LocalView(attempt=1, observed=True), server)
    assert isinstance(action, Fail)
    assert isinstance(action.decision, Retry)
    assert action.decision.patch["phase"] == "Running"
    assert action.decision.patch["attempt"] == 2
    assert action.decision.delay_seconds == 2.0


def test_not_found_after_observation_is_execution_lost() -> None:
    action = decide(running(), LocalView(attempt=1, observed=True), NOT_FOUND)
    assert isinstance(action, Fail)
    assert action.decision.patch["reason"] == "ExecutionLost"
    assert not action.forget


def test_not_found_after_accepted_execute_is_execution_lost() -> None:
    action = decide(running(), LocalView(attempt=1, start=StartState.SUCCEEDED), NOT_FOUND)
    assert isinstance(action, Fail)
    assert action.decision.patch["reason"] == "ExecutionLost"


def test_execution_lost_retries_when_allowed() -> None:
    run = running(retry={"maxAttempts": 2, "backoff": "0s"})
    action = decide(run, LocalView(attempt=1, observed=True), NOT_FOUND)
    assert isinstance(action, Fail)
    assert isinstance(action.decision, Retry)


def test_recorded_start_failure_is_applied_through_the_retry_engine() -> None:
    local = LocalView(attempt=1, start=StartState.FAILED, start_error="Execute: INVALID_ARGUMENT x")
    action = decide(running(), local, NOT_FOUND)
    assert isinstance(action, Fail)
    assert action.decision.patch["reason"] == "StartFailed"
    assert "INVALID_ARGUMENT x" in action.decision.patch["message"]


def test_execute_invalid_argument_is_a_permanent_execute_rejected() -> None:
    """F17: the same spec is rejected again, so no retry; the message names what to set."""
    rejected = RpcRejected(
        "Execute", "INVALID_ARGUMENT", "a Python task needs an entrypoint or args"
    )
    error = f"Execute failed: {rejected}"  # what runtimed.tasks records
    local = LocalView(
        attempt=1, start=StartState.FAILED, start_error=error, start_rejected=rejected.detail
    )
    action = decide(running(retry={"maxAttempts": 3}), local, NOT_FOUND)
    assert isinstance(action, Fail)
    assert isinstance(action.decision, Terminal)
    assert action.decision.why == "permanent"
    patch = action.decision.patch
    assert patch["reason"] == "ExecuteRejected"
    assert patch["message"] == (
        "attempt 1 of 3 failed (ExecuteRejected): the Runtime Server rejected Execute "
        "(INVALID_ARGUMENT): a Python task needs an entrypoint or args; set spec.mode.task.args, "
        "or spec.source with spec.mode.task.entrypoint (a path inside the source), and check "
        "spec.env; the spec is immutable, so create a new Run; ExecuteRejected is permanent"
    )


@pytest.mark.parametrize(
    ("error", "rejected"),
    [
        ("Execute failed: Execute: UNAVAILABLE: restarting", ""),
        ("Execute did not answer within 10s", ""),
        ("Execute not sent: disk full", ""),
        ("Execute failed: Execute: FAILED_PRECONDITION: INVALID_ARGUMENT later", ""),
        (
            "Execute failed: Execute: INVALID_ARGUMENT: working_dir '/ws/runs/u/work' is not an "
            "existing directory",
            "working_dir '/ws/runs/u/work' is not an existing directory",
        ),
    ],
)
def test_other_start_failures_stay_retryable_start_failed(error: str, rejected: str) -> None:
    local = LocalView(
        attempt=1, start=StartState.FAILED, start_error=error, start_rejected=rejected
    )
    action = decide(running(retry={"maxAttempts": 3}), local, NOT_FOUND)
    assert isinstance(action, Fail)
    assert isinstance(action.decision, Retry)
    assert action.decision.patch["reason"] == "StartFailed"


def test_start_failure_is_ignored_when_the_server_knows_the_execution() -> None:
    local = LocalView(attempt=1, start=StartState.FAILED, start_error="deadline")
    assert isinstance(decide(running(), local, RUNNING), Observe)


def test_observation_of_an_older_attempt_does_not_count() -> None:
    stale = LocalView(attempt=1, prepared=True, observed=True)
    assert decide(running(attempt=2), stale, NOT_FOUND) == StartExecution(prepare=True)


def test_restart_without_local_state_never_reruns_a_known_execution() -> None:
    for server in (PENDING, RUNNING):
        assert isinstance(decide(running(), None, server), Observe)
    finished = decide(running(), None, ServerView(ExecState.SUCCEEDED, outputs={}))
    assert isinstance(finished, Succeed)


# -- cancellation and timeout -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "phase"),
    [
        ({"cancel": True}, "Cancelled"),
        ({"timeout": "1s", "start_time": NOW - timedelta(seconds=2)}, "Timeout"),
    ],
)
def test_ending_cancels_then_forgets_then_writes(kwargs: dict[str, Any], phase: str) -> None:
    run = running(**kwargs)
    local = LocalView(attempt=1, observed=True)
    assert isinstance(decide(run, local, None), NeedStatus)
    assert decide(run, local, RUNNING) == CancelExecution(CANCEL_POLL_SECONDS)
    assert decide(run, local, PENDING) == CancelExecution(CANCEL_POLL_SECONDS)
    assert decide(run, local, ServerView(ExecState.FAILED, exit_code=143)) == ForgetExecution()
    assert decide(run, local, ServerView(ExecState.SUCCEEDED, outputs={})) == ForgetExecution()
    action = decide(run, local, NOT_FOUND)
    assert isinstance(action, End)
    assert action.patch["phase"] == phase
    assert action.patch["retryAfter"] is None


def test_ending_waits_for_an_in_flight_start() -> None:
    local = LocalView(attempt=1, start=StartState.IN_FLIGHT)
    assert isinstance(decide(running(cancel=True), local, NOT_FOUND), Wait)


def test_timeout_is_not_reached_one_microsecond_early() -> None:
    run = running(timeout="2s", start_time=NOW - timedelta(seconds=2) + timedelta(microseconds=1))
    assert isinstance(decide(run, None, RUNNING), Observe)


def test_timeout_counts_from_start_time_exactly() -> None:
    run = running(timeout="2s", start_time=NOW - timedelta(seconds=2))
    assert isinstance(decide(run, None, RUNNING), CancelExecution)


def test_cancel_during_backoff_ends_cancelled() -> None:
    run = running(cancel=True, attempt=2, retry_after=NOW + timedelta(seconds=30))
    action = decide(run, None, NOT_FOUND)
    assert isinstance(action, End)
    assert action.patch["phase"] == "Cancelled"


# -- retry backoff and re-entry ---------------------------------------------------------------


def test_backoff_forgets_the_previous_attempts_execution_first() -> None:
    run = running(attempt=2, retry_after=NOW + timedelta(seconds=3), retry={"maxAttempts": 3})
    assert isinstance(decide(run, None, None), NeedStatus)
    assert decide(run, None, ServerView(ExecState.FAILED)) == ForgetExecution()
    assert isinstance(decide(run, None, RUNNING), CancelExecution)


def test_backoff_waits_until_retry_after() -> None:
    run = running(attempt=2, retry_after=NOW + timedelta(seconds=3), retry={"maxAttempts": 3})
    assert decide(run, None, NOT_FOUND) == Wait(pytest.approx(3.0), "retry backoff")


def test_expired_backoff_resumes_without_starting() -> None:
    run = running(attempt=2, retry_after=NOW, retry={"maxAttempts": 3})
    action = decide(run, LocalView(attempt=1, observed=True), NOT_FOUND)
    assert isinstance(action, Resume)
    assert action.patch["retryAfter"] is None
    resumed = patched(run, action.patch)
    assert resumed.status.retry_after is None
    # the next reconciliation sees NOT_FOUND for attempt 2 and starts it (preparing again)
    assert decide(resumed, LocalView(attempt=1, observed=True), NOT_FOUND) == StartExecution(True)


def test_full_retry_cycle_reaches_attempt_three() -> None:
    run = running(retry={"maxAttempts": 3, "backoff": "0s"})
    for attempt in (1, 2):
        action = decide(
            run, LocalView(attempt=attempt, observed=True), ServerView(ExecState.FAILED)
        )
        assert isinstance(action, Fail)
        assert isinstance(action.decision, Retry)
        run = patched(run, action.decision.patch)
        assert run.status.attempt == attempt + 1
        resume = decide(run, None, NOT_FOUND)
        assert isinstance(resume, Resume)
        run = patched(run, resume.patch)
    final = decide(
        run, LocalView(attempt=3, observed=True), ServerView(ExecState.SUCCEEDED, outputs={})
    )
    assert isinstance(final, Succeed)
    assert patched(run, final.patch).status.attempt == 3
    assert patched(run, final.patch).status.phase is Phase.SUCCEEDED


def test_retry_exhaustion_fails() -> None:
    run = running(attempt=3, retry={"maxAttempts": 3})
    action = decide(run, LocalView(attempt=3, observed=True), ServerView(ExecState.FAILED))
    assert isinstance(action, Fail)
    assert isinstance(action.decision, Terminal)
    assert action.decision.why == "exhausted"


def test_not_retryable_reason_fails_at_once() -> None:
    run = running(retry={"maxAttempts": 3, "retryableReasons": ["ExecutionLost"]})
    action = decide(run, LocalView(attempt=1, observed=True), ServerView(ExecState.FAILED))
    assert isinstance(action, Fail)
    assert isinstance(action.decision, Terminal)


# -- release ---------------------------------------------------------------------------------


def test_release_cancels_forgets_then_releases() -> None:
    assert isinstance(decide_release(start_in_flight=False, server=None), NeedStatus)
    assert isinstance(decide_release(start_in_flight=False, server=RUNNING), CancelExecution)
    assert isinstance(
        decide_release(start_in_flight=False, server=ServerView(ExecState.FAILED)), ForgetExecution
    )
    assert decide_release(start_in_flight=False, server=NOT_FOUND) == Release()
    assert isinstance(decide_release(start_in_flight=False, server=UNREACHABLE), Wait)


def test_release_with_a_start_in_flight_leaves_the_forget_to_the_worker() -> None:
    assert decide_release(start_in_flight=True, server=None) == Release()


# -- messages --------------------------------------------------------------------------------


def test_failure_message_keeps_exit_code_with_huge_stderr() -> None:
    message = execution_failure_message(
        ServerView(ExecState.FAILED, exit_code=7, stderr="x" * 100_000 + "END")
    )
    assert message.startswith("exit code 7")
    assert message.endswith("END")
    assert len(message) < STDERR_TAIL_CHARS + 100


def test_failure_message_does_not_repeat_the_exit_code() -> None:
    """The server's plain "exited with status N" repeats "exit code N"; other errors stay."""
    plain = execution_failure_message(
        ServerView(ExecState.FAILED, exit_code=3, error_message="exited with status 3", stderr="e")
    )
    assert plain == "exit code 3; stderr: e"
    signalled = execution_failure_message(
        ServerView(ExecState.FAILED, exit_code=-9, error_message="killed by signal 9")
    )
    assert signalled == "exit code 137 (killed by signal 9, SIGKILL)"  # as shells, Kubernetes
    aborted = execution_failure_message(
        ServerView(ExecState.FAILED, exit_code=-6, error_message="killed by signal 6")
    )
    assert aborted == "exit code 134 (killed by signal 6, SIGABRT)"
    unnamed = execution_failure_message(ServerView(ExecState.FAILED, exit_code=-99))
    assert unnamed == "exit code 227 (killed by signal 99)"
    timed_out = execution_failure_message(
        ServerView(ExecState.FAILED, exit_code=-9, error_message="timed out after 3s")
    )
    assert timed_out == "exit code 137 (killed by signal 9, SIGKILL); timed out after 3s"
    other = execution_failure_message(
        ServerView(ExecState.FAILED, exit_code=3, error_message="exited with status 4")
    )
    assert other == "exit code 3; exited with status 4"


def test_failure_message_of_huge_stderr_survives_the_status_bound() -> None:
    run = running()
    server = ServerView(ExecState.FAILED, exit_code=9, stderr="y" * 50_000 + "LAST")
    action = decide(run, LocalView(attempt=1, observed=True), server)
    assert isinstance(action, Fail)
    message = action.decision.patch["message"]
    assert len(message) <= 2048
    assert "exit code 9" in message
    assert message.endswith("no attempts left")
    assert "LAST" in message


# -- invariants over every input ---------------------------------------------------------------

server_views = st.one_of(
    st.none(),
    st.builds(
        ServerView,
        state=st.sampled_from(list(ExecState)),
        exit_code=st.integers(0, 255),
        outputs=st.one_of(st.none(), st.just({}), st.just({"k": "v"})),
        outputs_error=st.one_of(st.none(), st.just("bad key")),
    ),
)
local_views = st.one_of(
    st.none(),
    st.builds(
        LocalView,
        attempt=st.integers(1, 3),
        prepared=st.booleans(),
        start=st.sampled_from(list(StartState)),
        start_error=st.just("e"),
        observed=st.booleans(),
    ),
)


@given(
    phase=st.sampled_from(["Scheduled", "Running"]),
    attempt=st.integers(1, 3),
    cancel=st.booleans(),
    timeout=st.sampled_from([None, "1s", "1h"]),
    backoff=st.sampled_from([None, -1.0, 5.0]),
    local=local_views,
    server=server_views,
)
def test_invariants(
    phase: str,
    attempt: int,
    cancel: bool,
    timeout: str | None,
    backoff: float | None,
    local: LocalView | None,
    server: ServerView | None,
) -> None:
    run = make_run(
        phase=phase,
        attempt=attempt,
        cancel=cancel,
        timeout=timeout,
        start_time=NOW - timedelta(seconds=2) if phase == "Running" else None,
        retry_after=NOW + timedelta(seconds=backoff)
        if backoff is not None and phase == "Running"
        else None,
        retry={"maxAttempts": 3},
    )
    action = decide(run, local, server)
    view = (local or LocalView(attempt=attempt)).for_attempt(attempt)
    # never a second start while one is in flight, and never a start the server contradicts
    if isinstance(action, StartExecution):
        assert view.start is StartState.NONE
        assert server is not None
        assert server.state is ExecState.NOT_FOUND
        assert not view.observed
        assert not cancel
        assert run.status.retry_after is None
    # an unreachable server never changes the Run
    if server is not None and server.state is ExecState.UNREACHABLE:
        assert not isinstance(action, (Fail, Succeed, Resume, StartExecution))
    # Cancelled/Timeout is written only once the server holds nothing for the UID
    if isinstance(action, End) and phase == "Running":
        assert server is not None
        assert server.state is ExecState.NOT_FOUND
    # a retry re-entry never starts in the same reconciliation and never before retryAfter
    if isinstance(action, Resume):
        assert backoff is not None
        assert backoff <= 0
    # only a Scheduled Run is claimed
    assert not isinstance(action, Claim) or phase == "Scheduled"
    # the Run never leaves the lifecycle state machine
    for patch in _patches(action):
        assert patch.get("phase", phase) in {
            "Running",
            "Succeeded",
            "Failed",
            "Timeout",
            "Cancelled",
        }


def _patches(action: Any) -> list[dict[str, Any]]:
    if isinstance(action, (Claim, Succeed, End, Resume)):
        return [action.patch]
    if isinstance(action, Fail):
        return [action.decision.patch]
    return []
