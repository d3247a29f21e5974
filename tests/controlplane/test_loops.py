"""The control-plane loops on an in-memory API (:mod:`.fakekube`) and trio's virtual clock.

These pin down timing and race behaviour that a real cluster makes hard to force: a bind
that loses a race (409) never binds twice, capacity release wakes a Pending Run at once (not
at the fallback resync), a heartbeat that lapses without any event drops ``readyReplicas``,
and the GC deletes exactly at ``completionTime + ttlSecondsAfterFinished``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any, cast

import trio

from krt.api.constants import RUNTIME_LABEL
from krt.api.patches import apply_merge_patch
from krt.api.times import format_time
from krt.controlplane.app import ControlPlane, ControlPlaneConfig, serve_controlplane
from krt.kube.client import Kube
from krt.kube.clock import TrioLinkedClock, format_micro_time
from krt.kube.resources import DEPLOYMENTS, LEASES, PODS, RUNS, RUNTIMES, SERVICES, ResourceRef

from .builders import run_dict, runtime_dict
from .fakekube import FakeKube

NS = "demo"


async def add_pod(fake: FakeKube, name: str, *, runtime: str = "python") -> dict[str, Any]:
    """A Ready Runtime Pod with a fresh heartbeat Lease (40 s)."""
    pod = await fake.create(
        PODS,
        {
            "metadata": {"name": name, "namespace": NS, "labels": {RUNTIME_LABEL: runtime}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        },
    )
    await beat(fake, pod)
    return pod


async def beat(fake: FakeKube, pod: dict[str, Any]) -> None:
    """Create or renew the Pod's heartbeat Lease at the current (virtual) time."""
    name = f"runtimed-{pod['metadata']['name']}"
    spec = {
        "holderIdentity": pod["metadata"]["uid"],
        "leaseDurationSeconds": 40,
        "renewTime": format_micro_time(fake.clock.now()),
    }
    current = fake.peek(LEASES, NS, name)
    if current is None:
        await fake.create(LEASES, {"metadata": {"name": name, "namespace": NS}, "spec": spec})
    else:
        await fake.replace(LEASES, {**current, "spec": spec})


async def add_run(fake: FakeKube, name: str, **kwargs: Any) -> None:
    data = run_dict(name, **kwargs)
    data["metadata"] = {"name": name, "namespace": NS}
    await fake.create(RUNS, data)


async def set_status(fake: FakeKube, ref: ResourceRef, name: str, patch: dict[str, Any]) -> None:
    current = fake.peek(ref, NS, name)
    assert current is not None
    await fake.replace_status(
        ref, {**current, "status": apply_merge_patch(current.get("status"), patch)}
    )


def phase(fake: FakeKube, name: str) -> str:
    obj = fake.peek(RUNS, NS, name)
    assert obj is not None
    return str((obj.get("status") or {}).get("phase", "Pending"))


@asynccontextmanager
async def plane(
    fake: FakeKube, clock: TrioLinkedClock, **overrides: Any
) -> AsyncIterator[ControlPlane]:
    settings: dict[str, Any] = {"leader_elect": False, "namespaces": (NS,), "clock": clock}
    settings.update(overrides)
    async with trio.open_nursery() as nursery:
        running: ControlPlane = await nursery.start(
            serve_controlplane, cast(Kube, fake), ControlPlaneConfig(**settings)
        )
        await running.leading.wait()
        await trio.sleep(0.01)
        yield running
        nursery.cancel_scope.cancel()


async def until(predicate: Any, *, seconds: float = 5.0, period: float = 0.001) -> None:
    """Poll ``predicate()`` every ``period`` (virtual) seconds; fail after ``seconds``."""
    with trio.fail_after(seconds):
        while True:
            if predicate():
                return
            await trio.sleep(period)


