"""The promise checks themselves (pure, fast): each catches the violation it is for."""

from __future__ import annotations

from collections import Counter

from .promises import (
    Duplicate,
    Loss,
    duplicate_executions,
    fenced_answers,
    longest_pending,
    recovery_times,
    status_counts,
    stuck_runs,
    unanswered,
    undocumented_statuses,
)
from .timeline import Observation, observe
from .workload import Execution, InvokeRecord


def obs(at: float, pod_uid: str, phase: str = "Ready", **kw: object) -> Observation:
    return Observation(
        at=at,
        phase=phase,
        reason=str(kw.get("reason", "")),
        attempt=int(kw.get("attempt", 1)),  # type: ignore[call-overload]
        pod_uid=pod_uid,
        pod=pod_uid,
        condition_reasons=tuple(kw.get("conditions", ())),  # type: ignore[arg-type]
    )


def ok(run: str, sent: float, answered: float, pod_uid: str) -> InvokeRecord:
    return InvokeRecord(run, sent, answered, 200, pod_uid=pod_uid, pod=pod_uid)


HISTORY = {
    "fn": [
        obs(0.0, "A"),
        obs(5.0, "", phase="Pending", reason="PodLost", attempt=2),
        obs(6.0, "B", attempt=2),
    ]
}


def test_an_answer_from_the_owner_before_the_move_is_fine() -> None:
    assert fenced_answers([ok("fn", 1.0, 1.1, "A"), ok("fn", 4.9, 5.2, "A")], HISTORY) == []


def test_an_answer_from_the_new_owner_is_fine() -> None:
    assert fenced_answers([ok("fn", 6.5, 6.6, "B")], HISTORY) == []


def test_an_answer_from_the_old_owner_after_the_move_is_a_violation() -> None:
    found = fenced_answers([ok("fn", 7.0, 7.1, "A")], HISTORY)
    assert len(found) == 1
    assert "answered by Pod A" in found[0]


def test_an_old_owner_assigned_again_may_answer() -> None:
    history = {"fn": [*HISTORY["fn"], obs(9.0, "", phase="Pending"), obs(10.0, "A", attempt=3)]}
    assert fenced_answers([ok("fn", 9.5, 10.5, "A")], history) == []
    assert len(fenced_answers([ok("fn", 9.5, 9.9, "A")], history)) == 1


def test_a_200_without_an_owner_is_a_violation() -> None:
    record = InvokeRecord("fn", 1.0, 1.1, 200, body="{}")
    assert len(fenced_answers([record], HISTORY)) == 1


def test_only_documented_statuses_pass() -> None:
    records = [InvokeRecord("fn", 0, 0, code) for code in (200, 401, 503, 504, 429, 502, 418)]
    records.append(InvokeRecord("fn", 0, 0, 0, error="ConnectError"))
    # 502: InvocationInterrupted (docs/gateway.md), an invocation cut off after dispatch
    assert undocumented_statuses(records) == Counter({418: 1})
    assert status_counts(records)["transport:ConnectError"] == 1


def test_a_second_execution_needs_a_lost_first_one() -> None:
    history = {
        "retried": [obs(0, "A", "Running"), obs(1, "", "Pending", reason="PodLost", attempt=2)],
        "dup": [obs(0, "A", "Running"), obs(1, "A", "Succeeded")],
        "killed": [obs(0, "A", "Running"), obs(1, "A", "Succeeded")],
        "late": [obs(0, "A", "Running"), obs(1, "A", "Succeeded")],
    }
    ran = {
        "retried": [Execution("A", 10.0), Execution("B", 12.0)],
        "dup": [Execution("B", 10.0), Execution("B", 12.0)],  # B lost nothing
        "killed": [Execution("A", 10.0), Execution("A", 12.0)],  # A's server killed at 11
        "late": [Execution("A", 11.5), Execution("A", 12.0)],  # started after the kill
        "once": [Execution("A", 10.0)],
    }
    found = {d.run: d for d in duplicate_executions(ran, history, [Loss("A", 11.0)])}
    assert sorted(found) == ["dup", "killed", "late", "retried"]
    assert found["retried"] == Duplicate("retried", 2, 2, ("PodLost",), 1)
    assert found["retried"].justified
    assert not found["retried"].unrecorded
    assert found["killed"].justified
    assert found["killed"].unrecorded
    assert not found["dup"].justified
    assert not found["late"].justified
    assert not Duplicate("x", 3, 2, ("PodLost",), 1).justified


def test_stuck_runs_are_non_terminal_tasks_and_non_ready_functions() -> None:
    latest = {
        "t1": obs(0, "A", "Succeeded"),
        "t2": obs(0, "A", "Running"),
        "f1": obs(0, "A", "Ready"),
        "f2": obs(0, "", "Pending"),
        "t3": None,
    }
    kinds = {"t1": "task", "t2": "task", "t3": "task", "f1": "function", "f2": "function"}
    stuck = stuck_runs(latest, kinds)
    assert [s.split()[1] for s in stuck] == ["f2", "t2", "t3"]


def test_recovery_is_the_first_success_after_the_last_failure() -> None:
    records = [
        ok("a", 9.0, 9.1, "A"),  # before the fault: ignored
        InvokeRecord("a", 10.5, 10.6, 503),
        ok("a", 11.0, 11.2, "A"),
        InvokeRecord("a", 12.0, 12.1, 0, error="ConnectError"),
        ok("a", 13.0, 13.5, "B"),
        ok("b", 10.2, 10.3, "A"),
        InvokeRecord("c", 10.2, 10.3, 503),
    ]
    times = recovery_times(records, ["a", "b", "c"], 10.0)
    assert times == {"a": 3.5, "b": 0.0, "c": None}


def test_observe_reads_the_run_status() -> None:
    seen = observe(
        {
            "status": {
                "phase": "Ready",
                "attempt": 2,
                "assignedPodUID": "u",
                "assignedPod": "p",
                "reason": "FunctionRegistered",
                "conditions": [{"type": "Ready", "reason": "FunctionRegistered"}],
            }
        },
        3.0,
    )
    assert (seen.phase, seen.attempt, seen.pod_uid, seen.pod) == ("Ready", 2, "u", "p")
    assert seen.condition_reasons == ("FunctionRegistered",)


def test_only_silent_requests_count_as_unanswered() -> None:
    records = [
        InvokeRecord("fn", 0, 8, 0, error="timeout"),
        InvokeRecord("fn", 0, 0.1, 0, error="ConnectError"),
        InvokeRecord("fn", 0, 5.5, 504),
    ]
    assert unanswered(records) == records[:1]


def test_longest_pending_is_the_slowest_placement() -> None:
    history = {
        "a": [obs(1.0, "", "Pending"), obs(1.5, "A", "Scheduled")],
        "b": [obs(2.0, "", ""), obs(2.2, "", "Pending"), obs(6.0, "A", "Running")],
        "c": [obs(3.0, "", "Pending")],  # never placed: not counted
    }
    assert longest_pending(history, ["a", "b", "c"]) == 4.0
