"""F23 end to end on the in-memory API: Runs a hung runtimed never claimed are placed again.

The control plane runs for real (scheduler, reaper, Events) on :mod:`.fakekube` and virtual
time. Pod ``p-a`` plays a hung runtimed (its heartbeat Lease is never renewed, nothing claims
what is bound to it); ``p-b`` heartbeats. Then ``p-a``'s runtimed "wakes up" as a real
:class:`runtimed.tasks.TaskLifecycle` whose Run cache still shows the Run Scheduled on
``p-a``: its claim must fail the conditional write and it must never call Execute.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import trio

from krt.api.phases import Phase
from krt.controlplane.reaper_loop import LEASE_EXPIRY_SLACK_SECONDS, UNCLAIMED_FENCE_LABEL
from krt.controlplane.unclaimed import NOT_CLAIMED_EVENT_REASON
from krt.kube.clock import TrioLinkedClock, format_micro_time
from krt.kube.informer import EventType, InformerEvent
from krt.kube.resources import EVENTS, LEASES, RUNS, RUNTIMES
from runtimed.identity import PodIdentity
from runtimed.runtime_client import ExecuteSpec
from runtimed.sources import Workspace
from runtimed.task_decisions import ExecState, ServerView
from runtimed.tasks import KubeStatusWriter, TaskLifecycle, TaskTimings

from .builders import runtime_dict
from .fakekube import FakeKube
from .test_loops import NS, add_pod, add_run, beat, plane, set_status, until

LEASE_SECONDS = 40  # what test_loops.beat writes


def status_of(fake: FakeKube, name: str) -> dict[str, Any]:
    obj = fake.peek(RUNS, NS, name)
    assert obj is not None
    return dict(obj.get("status") or {})


async def keep_beating(fake: FakeKube, pod: dict[str, Any]) -> None:
    """A live runtimed: renew the Pod's heartbeat Lease every 10 s until cancelled."""
    while True:
        await trio.sleep(10)
        await beat(fake, pod)


async def test_unclaimed_runs_move_when_the_heartbeat_lapses_without_using_an_attempt(
    fake: FakeKube, clock: TrioLinkedClock, autojump_clock: trio.abc.Clock
) -> None:
    await fake.create(RUNTIMES, runtime_dict(runs=4))
    await add_pod(fake, "p-a")
    last_beat = trio.current_time()  # p-a's Lease lapses LEASE_SECONDS after this
    async with plane(fake, clock, resync_seconds=3600) as running, trio.open_nursery() as beats:
        for name in ("r1", "r2", "claimed"):
            await add_run(fake, name)  # maxAttempts 1: a consumed attempt would be Failed
        await until(lambda: running.scheduler.bound == 3)
        await set_status(fake, RUNS, "claimed", {"phase": "Running"})  # claimed before the hang
        beats.start_soon(keep_beating, fake, await add_pod(fake, "p-b"))

        await trio.sleep(LEASE_SECONDS - 1)
        assert {status_of(fake, n)["assignedPod"] for n in ("r1", "r2", "claimed")} == {"p-a"}
        await until(
            lambda: all(status_of(fake, n).get("assignedPod") == "p-b" for n in ("r1", "r2")),
            seconds=5,
            period=0.01,
        )
        moved_after = trio.current_time() - last_beat
        assert LEASE_SECONDS <= moved_after <= LEASE_SECONDS + LEASE_EXPIRY_SLACK_SECONDS + 0.5
        for name in ("r1", "r2"):
            status = status_of(fake, name)
            assert status["phase"] == Phase.SCHEDULED.value
            assert status["attempt"] == 1
            assert "reason" not in status
        # a claimed Run on a live Pod is not moved: a stale heartbeat alone is no fence
        assert status_of(fake, "claimed")["assignedPod"] == "p-a"
        assert status_of(fake, "claimed")["phase"] == "Running"

        async def not_claimed_events() -> dict[str, str]:
            events, _ = await fake.list(EVENTS, NS)
            return {
                e["involvedObject"]["name"]: e["message"]
                for e in events
                if e["reason"] == NOT_CLAIMED_EVENT_REASON
            }

        with trio.fail_after(10):
            while len(await not_claimed_events()) < 2:  # noqa: ASYNC110
                await trio.sleep(0.1)
        messages = await not_claimed_events()
        assert set(messages) == {"r1", "r2"}
        assert messages["r1"].startswith(
            "runtimed on Pod p-a did not claim it within 40s; heartbeat stale"
        )
        sample = running.metrics.registry.get_sample_value(
            "krt_controlplane_recoveries_total",
            {"fence": UNCLAIMED_FENCE_LABEL, "outcome": "unassigned"},
        )
        assert sample == 2
        beats.cancel_scope.cancel()


