"""Released capacity wakes the Pending Runs that can use it, oldest first, at O(1) cost.

Issue 5 ("when capacity is released, Pending Runs of that Runtime are woken at once") and
issue 6 (CPU per Run independent of the number of Runs): a release used to queue and decide
every Pending Run of the Runtime. These tests pin what must not change (the oldest Pending
Run that fits is bound, across request shapes; messages of Runs left Pending are rewritten
when what they say changed) and what must (a release decides a few Runs, not all of them).
"""

from __future__ import annotations

from typing import Any

import pytest
import trio

from krt.api.times import format_time
from krt.controlplane import scheduler_loop
from krt.kube.clock import TrioLinkedClock
from krt.kube.errors import ServerError
from krt.kube.resources import PODS, RUNS, RUNTIMES, ResourceRef

from .builders import runtime_dict
from .fakekube import FakeKube
from .test_loops import NS, add_pod, add_run, phase, plane, set_status, until


@pytest.fixture
def decided(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Names of the Runs the scheduler decides on, in order."""
    names: list[str] = []
    real = scheduler_loop.decide_schedule

    def counting(run: Any, **kwargs: Any) -> Any:
        names.append(run.metadata.name)
        return real(run, **kwargs)

    monkeypatch.setattr(scheduler_loop, "decide_schedule", counting)
    return names


async def _finish(fake: FakeKube, clock: TrioLinkedClock, name: str) -> None:
    await set_status(
        fake, RUNS, name, {"phase": "Succeeded", "completionTime": format_time(clock.now())}
    )


def _message(fake: FakeKube, name: str) -> str:
    stored = fake.peek(RUNS, NS, name) or {}
    return str((stored.get("status") or {}).get("message", ""))


async def test_a_release_decides_the_runs_that_fit_not_every_pending_run(
    fake: FakeKube,
    clock: TrioLinkedClock,
    decided: list[str],
    autojump_clock: trio.abc.Clock,
) -> None:
    await fake.create(RUNTIMES, runtime_dict(runs=2))
    await add_pod(fake, "p-a")
    async with plane(fake, clock, resync_seconds=3600) as running:
        names = [f"r-{index:03d}" for index in range(62)]
        for name in names:
            await add_run(fake, name)
        await until(lambda: running.scheduler.bound == 2)
        await trio.sleep(1)
        assert len(running.scheduler.parked) == 60
        for done, expected in ((names[0], names[2]), (names[1], names[3])):
            decided.clear()
            await _finish(fake, clock, done)
            await until(lambda name=expected: phase(fake, name) == "Scheduled")  # type: ignore[misc]
            await trio.sleep(1)
            # the oldest parked Run binds; the next one shows the Pod is full again: two
            # decisions, where queueing every Pending Run made 60
            assert decided == [expected, names[names.index(expected) + 1]]
        # two Runs finish back to back: both slots go, oldest first
        decided.clear()
        await _finish(fake, clock, names[2])
        await _finish(fake, clock, names[3])
        await until(lambda: running.scheduler.bound == 6)
        await trio.sleep(1)
        assert [n for n in names if phase(fake, n) == "Scheduled"] == names[4:6]
        assert sorted(set(decided)) == names[4:7]
        assert len(decided) <= 4
        assert len(running.scheduler.parked) == 56


async def test_a_release_keeps_creation_order_across_request_shapes(
    fake: FakeKube, clock: TrioLinkedClock, autojump_clock: trio.abc.Clock
) -> None:
    """As when every Pending Run was queued: oldest first, a younger Run may use what is left."""
    await fake.create(RUNTIMES, runtime_dict(runs=4))
    await add_pod(fake, "p-a")
    async with plane(fake, clock, resync_seconds=3600) as running:
        await add_run(fake, "hold-3", requests={"runs": 3})
        await add_run(fake, "hold-1")
        await until(lambda: running.scheduler.bound == 2)
        for name, runs in (("big", 2), ("small-1", 1), ("huge", 4), ("small-2", 1)):
            await add_run(fake, name, requests={"runs": runs})
        await trio.sleep(1)
        assert len(running.scheduler.parked) == 4
        await _finish(fake, clock, "hold-1")  # 1 free: "big" does not fit, "small-1" does
        await until(lambda: phase(fake, "small-1") == "Scheduled")
        await trio.sleep(1)
        assert [n for n in ("big", "huge", "small-2") if phase(fake, n) == "Scheduled"] == []
        await _finish(fake, clock, "hold-3")  # 3 free: "big" (2) first, then "small-2" (1)
        await until(lambda: phase(fake, "big") == "Scheduled")
        await until(lambda: phase(fake, "small-2") == "Scheduled")
        await trio.sleep(1)
        assert phase(fake, "huge") == "Pending"
        assert running.scheduler.bound == 5


async def test_runs_left_pending_are_told_when_their_reason_changed(
    fake: FakeKube, clock: TrioLinkedClock, autojump_clock: trio.abc.Clock
) -> None:
    """A Pod stops being schedulable (no wake-up); the next release rewrites every message.

    The Runtime's own status write (``readyReplicas``) would wake every Pending Run of the
    Runtime; it is refused here, so only the release is left to notice.
    """
    await fake.create(RUNTIMES, runtime_dict(runs=1))
    await add_pod(fake, "p-a")
    await add_pod(fake, "p-b")

    async def no_runtime_status(verb: str, ref: ResourceRef, subject: object) -> None:
        if (verb, ref.plural) == ("replace_status", "runtimes"):
            raise ServerError(500, "InternalError", "refused by the test")

    async with plane(fake, clock, resync_seconds=3600) as running:
        names = [f"r-{index}" for index in range(6)]
        for name in names:
            await add_run(fake, name)
        await until(lambda: running.scheduler.bound == 2)
        await trio.sleep(1)
        assert all("(2 ready" in _message(fake, name) for name in names[2:])
        pod_b = fake.peek(PODS, NS, "p-b")
        assert pod_b is not None
        fake.before_write = no_runtime_status
        await fake.replace_status(
            PODS, {**pod_b, "status": {"conditions": [{"type": "Ready", "status": "False"}]}}
        )
        await trio.sleep(1)
        on_a = next(
            name
            for name in names[:2]
            if (fake.peek(RUNS, NS, name) or {})["status"]["assignedPod"] == "p-a"
        )
        await _finish(fake, clock, on_a)
        await until(lambda: phase(fake, "r-2") == "Scheduled")
        await until(lambda: all("(1 ready" in _message(fake, name) for name in names[3:]))
        assert running.scheduler.bound == 3


async def test_a_release_with_nothing_parked_costs_no_scheduling_cycle(
    fake: FakeKube, clock: TrioLinkedClock, autojump_clock: trio.abc.Clock
) -> None:
    await fake.create(RUNTIMES, runtime_dict(runs=4))
    await add_pod(fake, "p-a")
    async with plane(fake, clock, resync_seconds=3600) as running:
        for name in ("r1", "r2"):
            await add_run(fake, name)
        await until(lambda: running.scheduler.bound == 2)
        await trio.sleep(1)
        cycles = running.scheduler.queue.done
        await _finish(fake, clock, "r1")
        await trio.sleep(1)
        assert running.scheduler.queue.done == cycles
        await add_run(fake, "r3")  # the released slot is there for the next Run
        await until(lambda: phase(fake, "r3") == "Scheduled")
