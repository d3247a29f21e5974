"""EventRecorder: non-blocking queueing, drop-and-count, aggregation, against localkube."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
import trio
from conftest import eventually

from krt.kube.client import Kube
from krt.kube.clock import FakeClock
from krt.kube.errors import Forbidden
from krt.kube.events import WRITE_DEADLINE_SECONDS, EventRecorder, EventSink, NullEventSink
from krt.kube.resources import EVENTS, PODS


def involved(name: str = "r1", namespace: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": "kruntimes.io/v1alpha1",
        "kind": "Run",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
    }


async def test_event_is_written_and_repeats_aggregate(kube: Kube) -> None:
    clock = FakeClock(datetime(2026, 5, 1, 9, 0, 0, tzinfo=UTC))
    recorder = EventRecorder(kube, "runtimed", instance="rt-pod-1", clock=clock)
    async with trio.open_nursery() as nursery:
        await nursery.start(recorder.run)
        recorder.emit(
            involved(), type_="Warning", reason="ExecutionStartFailed", message="staging failed"
        )
        await eventually(lambda: recorder.created == 1)
        clock.advance(30)
        recorder.emit(
            involved(), type_="Warning", reason="ExecutionStartFailed", message="staging failed"
        )
        recorder.emit(
            involved(), type_="Warning", reason="ExecutionStartFailed", message="staging failed"
        )
        recorder.emit(involved(), type_="Normal", reason="Claimed", message="claimed by rt-pod-1")
        await eventually(lambda: recorder.aggregated == 2 and recorder.created == 2)
        nursery.cancel_scope.cancel()
    events, _ = await kube.list(EVENTS, "default")
    by_reason = {e["reason"]: e for e in events}
    failed = by_reason["ExecutionStartFailed"]
    assert failed["count"] == 3
    assert failed["type"] == "Warning"
    assert failed["involvedObject"]["uid"] == "uid-r1"
    assert failed["involvedObject"]["kind"] == "Run"
    assert failed["source"] == {"component": "runtimed", "host": "rt-pod-1"}
    assert failed["firstTimestamp"] == "2026-05-01T09:00:00Z"
    assert failed["lastTimestamp"] == "2026-05-01T09:00:30Z"
    assert by_reason["Claimed"]["count"] == 1
    assert len(events) == 2


async def test_full_buffer_drops_and_counts_without_blocking(kube: Kube) -> None:
    recorder = EventRecorder(kube, "gateway", capacity=2)
    recorder.emit(involved("a"), type_="Normal", reason="A", message="one")
    recorder.emit(involved("b"), type_="Normal", reason="B", message="two")
    recorder.emit(involved("c"), type_="Normal", reason="C", message="three")  # no writer: full
    assert recorder.dropped == 1
    async with trio.open_nursery() as nursery:
        await nursery.start(recorder.run)
        await eventually(lambda: recorder.created == 2)
        nursery.cancel_scope.cancel()
    events, _ = await kube.list(EVENTS, "default")
    assert sorted(e["reason"] for e in events) == ["A", "B"]


async def test_write_failures_are_counted_and_the_writer_continues(kube: Kube) -> None:
    recorder = EventRecorder(kube, "controlplane")
    async with trio.open_nursery() as nursery:
        await nursery.start(recorder.run)
        recorder.emit(
            involved("x", namespace="no-such-namespace"), type_="Normal", reason="X", message="lost"
        )
        recorder.emit(involved("y"), type_="Normal", reason="Y", message="kept")
        await eventually(lambda: recorder.failed == 1 and recorder.created == 1)
        nursery.cancel_scope.cancel()


async def test_deleted_event_is_recreated_on_repeat(kube: Kube) -> None:
    recorder = EventRecorder(kube, "controlplane")
    async with trio.open_nursery() as nursery:
        await nursery.start(recorder.run)
        recorder.emit(involved(), type_="Normal", reason="R", message="m")
        await eventually(lambda: recorder.created == 1)
        (event,), _ = await kube.list(EVENTS, "default")
        await kube.delete(EVENTS, event["metadata"]["name"], "default")
        recorder.emit(involved(), type_="Normal", reason="R", message="m")
        await eventually(lambda: recorder.created == 2)
        nursery.cancel_scope.cancel()
    (event,), _ = await kube.list(EVENTS, "default")
    assert event["count"] == 1


async def test_event_for_a_real_pod_and_long_message(kube: Kube) -> None:
    pod = await kube.create(
        PODS,
        {
            "metadata": {"name": "p1", "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "example.invalid/none"}]},
        },
    )
    recorder = EventRecorder(kube, "runtimed")
    async with trio.open_nursery() as nursery:
        await nursery.start(recorder.run)
        recorder.emit(pod, type_="Warning", reason="Unhealthy", message="x" * 5000)
        await eventually(lambda: recorder.created == 1)
        nursery.cancel_scope.cancel()
    (event,), _ = await kube.list(EVENTS, "default")
    assert len(event["message"]) == 1024
    assert event["involvedObject"]["uid"] == pod["metadata"]["uid"]


def test_bad_input_is_rejected() -> None:
    recorder = EventRecorder(object(), "c")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="event type"):
        recorder.emit(involved(), type_="Error", reason="R", message="m")
    with pytest.raises(ValueError, match="reason"):
        recorder.emit(involved(), type_="Normal", reason="", message="m")
    with pytest.raises(ValueError, match="metadata.name"):
        recorder.emit({"metadata": {}}, type_="Normal", reason="R", message="m")
    with pytest.raises(ValueError, match="capacity"):
        EventRecorder(object(), "c", capacity=0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="component"):
        EventRecorder(object(), "")  # type: ignore[arg-type]


async def test_repeat_whose_patch_is_refused_is_written_as_a_new_event() -> None:
    """A role that may only create Events (runtimed's) still gets every repeat recorded."""

    class CreateOnly:
        def __init__(self) -> None:
            self.created: list[dict[str, Any]] = []

        async def create(self, ref: object, body: dict[str, Any]) -> dict[str, Any]:
            self.created.append(body)
            return body

        async def patch(self, *args: object, **kwargs: object) -> dict[str, Any]:
            raise Forbidden(403, "Forbidden", "events is forbidden: cannot patch")

    kube = CreateOnly()
    recorder = EventRecorder(kube, "runtimed")  # type: ignore[arg-type]
    async with trio.open_nursery() as nursery:
        await nursery.start(recorder.run)
        recorder.emit(involved(), type_="Warning", reason="R", message="m")
        recorder.emit(involved(), type_="Warning", reason="R", message="m")
        await eventually(lambda: recorder.created == 2)
        nursery.cancel_scope.cancel()
    assert recorder.aggregated == 0
    assert [e["count"] for e in kube.created] == [1, 1]


async def test_a_hung_write_is_abandoned_after_the_deadline(autojump_clock: trio.abc.Clock) -> None:
    class Hangs:
        async def create(self, ref: object, body: dict[str, Any]) -> dict[str, Any]:
            await trio.sleep_forever()
            raise AssertionError

    recorder = EventRecorder(Hangs(), "controlplane")  # type: ignore[arg-type]
    async with trio.open_nursery() as nursery:
        await nursery.start(recorder.run)
        start = trio.current_time()
        recorder.emit(involved(), type_="Normal", reason="R", message="m")
        await eventually(lambda: recorder.failed == 1, seconds=WRITE_DEADLINE_SECONDS + 1)
        assert trio.current_time() - start == pytest.approx(WRITE_DEADLINE_SECONDS, abs=0.05)
        nursery.cancel_scope.cancel()


def test_null_sink_accepts_and_drops() -> None:
    sink: EventSink = NullEventSink()
    sink.emit(involved(), type_="Normal", reason="R", message="m")
