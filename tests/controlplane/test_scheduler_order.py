"""First come, first bound: the scheduler binds Pending Runs in the order they were created.

Issue 6 asks for FIFO-friendly scheduling under a burst: the earliest created Pending Run is
bound first, both when a burst arrives (binds leave in decision order through a FIFO of
writers, not in the order trio happens to start tasks) and when capacity is released (the
Runtime's Pending Runs are queued by creation time, then by arrival, never by name:
``creationTimestamp`` has whole seconds only).
"""

from __future__ import annotations

import functools

import pytest
import trio

from krt.api.times import format_time
from krt.controlplane.fifo_writers import FifoWriters
from krt.kube.clock import TrioLinkedClock
from krt.kube.errors import ServerError
from krt.kube.resources import RUNS, RUNTIMES, ResourceRef

from .builders import runtime_dict
from .fakekube import FakeKube
from .test_loops import add_pod, add_run, phase, plane, set_status, until


def _bind_order(fake: FakeKube) -> list[str]:
    return [
        name for verb, plural, name in fake.writes if (verb, plural) == ("replace_status", "runs")
    ]


async def test_a_burst_is_bound_in_creation_order_within_capacity(
    fake: FakeKube, clock: TrioLinkedClock, autojump_clock: trio.abc.Clock
) -> None:
    await fake.create(RUNTIMES, runtime_dict(runs=12))
    await add_pod(fake, "p-a")
    await add_pod(fake, "p-b")
    names = [f"r-{index:02d}-{chr(ord('z') - index)}" for index in range(40)]

    async def slow(verb: str, ref: ResourceRef, subject: object) -> None:
        if verb == "replace_status":
            await trio.sleep(0.01)  # binds overlap, as over a network

    fake.before_write = slow
    async with plane(fake, clock, resync_seconds=3600) as running:
        for name in names:
            await add_run(fake, name)
        await until(lambda: running.scheduler.bound == 24)
        await trio.sleep(1)
        assert running.scheduler.bound == 24  # 2 Pods x 12: never more
        assert _bind_order(fake)[:24] == names[:24]
        pending = [name for name in names if phase(fake, name) == "Pending"]
        assert pending == names[24:]


async def test_released_capacity_goes_to_the_earliest_created_run_not_the_first_name(
    fake: FakeKube, clock: TrioLinkedClock, autojump_clock: trio.abc.Clock
) -> None:
    await fake.create(RUNTIMES, runtime_dict(runs=1))
    await add_pod(fake, "p-a")
    async with plane(fake, clock, resync_seconds=3600) as running:
        # created in this order within one second: names sort the other way round
        for name in ("r-c", "r-b", "r-a"):
            await add_run(fake, name)
        await until(lambda: running.scheduler.bound == 1)
        await trio.sleep(1)
        assert phase(fake, "r-c") == "Scheduled"
        for done, expected_next in (("r-c", "r-b"), ("r-b", "r-a")):
            await set_status(
                fake, RUNS, done, {"phase": "Succeeded", "completionTime": format_time(clock.now())}
            )
            await until(lambda name=expected_next: phase(fake, name) == "Scheduled")  # type: ignore[misc]
            await trio.sleep(1)
            assert [n for n in ("r-a", "r-b", "r-c") if phase(fake, n) == "Scheduled"] == [
                expected_next
            ]
        assert running.scheduler.bound == 3


async def test_fifo_writers_start_jobs_in_order_and_bound_concurrency(
    autojump_clock: trio.abc.Clock,
) -> None:
    writers = FifoWriters(3)
    started: list[int] = []
    running = 0
    most = 0

    async def job(number: int) -> None:
        nonlocal running, most
        started.append(number)
        running += 1
        most = max(most, running)
        await trio.sleep(0.01 * (number % 4))  # finishing out of order
        running -= 1

    async with trio.open_nursery() as nursery:
        await nursery.start(writers.run)
        for number in range(30):
            writers.submit(functools.partial(job, number))
        await trio.sleep(1)
        assert started == list(range(30))
        assert most == 3
        assert len(writers) == 0
        nursery.cancel_scope.cancel()
    with pytest.raises(ValueError, match="at least 1"):
        FifoWriters(0)


async def test_a_failed_bind_releases_its_assumed_capacity_at_once(
    fake: FakeKube, clock: TrioLinkedClock, autojump_clock: trio.abc.Clock
) -> None:
    """The retry after a 5xx binds straight away: the failed bind no longer counts."""
    await fake.create(RUNTIMES, runtime_dict(runs=1))
    await add_pod(fake, "p-a")
    failed = False

    async def fail_once(verb: str, ref: ResourceRef, subject: object) -> None:
        nonlocal failed
        if (verb, ref.plural) == ("replace_status", "runs") and not failed:
            failed = True
            raise ServerError(500, "InternalError", "etcd hiccup")

    fake.before_write = fail_once
    async with plane(fake, clock, resync_seconds=3600) as running:
        await add_run(fake, "r1")
        await until(lambda: phase(fake, "r1") == "Scheduled")
        assert failed
        assert _bind_order(fake) == ["r1", "r1"]  # no FailedScheduling write in between
        pod_uid = (fake.peek(RUNS, "demo", "r1") or {})["status"]["assignedPodUID"]
        assert running.scheduler.ledger.usage("demo/python") == {pod_uid: {"runs": 1}}
