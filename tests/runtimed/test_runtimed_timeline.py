"""The per-Run stage timeline (issue 6: where a task Run's time goes on its Pod)."""

from __future__ import annotations

import pytest

from runtimed.timeline import STAGES, Timeline


def test_differences_follow_the_stage_order_whatever_the_marking_order() -> None:
    timeline = Timeline()
    times = [10.0, 10.1, 10.102, 10.11, 10.115, 10.2, 10.25]
    for stage, at in reversed(list(zip(STAGES, times, strict=True))):
        timeline.mark(stage, at)
    assert timeline.stages_ms() == {
        "seen->claimed": 100.0,
        "claimed->prepared": 2.0,
        "prepared->start": 8.0,
        "start->executed": 5.0,
        "executed->finished": 85.0,
        "finished->completed": 50.0,
    }


def test_the_first_mark_of_a_stage_wins() -> None:
    timeline = Timeline()
    timeline.mark("start", 1.0)
    timeline.mark("start", 5.0)  # a later reconciliation passing the same stage
    timeline.mark("executed", 1.5)
    assert timeline.stages_ms() == {"start->executed": 500.0}


def test_unmarked_stages_are_skipped_not_guessed() -> None:
    timeline = Timeline()
    timeline.mark("seen", 1.0)
    timeline.mark("completed", 1.3)  # e.g. cancelled before anything ran
    assert timeline.stages_ms() == {"seen->completed": 300.0}
    assert Timeline().stages_ms() == {}


def test_a_clock_step_backwards_is_clamped_to_zero() -> None:
    timeline = Timeline()
    timeline.mark("finished", 2.0)
    timeline.mark("completed", 1.5)
    assert timeline.stages_ms() == {"finished->completed": 0.0}


def test_a_new_attempt_keeps_seen_and_claimed_only() -> None:
    timeline = Timeline()
    for index, stage in enumerate(STAGES):
        timeline.mark(stage, float(index))
    timeline.restart_attempt()
    assert set(timeline.marks) == {"seen", "claimed"}
    timeline.mark("start", 10.0)
    assert timeline.stages_ms() == {"seen->claimed": 1000.0, "claimed->start": 9000.0}


def test_an_unknown_stage_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="'claim'"):
        Timeline().mark("claim", 1.0)