async def test_lost_bind_race_never_binds_twice(
    fake: FakeKube, clock: TrioLinkedClock, autojump_clock: trio.abc.Clock
) -> None:
    """A competing writer binds first: our PUT gets 409, the re-read shows it bound, we stop."""
    await fake.create(RUNTIMES, runtime_dict(runs=2))
    await add_pod(fake, "p-a")
    other = await add_pod(fake, "p-b")
    raced = False

    async def competitor(verb: str, ref: ResourceRef, subject: Any) -> None:
        nonlocal raced
        if verb == "replace_status" and ref.plural == "runs" and not raced:
            raced = True  # another scheduler's bind lands just before ours
            current = fake.peek(RUNS, NS, "r1")
            assert current is not None
            bound = {
                "phase": "Scheduled",
                "assignedPod": "p-b",
                "assignedPodUID": other["metadata"]["uid"],
                "attempt": 1,
            }
            fake.before_write = None
            await fake.replace_status(RUNS, {**current, "status": bound})
            fake.before_write = competitor

    fake.before_write = competitor
    async with plane(fake, clock) as running:
        await add_run(fake, "r1")
        await until(lambda: raced and phase(fake, "r1") == "Scheduled")
        await trio.sleep(5)
        status_writes = [w for w in fake.writes if w[0] == "replace_status" and w[1] == "runs"]
        assert len(status_writes) == 2  # ours (refused) and the competitor's
        assert running.scheduler.bound == 0
        assert running.metrics.bind_conflicts._value.get() == 1  # noqa: SLF001
        stored = fake.peek(RUNS, NS, "r1")
        assert stored is not None
        assert stored["status"]["assignedPod"] == "p-b"


async def test_conflict_with_unrelated_change_rebinds_from_fresh_copy(
    fake: FakeKube, clock: TrioLinkedClock, autojump_clock: trio.abc.Clock
) -> None:
    """A 409 caused by an unrelated change: re-read, still Pending, bind from the fresh copy."""
    await fake.create(RUNTIMES, runtime_dict(runs=2))
    await add_pod(fake, "p-a")
    touched = False

    async def toucher(verb: str, ref: ResourceRef, subject: Any) -> None:
        nonlocal touched
        if verb == "replace_status" and ref.plural == "runs" and not touched:
            touched = True
            fake.before_write = None
            await fake.patch(RUNS, "r1", NS, {"metadata": {"annotations": {"x": "y"}}})
            fake.before_write = toucher

    fake.before_write = toucher
    async with plane(fake, clock) as running:
        await add_run(fake, "r1")
        await until(lambda: phase(fake, "r1") == "Scheduled")
        assert running.scheduler.bound == 1
        assert running.metrics.bind_conflicts._value.get() == 1  # noqa: SLF001


async def test_capacity_release_wakes_pending_run_at_once(
    fake: FakeKube, clock: TrioLinkedClock, autojump_clock: trio.abc.Clock
) -> None:
    await fake.create(RUNTIMES, runtime_dict(runs=2))
    await add_pod(fake, "p-a")
    async with plane(fake, clock, resync_seconds=3600) as running:
        for name in ("r1", "r2", "r3"):
            await add_run(fake, name)
        await until(lambda: running.scheduler.bound == 2)
        await trio.sleep(1)
        pending = [n for n in ("r1", "r2", "r3") if phase(fake, n) == "Pending"]
        assert len(pending) == 1
        stored = fake.peek(RUNS, NS, pending[0])
        assert stored is not None
        reasons = [c["reason"] for c in stored["status"]["conditions"]]
        assert reasons == ["InsufficientCapacity"]
        done = next(n for n in ("r1", "r2", "r3") if phase(fake, n) == "Scheduled")
        released = trio.current_time()
        await set_status(
            fake,
            RUNS,
            done,
            {"phase": "Succeeded", "completionTime": format_time(clock.now())},
        )
        await until(lambda: phase(fake, pending[0]) == "Scheduled")
        assert trio.current_time() - released < 0.1  # woken by the release, not a resync


