"""EventRecorder with a WriteGate: Events wait for the gate, never past their bound, none lost."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from krt.kube.clock import TrioLinkedClock, format_time
from krt.kube.events import MAX_DELAY_SECONDS, EventRecorder


def involved(name: str = "r1") -> dict[str, Any]:
    return {
        "apiVersion": "kruntimes.io/v1alpha1",
        "kind": "Run",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
    }


class Recording:
    """Creates succeed at once; each body is kept with the trio time it was written."""

    def __init__(self) -> None:
        self.created: list[tuple[float, dict[str, Any]]] = []

    async def create(self, ref: object, body: dict[str, Any]) -> dict[str, Any]:
        self.created.append((trio.current_time(), body))
        return body


class ManualGate:
    """Open only after :meth:`open` is called."""

    def __init__(self) -> None:
        self.opened = trio.Event()

    async def wait_open(self) -> None:
        await self.opened.wait()

    def open(self) -> None:
        self.opened.set()


@pytest.fixture
def clock() -> TrioLinkedClock:
    return TrioLinkedClock()


async def test_events_wait_for_the_gate_and_keep_their_emission_time(
    clock: TrioLinkedClock, autojump_clock: trio.abc.Clock
) -> None:
    kube = Recording()
    gate = ManualGate()
    recorder = EventRecorder(kube, "c", clock=clock, gate=gate)  # type: ignore[arg-type]
    async with trio.open_nursery() as nursery:
        await nursery.start(recorder.run)
        emitted = format_time(clock.now())
        for name in ("a", "b", "c"):
            recorder.emit(involved(name), type_="Normal", reason="Scheduled", message="m")
        await trio.sleep(0.5)
        assert kube.created == []  # held back while the gate is closed
        gate.open()
        await trio.sleep(0.01)
        assert [body["involvedObject"]["name"] for _, body in kube.created] == ["a", "b", "c"]
        assert {body["firstTimestamp"] for _, body in kube.created} == {emitted}
        assert {body["lastTimestamp"] for _, body in kube.created} == {emitted}
        assert recorder.created == 3
        assert recorder.dropped == 0
        nursery.cancel_scope.cancel()


async def test_a_gate_that_stays_closed_delays_each_event_by_the_bound_only(
    clock: TrioLinkedClock, autojump_clock: trio.abc.Clock
) -> None:
    kube = Recording()
    recorder = EventRecorder(kube, "c", clock=clock, gate=ManualGate())  # type: ignore[arg-type]
    async with trio.open_nursery() as nursery:
        await nursery.start(recorder.run)
        start = trio.current_time()
        for index in range(20):
            recorder.emit(involved(f"r{index}"), type_="Normal", reason="R", message="m")
            await trio.sleep(0.1)
        await trio.sleep(MAX_DELAY_SECONDS + 0.1)
        written = [at - start for at, _ in kube.created]
        expected = [index * 0.1 + MAX_DELAY_SECONDS for index in range(20)]
        assert written == pytest.approx(expected, abs=1e-6)
        nursery.cancel_scope.cancel()


async def test_without_a_gate_events_are_written_at_once(
    clock: TrioLinkedClock, autojump_clock: trio.abc.Clock
) -> None:
    kube = Recording()
    recorder = EventRecorder(kube, "c", clock=clock)  # type: ignore[arg-type]
    async with trio.open_nursery() as nursery:
        await nursery.start(recorder.run)
        start = trio.current_time()
        recorder.emit(involved(), type_="Normal", reason="R", message="m")
        await trio.sleep(0.001)
        assert [at - start for at, _ in kube.created] == [0]
        nursery.cancel_scope.cancel()


def test_event_names_are_unique_per_recorder_and_across_recorders() -> None:
    names = set()
    for _ in range(3):
        recorder = EventRecorder(object(), "c")  # type: ignore[arg-type]
        for _ in range(100):
            names.add(f"{recorder._name_prefix}{next(recorder._serial):x}")  # noqa: SLF001
    assert len(names) == 300


def test_bad_delay_is_rejected() -> None:
    with pytest.raises(ValueError, match="max_delay_seconds"):
        EventRecorder(object(), "c", max_delay_seconds=-1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_delay_seconds"):
        EventRecorder(object(), "c", max_delay_seconds=float("nan"))  # type: ignore[arg-type]
