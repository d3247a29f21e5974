"""RunsQuiet: the control plane's Events wait until its Runs have been quiet a moment."""

from __future__ import annotations

import pytest
import trio

from krt.controlplane.quiet_runs import QUIET_SECONDS, RunsQuiet
from krt.kube.clock import TrioLinkedClock
from krt.kube.informer import EventType, InformerEvent
from krt.kube.resources import EVENTS, RUNTIMES

from .builders import NOW, runtime_dict
from .fakekube import FakeKube
from .test_loops import add_pod, add_run, plane, until

RUN = {"metadata": {"name": "r", "namespace": "demo"}}


async def _opened_after(gate: RunsQuiet) -> float:
    start = trio.current_time()
    await gate.wait_open()
    return trio.current_time() - start


async def test_open_at_once_when_nothing_happened(autojump_clock: trio.abc.Clock) -> None:
    assert await _opened_after(RunsQuiet()) == 0


async def test_each_run_event_moves_the_opening_and_resyncs_do_not(
    autojump_clock: trio.abc.Clock,
) -> None:
    gate = RunsQuiet()
    opened_after: list[float] = []

    async def waiter() -> None:
        opened_after.append(await _opened_after(gate))

    async with trio.open_nursery() as nursery:
        gate.on_run(InformerEvent(EventType.ADDED, RUN))
        nursery.start_soon(waiter)
        await trio.sleep(0.03)
        gate.on_run(InformerEvent(EventType.MODIFIED, RUN))  # opens 0.05 s from now
        await trio.sleep(0.03)
        gate.on_run(InformerEvent(EventType.RESYNC, RUN))  # not a change
    assert opened_after == [pytest.approx(0.03 + QUIET_SECONDS)]
    assert await _opened_after(gate) == 0


def test_bad_quiet_period_is_rejected() -> None:
    with pytest.raises(ValueError, match="quiet_seconds"):
        RunsQuiet(quiet_seconds=-0.1)


async def test_a_burst_binds_before_its_scheduled_events_are_written_and_none_is_lost(
    autojump_clock: trio.abc.Clock,
) -> None:
    clock = TrioLinkedClock(epoch=NOW)
    fake = FakeKube(clock)
    await fake.create(RUNTIMES, runtime_dict(runs=32))
    await add_pod(fake, "p-a")
    async with plane(fake, clock, resync_seconds=3600) as running:
        start = len(fake.writes)
        for index in range(30):
            await add_run(fake, f"r-{index:02d}")
        await until(lambda: running.recorder.created == 30)
        writes = [(verb, plural) for verb, plural, _ in fake.writes[start:]]
        last_bind = max(i for i, write in enumerate(writes) if write == ("replace_status", "runs"))
        first_event = min(i for i, write in enumerate(writes) if write[1] == EVENTS.plural)
        assert first_event > last_bind
        assert running.scheduler.bound == 30
        assert running.recorder.dropped == 0