async def test_pod_loss_requeues_then_rebinds_with_attempt_two(
    fake: FakeKube, clock: TrioLinkedClock, autojump_clock: trio.abc.Clock
) -> None:
    await fake.create(RUNTIMES, runtime_dict(runs=1))
    await add_pod(fake, "p-a")
    async with plane(fake, clock):
        await add_run(fake, "r1", max_attempts=2)
        await until(lambda: phase(fake, "r1") == "Scheduled")
        stored = fake.peek(RUNS, NS, "r1")
        assert stored is not None
        assert stored["status"]["attempt"] == 1
        await add_pod(fake, "p-b")
        lost = stored["status"]["assignedPod"]
        await fake.delete(PODS, lost, NS)
        await until(
            lambda: (
                phase(fake, "r1") == "Scheduled"
                and (fake.peek(RUNS, NS, "r1") or {})["status"]["assignedPod"] != lost
            )
        )
        rebound = fake.peek(RUNS, NS, "r1")
        assert rebound is not None
        assert rebound["status"]["attempt"] == 2
        # the new attempt's reason/message describe it, naming the failure it follows
        assert "reason" not in rebound["status"]
        assert "(attempt 2; attempt 1 failed: PodLost: " in rebound["status"]["message"]


async def test_runtime_ready_replicas_drop_when_heartbeat_lapses_without_events(
    fake: FakeKube, clock: TrioLinkedClock, autojump_clock: trio.abc.Clock
) -> None:
    await fake.create(RUNTIMES, runtime_dict(replicas=1, runs=2))
    await add_pod(fake, "p-a")
    async with plane(fake, clock, resync_seconds=3600):

        def ready_replicas() -> int:
            runtime = fake.peek(RUNTIMES, NS, "python")
            assert runtime is not None
            return int((runtime.get("status") or {}).get("readyReplicas") or 0)

        await until(lambda: ready_replicas() == 1)
        start = trio.current_time()
        await until(lambda: ready_replicas() == 0, seconds=60, period=0.05)
        assert 39 <= trio.current_time() - start <= 41  # at the Lease's expiry, not a resync
        assert fake.peek(DEPLOYMENTS, NS, "runtime-python") is not None


async def test_gc_deletes_exactly_after_ttl(
    fake: FakeKube, clock: TrioLinkedClock, autojump_clock: trio.abc.Clock
) -> None:
    async with plane(fake, clock, resync_seconds=3600):
        await add_run(fake, "done", runtime="nope", ttl=300)
        await add_run(fake, "ready", runtime="nope", ttl=1, function=True)
        await trio.sleep(0.1)
        finished = clock.now()
        await set_status(
            fake,
            RUNS,
            "done",
            {"phase": "Succeeded", "completionTime": format_time(finished), "attempt": 1},
        )
        await set_status(fake, RUNS, "ready", {"phase": "Ready", "attempt": 1})
        await trio.sleep(299)
        assert fake.peek(RUNS, NS, "done") is not None
        await until(lambda: fake.peek(RUNS, NS, "done") is None, seconds=2)
        assert clock.now() - finished >= timedelta(seconds=300)
        assert fake.peek(RUNS, NS, "ready") is not None  # Ready is never collected
        # a TTL lengthened after completion re-arms the timer
        await add_run(fake, "later", runtime="nope", ttl=10)
        await set_status(
            fake,
            RUNS,
            "later",
            {"phase": "Failed", "completionTime": format_time(clock.now()), "attempt": 1},
        )
        await fake.patch(RUNS, "later", NS, {"spec": {"ttlSecondsAfterFinished": 100}})
        await trio.sleep(50)
        assert fake.peek(RUNS, NS, "later") is not None
        await until(lambda: fake.peek(RUNS, NS, "later") is None, seconds=60, period=0.05)


async def test_heartbeat_returning_wakes_pending_run_at_once(
    fake: FakeKube, clock: TrioLinkedClock, autojump_clock: trio.abc.Clock
) -> None:
    await fake.create(RUNTIMES, runtime_dict(runs=1))
    pod = await add_pod(fake, "p-a")
    async with plane(fake, clock, resync_seconds=3600) as running:
        await trio.sleep(41)  # runtimed stops beating: the heartbeat lapses
        await add_run(fake, "r1")

        def reason() -> str | None:
            stored = fake.peek(RUNS, NS, "r1") or {}
            conditions = (stored.get("status") or {}).get("conditions") or []
            return conditions[0]["reason"] if conditions else None

        await until(lambda: reason() == "NoReadyPod")
        await trio.sleep(5)
        back = trio.current_time()
        await beat(fake, pod)  # runtimed is back
        await until(lambda: phase(fake, "r1") == "Scheduled")
        assert trio.current_time() - back < 0.1
        assert running.scheduler.bound == 1


