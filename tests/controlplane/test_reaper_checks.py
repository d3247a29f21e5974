"""The reaper decides in its handlers: a Run on a live Pod costs no trip through its queue."""

from __future__ import annotations

import trio

from krt.kube.clock import TrioLinkedClock
from krt.kube.resources import PODS, RUNS, RUNTIMES

from .builders import runtime_dict
from .fakekube import FakeKube
from .test_loops import NS, add_pod, add_run, beat, phase, plane, set_status, until


async def test_live_assignments_are_not_queued_and_a_lost_pod_still_is(
    fake: FakeKube, clock: TrioLinkedClock, autojump_clock: trio.abc.Clock
) -> None:
    await fake.create(RUNTIMES, runtime_dict(runs=4))
    pod = await add_pod(fake, "p-a")
    async with plane(fake, clock, resync_seconds=3600) as running:
        reaper = running.reaper
        for name in ("r1", "r2"):
            await add_run(fake, name, max_attempts=2)
        await until(lambda: running.scheduler.bound == 2)
        await set_status(fake, RUNS, "r1", {"phase": "Running"})  # runtimed's claim
        await beat(fake, pod)  # a heartbeat renewal wakes every Run on the Pod
        await trio.sleep(1)
        assert reaper.queue.done == 0
        assert len(reaper.queue) == 0
        await add_pod(fake, "p-b")
        await fake.delete(PODS, "p-a", NS)
        await until(lambda: reaper.queue.done >= 2)
        await until(
            lambda: all(
                (fake.peek(RUNS, NS, name) or {})["status"].get("attempt") == 2
                for name in ("r1", "r2")
            )
        )
        assert {phase(fake, name) for name in ("r1", "r2")} <= {"Pending", "Scheduled"}