async def test_a_claim_that_wins_the_race_makes_the_unassignment_a_conflict(
    fake: FakeKube, clock: TrioLinkedClock, autojump_clock: trio.abc.Clock
) -> None:
    """The runtimed claim lands between the reaper's read and its write: the claim stands."""
    await fake.create(RUNTIMES, runtime_dict(runs=4))
    hung = await add_pod(fake, "p-a")
    async with plane(fake, clock, resync_seconds=3600) as running:
        await add_run(fake, "r1")
        await until(lambda: running.scheduler.bound == 1)
        claimed = False

        async def claim_first(verb: str, ref: Any, name: Any) -> None:
            nonlocal claimed
            if verb == "replace_status" and ref == RUNS and name == "r1" and not claimed:
                claimed = True
                current = fake.peek(RUNS, NS, "r1")
                assert current is not None
                assert current["status"]["phase"] == "Scheduled"  # the reaper's write is next
                body = copy.deepcopy(current)
                body["status"]["phase"] = "Running"
                fake.objects[("runs", NS, "r1")] = body
                fake.version += 1
                body["metadata"]["resourceVersion"] = str(fake.version)

        fake.before_write = claim_first
        await trio.sleep(LEASE_SECONDS + 2)
        assert claimed
        status = status_of(fake, "r1")
        assert (status["phase"], status["assignedPodUID"]) == ("Running", hung["metadata"]["uid"])
        assert running.metrics.registry.get_sample_value(
            "krt_controlplane_recoveries_total",
            {"fence": UNCLAIMED_FENCE_LABEL, "outcome": "unassigned"},
        ) in (None, 0)


async def test_a_lagging_lease_cache_never_moves_a_run_whose_runtimed_renewed_its_lease(
    fake: FakeKube, clock: TrioLinkedClock, autojump_clock: trio.abc.Clock
) -> None:
    """The control plane's Lease watch misses a renewal: the live read before the write sees it."""
    await fake.create(RUNTIMES, runtime_dict(runs=4))
    hung = await add_pod(fake, "p-a")
    async with plane(fake, clock, resync_seconds=3600) as running, trio.open_nursery() as beats:
        await add_run(fake, "r1")
        await until(lambda: running.scheduler.bound == 1)
        beats.start_soon(keep_beating, fake, await add_pod(fake, "p-b"))
        await trio.sleep(LEASE_SECONDS - 1)
        lease = fake.peek(LEASES, NS, "runtimed-p-a")
        assert lease is not None
        renewed_at = trio.current_time()
        lease["spec"]["renewTime"] = format_micro_time(clock.now())  # no watch event
        fake.version += 1
        lease["metadata"]["resourceVersion"] = str(fake.version)

        await trio.sleep(LEASE_SECONDS - 1)  # the cached Lease lapsed long ago, the live one not
        assert status_of(fake, "r1")["assignedPodUID"] == hung["metadata"]["uid"]
        await until(lambda: status_of(fake, "r1").get("assignedPod") == "p-b", seconds=10)
        assert LEASE_SECONDS <= trio.current_time() - renewed_at <= LEASE_SECONDS + 6
        beats.cancel_scope.cancel()


