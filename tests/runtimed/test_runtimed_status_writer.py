"""runtimed's KubeStatusWriter: a few Run status writes in flight, in arrival order (issue 6)."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from krt.kube.resources import RUNS
from runtimed.tasks import STATUS_WRITES_IN_FLIGHT, KubeStatusWriter


class GatedKube:
    """Records each replace_status as it starts; each waits until the test lets it finish."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.in_flight = 0
        self.most_in_flight = 0
        self.release = trio.Semaphore(0)

    async def replace_status(self, ref: Any, body: dict[str, Any]) -> dict[str, Any]:
        assert ref is RUNS
        self.started.append(body["metadata"]["name"])
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await self.release.acquire()
        finally:
            self.in_flight -= 1
        return body


def run_obj(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "resourceVersion": "1"},
        "status": {"phase": "Scheduled"},
    }


def test_default_is_two_writes_in_flight() -> None:
    assert STATUS_WRITES_IN_FLIGHT == 2


async def test_writes_wait_their_turn_in_arrival_order() -> None:
    kube = GatedKube()
    writer = KubeStatusWriter(kube, concurrency=2)
    names = [f"run-{i}" for i in range(6)]
    async with trio.open_nursery() as nursery:
        for name in names:
            nursery.start_soon(writer.write_status, run_obj(name), {"phase": "Running"})
            await trio.testing.wait_all_tasks_blocked()
        assert kube.started == names[:2]  # the other four wait in the writer, not at the API
        for done in range(1, 5):
            kube.release.release()
            await trio.testing.wait_all_tasks_blocked()
            assert kube.started == names[: 2 + done]  # each freed place goes to the oldest
        kube.release.release()
        kube.release.release()
    assert kube.most_in_flight == 2


async def test_an_unchanged_status_sends_nothing() -> None:
    kube = GatedKube()
    writer = KubeStatusWriter(kube, concurrency=1)
    obj = run_obj("same")
    written = await writer.write_status(obj, {"phase": "Scheduled"})
    assert written == obj
    assert kube.started == []


def test_concurrency_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1, got 0"):
        KubeStatusWriter(GatedKube(), concurrency=0)
