"""The start window's bookkeeping (runtimed.start_window), synchronously."""

from __future__ import annotations

import pytest

from runtimed.start_window import StartWindow


def window(size: int) -> tuple[StartWindow, list[str]]:
    woken: list[str] = []
    return StartWindow(size, woken.append), woken


def test_at_most_size_runs_hold_a_place() -> None:
    w, _ = window(2)
    assert w.try_enter("ns/a", "a")
    assert w.try_enter("ns/b", "b")
    assert not w.try_enter("ns/c", "c")
    assert w.holders == 2
    assert w.parked == ["ns/c"]
    assert w.try_enter("ns/a", "a")  # a holder asking again keeps its place


def test_a_freed_place_goes_to_the_oldest_parked_run() -> None:
    w, woken = window(1)
    assert w.try_enter("ns/a", "a")
    assert not w.try_enter("ns/b", "b")
    assert not w.try_enter("ns/c", "c")
    woken.clear()
    w.leave("a")
    assert woken == ["ns/b"]
    assert not w.try_enter("ns/c", "c")  # not c's turn: b is older
    assert w.try_enter("ns/b", "b")
    assert w.parked == ["ns/c"]
    w.leave("b")
    assert w.try_enter("ns/c", "c")
    assert w.parked == []


def test_leave_without_a_place_changes_nothing() -> None:
    w, woken = window(1)
    w.leave("nobody")
    assert woken == []
    assert w.holders == 0


def test_a_parked_run_that_stops_asking_leaves_the_line() -> None:
    w, woken = window(1)
    assert w.try_enter("ns/a", "a")
    assert not w.try_enter("ns/b", "b")
    assert not w.try_enter("ns/c", "c")
    for key in ("ns/a", "ns/b", "ns/c"):
        w.settle(key)  # each asked in its reconciliation: all stay
    assert w.parked == ["ns/b", "ns/c"]
    w.leave("a")
    woken.clear()
    w.settle("ns/b")  # b was reconciled (deleted, say) and did not ask
    assert w.parked == ["ns/c"]
    assert woken == ["ns/c"]
    assert w.try_enter("ns/c", "c")


def test_size_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        StartWindow(0, lambda key: None)
