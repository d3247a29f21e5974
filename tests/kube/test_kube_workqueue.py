"""WorkQueue: dedup, per-key serialisation, parallelism across keys, delays, retry backoff.

All on pytest-trio's autojump_clock: elapsed times are virtual and exact.
"""

from __future__ import annotations

import functools

import pytest
import trio
import trio.testing

from krt.kube.workqueue import Requeue, WorkQueue


async def _run_for(queue: WorkQueue[str], reconcile, seconds: float, *, workers: int = 2) -> None:  # type: ignore[no-untyped-def]
    with trio.move_on_after(seconds):
        await queue.run(reconcile, workers=workers)


async def test_pending_key_is_deduplicated(autojump_clock: trio.testing.MockClock) -> None:
    calls: list[str] = []

    async def reconcile(key: str) -> None:
        calls.append(key)

    queue: WorkQueue[str] = WorkQueue()
    for _ in range(3):
        queue.add("a")
    queue.add("b")
    assert len(queue) == 2
    await _run_for(queue, reconcile, 10)
    assert sorted(calls) == ["a", "b"]
    assert queue.done == 2


async def test_same_key_never_runs_twice_at_once_but_is_rerun(
    autojump_clock: trio.testing.MockClock,
) -> None:
    active: set[str] = set()
    starts: list[tuple[str, float]] = []
    overlaps: list[str] = []
    queue: WorkQueue[str] = WorkQueue()

    async def reconcile(key: str) -> None:
        if key in active:
            overlaps.append(key)
        active.add(key)
        starts.append((key, trio.current_time()))
        if len(starts) == 1:
            queue.add("a")  # re-added while running: must wait, then run once more
            queue.add("a")
        await trio.sleep(1)
        active.discard(key)

    queue.add("a")
    await _run_for(queue, reconcile, 10, workers=4)
    assert overlaps == []
    assert starts == [("a", 0.0), ("a", 1.0)]


async def test_different_keys_run_in_parallel(autojump_clock: trio.testing.MockClock) -> None:
    finished: dict[str, float] = {}

    async def reconcile(key: str) -> None:
        await trio.sleep(1)
        finished[key] = trio.current_time()

    queue: WorkQueue[str] = WorkQueue()
    for key in "abc":
        queue.add(key)
    await _run_for(queue, reconcile, 10, workers=3)
    assert finished == {"a": 1.0, "b": 1.0, "c": 1.0}


async def test_workers_bound_parallelism(autojump_clock: trio.testing.MockClock) -> None:
    finished: list[float] = []

    async def reconcile(key: str) -> None:
        await trio.sleep(1)
        finished.append(trio.current_time())

    queue: WorkQueue[str] = WorkQueue()
    for key in "abcd":
        queue.add(key)
    await _run_for(queue, reconcile, 10, workers=2)
    assert finished == [1.0, 1.0, 2.0, 2.0]


async def test_add_after_delays_and_earliest_wins(autojump_clock: trio.testing.MockClock) -> None:
    seen: list[tuple[str, float]] = []

    async def reconcile(key: str) -> None:
        seen.append((key, trio.current_time()))

    queue: WorkQueue[str] = WorkQueue()
    queue.add_after("late", 5)
    queue.add_after("x", 7)
    queue.add_after("x", 3)  # earlier request wins
    queue.add_after("x", 9)  # later request does not postpone
    queue.add_after("now", 0)
    await _run_for(queue, reconcile, 20)
    assert seen == [("now", 0.0), ("x", 3.0), ("late", 5.0)]


async def test_add_wakes_a_delayed_key_at_once(autojump_clock: trio.testing.MockClock) -> None:
    seen: list[float] = []

    async def reconcile(key: str) -> None:
        seen.append(trio.current_time())

    queue: WorkQueue[str] = WorkQueue()
    async with trio.open_nursery() as nursery:
        await nursery.start(functools.partial(queue.run, reconcile, workers=1))
        queue.add_after("k", 100)
        await trio.sleep(2)
        queue.add("k")
        await trio.sleep(200)
        nursery.cancel_scope.cancel()
    # the add ran it at t=2; the timer still fires at t=100 (a later duplicate is harmless)
    assert seen[0] == 2.0
    assert all(t in (2.0, 100.0) for t in seen)


