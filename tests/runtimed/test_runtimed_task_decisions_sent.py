"""The task decision after a restart of runtimed and its Runtime Server together (seed 003).

``execute_sent`` is the attempt of the Run's durable Execute marker
(:mod:`runtimed.execute_markers`): the only thing a fresh runtimed knows about an execution
the restarted server no longer holds.
"""

from __future__ import annotations

from typing import Any

import pytest
from runtimed_builders import NOW, POD_UID, running

from krt.api import Retry, Terminal
from runtimed.task_decisions import (
    ExecState,
    Fail,
    LocalView,
    NeedStatus,
    Observe,
    ServerView,
    StartExecution,
    StartState,
    Succeed,
    Wait,
    decide_task,
)

NOT_FOUND = ServerView(ExecState.NOT_FOUND)


def decide(run: Any, local: LocalView | None, server: ServerView | None, *, sent: int = 0) -> Any:
    return decide_task(run, pod_uid=POD_UID, local=local, server=server, now=NOW, execute_sent=sent)


def test_fresh_runtimed_with_a_marker_and_not_found_is_execution_lost() -> None:
    action = decide(running(), None, NOT_FOUND, sent=1)
    assert isinstance(action, Fail)
    assert isinstance(action.decision, Terminal)  # maxAttempts 1: the Run ends Failed
    assert action.decision.patch["phase"] == "Failed"
    assert action.decision.patch["reason"] == "ExecutionLost"
    assert "attempt 1" in action.decision.patch["message"]
    assert not action.forget  # the server holds nothing to forget


def test_fresh_runtimed_without_a_marker_starts() -> None:
    assert decide(running(), None, NOT_FOUND, sent=0) == StartExecution(prepare=True)


def test_a_marker_of_an_older_attempt_does_not_count() -> None:
    run = running(attempt=3, retry={"maxAttempts": 3, "backoff": "0s"})
    for sent in (1, 2):
        assert decide(run, None, NOT_FOUND, sent=sent) == StartExecution(prepare=True)
    local = LocalView(attempt=3, prepared=True)
    assert decide(run, local, NOT_FOUND, sent=2) == StartExecution(prepare=False)


def test_a_lost_attempt_with_retries_left_retries_as_the_next_attempt() -> None:
    run = running(attempt=1, retry={"maxAttempts": 2, "backoff": "1s"})
    action = decide(run, None, NOT_FOUND, sent=1)
    assert isinstance(action, Fail)
    assert isinstance(action.decision, Retry)
    assert action.decision.attempt == 2
    assert action.decision.patch["reason"] == "ExecutionLost"
    assert action.decision.patch["attempt"] == 2


def test_a_marker_ahead_of_a_lagging_cache_never_starts() -> None:
    # the cached Run still shows attempt 1 while attempt 2's Execute was sent
    action = decide(running(attempt=1, retry={"maxAttempts": 3}), None, NOT_FOUND, sent=2)
    assert isinstance(action, Fail)


@pytest.mark.parametrize("state", [ExecState.PENDING, ExecState.RUNNING])
def test_a_marker_with_a_known_execution_observes_it(state: ExecState) -> None:
    assert isinstance(decide(running(), None, ServerView(state), sent=1), Observe)


def test_a_marker_with_a_finished_execution_applies_its_result() -> None:
    done = ServerView(ExecState.SUCCEEDED, outputs={"a": "1"})
    assert isinstance(decide(running(), None, done, sent=1), Succeed)


def test_a_marker_waits_for_an_unreachable_server() -> None:
    assert isinstance(decide(running(), None, ServerView(ExecState.UNREACHABLE), sent=1), Wait)
    assert isinstance(decide(running(), None, None, sent=1), NeedStatus)


def test_a_recorded_start_failure_is_still_a_start_failure() -> None:
    local = LocalView(attempt=1, start=StartState.FAILED, start_error="Execute failed: down")
    action = decide(running(), local, NOT_FOUND, sent=1)
    assert isinstance(action, Fail)
    assert action.decision.patch["reason"] == "StartFailed"


def test_an_in_flight_start_is_waited_for() -> None:
    local = LocalView(attempt=1, start=StartState.IN_FLIGHT)
    assert isinstance(decide(running(), local, NOT_FOUND, sent=1), Wait)