async def test_name_taken_by_foreign_object_is_reported_not_overwritten(
    fake: FakeKube, clock: TrioLinkedClock, autojump_clock: trio.abc.Clock
) -> None:
    foreign = await fake.create(
        SERVICES, {"metadata": {"name": "runtime-python", "namespace": NS}, "spec": {"x": 1}}
    )
    await fake.create(RUNTIMES, runtime_dict(runs=2))
    async with plane(fake, clock, resync_seconds=3600):
        await until(lambda: fake.peek(DEPLOYMENTS, NS, "runtime-python") is not None)

        def reasons() -> list[str]:
            return [
                str(o.get("reason")) for (kind, _, _), o in fake.objects.items() if kind == "events"
            ]

        await until(lambda: "NameConflict" in reasons())
        await trio.sleep(30)
        service = fake.peek(SERVICES, NS, "runtime-python")
        assert service is not None
        assert service["metadata"]["uid"] == foreign["metadata"]["uid"]
        assert service["spec"] == {"x": 1}

        def creates() -> int:
            return len([w for w in fake.writes if w[:2] == ("create", "services")])

        before = creates()
        await trio.sleep(60)
        assert creates() - before <= 3  # exponential backoff (a 1 s retry would make 60)


async def test_reaper_confirms_pod_gone_with_a_live_read(
    fake: FakeKube, clock: TrioLinkedClock, autojump_clock: trio.abc.Clock
) -> None:
    """A Run bound to a Pod the (lagging) Pod cache does not show is left alone."""
    await fake.create(RUNTIMES, runtime_dict(runs=2))
    unseen = await add_pod(fake, "p-new")
    fake.hidden.add(("pods", NS, "p-new"))
    await add_run(fake, "r1", max_attempts=3)
    await set_status(
        fake,
        RUNS,
        "r1",
        {
            "phase": "Running",
            "assignedPod": "p-new",
            "assignedPodUID": unseen["metadata"]["uid"],
            "attempt": 1,
        },
    )
    async with plane(fake, clock, resync_seconds=3600) as running:
        await trio.sleep(10)
        assert phase(fake, "r1") == "Running"
        assert running.metrics.recoveries._metrics == {}  # noqa: SLF001
        # once the Pod is really gone, the same Run is recovered
        fake.hidden.clear()
        await fake.delete(PODS, "p-new", NS)
        await until(lambda: phase(fake, "r1") == "Pending", seconds=10)
        stored = fake.peek(RUNS, NS, "r1")
        assert stored is not None
        assert stored["status"]["attempt"] == 2


async def test_bind_latency_observed_when_watch_beats_the_bind_response(
    fake: FakeKube, clock: TrioLinkedClock, autojump_clock: trio.abc.Clock
) -> None:
    """Every bind is timed, even when the informer delivers it before the PUT returns."""
    await fake.create(RUNTIMES, runtime_dict(runs=8))
    await add_pod(fake, "p-a")

    async def slow_response(verb: str, ref: ResourceRef, name: Any) -> None:
        if ref.plural == "runs":
            await trio.sleep(0.05)  # the watch event is delivered meanwhile

    fake.after_write = slow_response
    async with plane(fake, clock) as running:
        for name in ("r1", "r2", "r3"):
            await add_run(fake, name)
        await until(lambda: running.scheduler.bound == 3)
        latency = running.metrics.bind_latency
        assert latency._sum.get() > 0  # noqa: SLF001
        counted = sum(bucket.get() for bucket in latency._buckets)  # noqa: SLF001
        assert counted == 3