async def test_add_after_rejects_nan() -> None:
    queue: WorkQueue[str] = WorkQueue()
    with pytest.raises(ValueError, match="NaN"):
        queue.add_after("k", float("nan"))


async def test_failures_retry_with_growing_backoff_then_reset(
    autojump_clock: trio.testing.MockClock,
) -> None:
    calls: list[float] = []

    async def reconcile(key: str) -> None:
        calls.append(trio.current_time())
        if len(calls) <= 4:
            raise RuntimeError("boom")

    queue: WorkQueue[str] = WorkQueue(base_delay=1.0, max_delay=100.0)
    queue.add("k")
    await _run_for(queue, reconcile, 100)
    assert len(calls) == 5
    gaps = [b - a for a, b in zip(calls, calls[1:], strict=False)]
    # delay n is drawn from [2**n / 2, 2**n] seconds (jittered)
    for n, gap in enumerate(gaps):
        assert 2**n / 2 <= gap <= 2**n + 1e-9, (n, gaps)
    assert queue.failed == 4
    assert queue.failures("k") == 0  # the success reset the backoff


async def test_failure_backoff_is_capped(autojump_clock: trio.testing.MockClock) -> None:
    calls: list[float] = []

    async def reconcile(key: str) -> None:
        calls.append(trio.current_time())
        raise RuntimeError("always")

    queue: WorkQueue[str] = WorkQueue(base_delay=1.0, max_delay=4.0)
    queue.add("k")
    await _run_for(queue, reconcile, 60)
    gaps = [b - a for a, b in zip(calls, calls[1:], strict=False)]
    assert max(gaps) <= 4.0 + 1e-9
    assert queue.failures("k") == len(calls)


async def test_requeue_after_and_requeue_with_backoff(
    autojump_clock: trio.testing.MockClock,
) -> None:
    calls: list[float] = []

    async def reconcile(key: str) -> Requeue | None:
        calls.append(trio.current_time())
        if len(calls) == 1:
            return Requeue(after=2.5)
        if len(calls) == 2:
            return Requeue()
        return None

    queue: WorkQueue[str] = WorkQueue(base_delay=1.0)
    queue.add("k")
    await _run_for(queue, reconcile, 30)
    assert calls[:2] == [0.0, 2.5]
    assert len(calls) == 3
    assert 0.5 <= calls[2] - calls[1] <= 1.0
    assert queue.failed == 0


async def test_cancellation_propagates_out_of_reconcile(
    autojump_clock: trio.testing.MockClock,
) -> None:
    entered = trio.Event()

    async def reconcile(key: str) -> None:
        entered.set()
        await trio.sleep_forever()

    queue: WorkQueue[str] = WorkQueue()
    queue.add("k")
    with trio.move_on_after(5) as scope:
        async with trio.open_nursery() as nursery:
            await nursery.start(functools.partial(queue.run, reconcile, workers=1))
    assert scope.cancelled_caught
    assert entered.is_set()
    assert queue.failed == 0  # Cancelled is not a reconcile failure


async def test_idle_queue_sleeps_so_virtual_time_can_jump(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def reconcile(key: str) -> None:
        raise AssertionError("nothing was queued")

    start = trio.current_time()
    await _run_for(WorkQueue[str](), reconcile, 3600)
    assert trio.current_time() - start == 3600


async def test_workers_must_be_positive() -> None:
    async def reconcile(key: str) -> None:
        return None

    with pytest.raises(ValueError, match="workers must be at least 1"):
        await WorkQueue[str]().run(reconcile, workers=0)


def test_invalid_delays_rejected() -> None:
    with pytest.raises(ValueError, match="below base"):
        WorkQueue(base_delay=5.0, max_delay=1.0)
