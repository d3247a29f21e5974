"""Phase classification (seed 000, Run Status API): Ready is active and non-terminal in every
generic use: capacity accounting, stale-Run reaper, completed-Run GC, cancellation, CLI waits."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from krt.api.phases import (
    ACTIVE_PHASES,
    TERMINAL_PHASES,
    TRANSITIONS,
    Phase,
    PhaseClass,
    WaitTarget,
    can_transition,
    gc_deadline,
    holds_capacity,
    is_active,
    is_cancellable,
    is_gc_eligible,
    is_terminal,
    needs_stale_recovery_check,
    phase_class,
    phase_of,
    wait_finished,
)
from krt.api.resources import fits, run_requests, runtime_capacity, total_usage

P = Phase
NOW = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)

# The expected classification of every phase, written out (not derived from the module).
TABLE = {
    #            terminal active capacity reaper cancellable gc
    P.PENDING:   (False, False, False, False, True, False),
    P.SCHEDULED: (False, True, True, True, True, False),
    P.RUNNING:   (False, True, True, True, True, False),
    P.READY:     (False, True, True, True, True, False),
    P.SUCCEEDED: (True, False, False, False, False, True),
    P.FAILED:    (True, False, False, False, False, True),
    P.TIMEOUT:   (True, False, False, False, False, True),
    P.CANCELLED: (True, False, False, False, False, True),
}  # fmt: skip


def test_the_table_covers_every_phase() -> None:
    assert set(TABLE) == set(Phase)
    assert [p.value for p in Phase] == [
        "Pending", "Scheduled", "Running", "Ready", "Succeeded", "Failed", "Timeout", "Cancelled",
    ]  # fmt: skip


@pytest.mark.parametrize("phase", list(Phase))
def test_phase_classification(phase: Phase) -> None:
    terminal, active, capacity, reaper, cancellable, gc = TABLE[phase]
    assert is_terminal(phase) is terminal
    assert is_active(phase) is active
    assert holds_capacity(phase) is capacity
    assert needs_stale_recovery_check(phase) is reaper
    assert is_cancellable(phase) is cancellable
    assert is_gc_eligible(phase) is gc


def test_ready_is_active_and_not_terminal() -> None:
    assert is_active(P.READY)
    assert not is_terminal(P.READY)
    assert P.READY in ACTIVE_PHASES
    assert P.READY not in TERMINAL_PHASES
    assert TERMINAL_PHASES == {P.SUCCEEDED, P.FAILED, P.TIMEOUT, P.CANCELLED}


def test_capacity_accounting_counts_ready_runs() -> None:
    """Two Ready function Runs fill a Pod of capacity runs: 2; a third does not fit."""
    capacity = runtime_capacity(None)
    phases = [P.READY, P.READY, P.SUCCEEDED, P.PENDING, P.FAILED]
    used = total_usage(run_requests(None) for p in phases if holds_capacity(p))
    assert used == {"runs": 2}
    assert not fits(run_requests(None), used, capacity)
    freed = total_usage(run_requests(None) for p in [P.READY, P.TIMEOUT] if holds_capacity(p))
    assert fits(run_requests(None), freed, capacity)


def test_gc_never_deletes_a_ready_run() -> None:
    long_ago = NOW - timedelta(days=30)
    assert gc_deadline(P.READY, completion_time=long_ago, ttl_seconds_after_finished=0) is None
    assert gc_deadline(P.RUNNING, completion_time=long_ago, ttl_seconds_after_finished=0) is None
    assert gc_deadline(P.SUCCEEDED, completion_time=NOW, ttl_seconds_after_finished=60) == (
        NOW + timedelta(seconds=60)
    )
    assert gc_deadline(P.FAILED, completion_time=NOW, ttl_seconds_after_finished=None) is None
    assert gc_deadline(P.CANCELLED, completion_time=None, ttl_seconds_after_finished=5) is None


def test_reaper_checks_ready_runs() -> None:
    assert needs_stale_recovery_check(P.READY)
    assert not needs_stale_recovery_check(P.PENDING)


def test_cli_wait_for_completion_does_not_stop_at_ready() -> None:
    assert not wait_finished(P.READY, WaitTarget.COMPLETION)
    assert wait_finished(P.READY, WaitTarget.READY)
    for phase in TERMINAL_PHASES:
        assert wait_finished(phase, WaitTarget.COMPLETION)
        assert wait_finished(phase, WaitTarget.READY)  # it will never become Ready
    for phase in (P.PENDING, P.SCHEDULED, P.RUNNING):
        assert not wait_finished(phase, WaitTarget.COMPLETION)
        assert not wait_finished(phase, WaitTarget.READY)


def test_metrics_classify_ready_as_active() -> None:
    assert phase_class(P.READY) is PhaseClass.ACTIVE
    assert {phase_class(p) for p in TERMINAL_PHASES} == {PhaseClass.TERMINAL}
    assert phase_class(P.PENDING) is PhaseClass.PENDING
    for phase in Phase:
        assert (phase_class(phase) is PhaseClass.ACTIVE) is TABLE[phase][1]


def test_cancellation_applies_to_ready_runs() -> None:
    assert is_cancellable(P.READY)


def test_phase_of() -> None:
    assert phase_of(None) is P.PENDING
    assert phase_of("") is P.PENDING
    assert phase_of("Ready") is P.READY
    with pytest.raises(ValueError, match=r"status.phase: unknown phase 'Done'"):
        phase_of("Done")


EXPECTED_TRANSITIONS = {
    (P.PENDING, P.SCHEDULED), (P.PENDING, P.CANCELLED),
    (P.SCHEDULED, P.RUNNING), (P.SCHEDULED, P.PENDING),
    (P.RUNNING, P.READY), (P.RUNNING, P.PENDING),
    (P.READY, P.RUNNING), (P.READY, P.PENDING),
} | {(a, t) for a in (P.SCHEDULED, P.RUNNING, P.READY) for t in TERMINAL_PHASES}  # fmt: skip


@pytest.mark.parametrize("old", list(Phase))
@pytest.mark.parametrize("new", list(Phase))
def test_transitions(old: Phase, new: Phase) -> None:
    assert can_transition(old, new) is (old == new or (old, new) in EXPECTED_TRANSITIONS)


def test_terminal_phases_have_no_way_out() -> None:
    for phase in TERMINAL_PHASES:
        assert TRANSITIONS[phase] == frozenset()