class StaleRunCache:
    """A hung runtimed's Run cache: what it last saw, until the test delivers more."""

    def __init__(self, objects: dict[str, dict[str, Any]]) -> None:
        self.objects = objects

    def get(self, namespace: str | None, name: str) -> dict[str, Any] | None:
        return self.objects.get(f"{namespace}/{name}")

    def by_uid(self, uid: str) -> dict[str, Any] | None:
        return next((o for o in self.objects.values() if o["metadata"]["uid"] == uid), None)


class RecordingServer:
    """A Runtime Server that knows no execution and records every call."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def execute(self, spec: ExecuteSpec) -> None:
        self.calls.append("Execute")

    async def status(self, uid: str) -> ServerView:
        self.calls.append("Status")
        return ServerView(ExecState.NOT_FOUND)

    async def list(self) -> dict[str, ServerView]:
        return {}

    async def cancel(self, uid: str) -> None:
        self.calls.append("Cancel")

    async def forget(self, uid: str) -> None:
        self.calls.append("Forget")

    async def health(self) -> tuple[bool, str]:
        return True, ""


async def test_the_woken_runtimed_fails_its_late_claim_and_never_executes_the_moved_run(
    fake: FakeKube, clock: TrioLinkedClock, autojump_clock: trio.abc.Clock, tmp_path: Path
) -> None:
    await fake.create(RUNTIMES, runtime_dict(runs=4))
    hung = await add_pod(fake, "p-a")
    async with plane(fake, clock, resync_seconds=3600) as running, trio.open_nursery() as nursery:
        await add_run(fake, "r1")
        await until(lambda: running.scheduler.bound == 1)
        seen_by_hung = copy.deepcopy(fake.peek(RUNS, NS, "r1"))
        assert seen_by_hung is not None
        assert seen_by_hung["status"]["phase"] == "Scheduled"
        nursery.start_soon(keep_beating, fake, await add_pod(fake, "p-b"))
        await until(lambda: status_of(fake, "r1").get("assignedPod") == "p-b", seconds=60)
        moved = copy.deepcopy(fake.peek(RUNS, NS, "r1"))
        assert moved is not None

        # p-a's runtimed wakes up with its cache still at the version it last saw
        cache = StaleRunCache({f"{NS}/r1": seen_by_hung})
        server = RecordingServer()
        lifecycle = TaskLifecycle(
            pod=PodIdentity(name="p-a", namespace=NS, uid=hung["metadata"]["uid"]),
            cache=cache,
            writer=KubeStatusWriter(fake),
            server=server,
            workspace=Workspace(root=tmp_path / "ws"),
            clock=clock,
            timings=TaskTimings(rleg_period=0.05, sweep_period=5.0),
            workers=2,
        )
        await nursery.start(lambda task_status: lifecycle.run(task_status=task_status))
        done_before, writes_before = lifecycle.queue.done, len(fake.writes)
        lifecycle.queue.add(f"{NS}/r1")
        await until(lambda: lifecycle.queue.done > done_before)
        await trio.sleep(1)
        # it tried to claim (one status write of r1), got 409, and nothing changed
        assert fake.writes[writes_before:].count(("replace_status", "runs", "r1")) == 1
        after = fake.peek(RUNS, NS, "r1")
        assert after is not None
        assert after["metadata"]["resourceVersion"] == moved["metadata"]["resourceVersion"]
        assert after["status"] == moved["status"]
        assert "Execute" not in server.calls
        assert lifecycle.local(seen_by_hung["metadata"]["uid"]) is None

        # the watch catches up: the Run left this Pod's assignedPodUID watch (DELETED there,
        # as a field-selector watch reports it) and is dropped
        del cache.objects[f"{NS}/r1"]
        lifecycle.on_run_event(InformerEvent(EventType.DELETED, seen_by_hung, seen_by_hung))
        await trio.sleep(2)
        assert server.calls == []
        assert status_of(fake, "r1")["assignedPod"] == "p-b"
        assert lifecycle.local(seen_by_hung["metadata"]["uid"]) is None
        nursery.cancel_scope.cancel()
