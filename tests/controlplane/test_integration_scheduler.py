"""Scheduler, reaper and GC on localkube with real Runtime Pods (issue 5 acceptance).

runtimed is played by :class:`~tests.controlplane.conftest.HeartbeatDouble` (heartbeat and
readiness gate) and, for completing Runs, by :class:`RunFinisher` here.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Any

import trio

from krt.api.constants import REGISTRATION_CLEANUP_FINALIZER
from krt.api.patches import apply_merge_patch
from krt.api.phases import Phase, is_active, phase_of
from krt.api.times import format_time
from krt.kube.client import Kube, Obj
from krt.kube.clock import SystemClock
from krt.kube.errors import Conflict, NotFound
from krt.kube.informer import EventType, Informer, InformerEvent
from krt.kube.resources import EVENTS, LEASES, PODS, RUNS, RUNTIMES
from krt.kube.status import write_status

from .harness import (
    NS,
    HeartbeatDouble,
    create_runtime,
    run_manifest,
    running_controlplane,
    wait_for,
)


def _phase(obj: Obj) -> Phase:
    return phase_of((obj.get("status") or {}).get("phase"))


class RunWatch:
    """Watches Runs and checks invariants on every event (a consistent store snapshot)."""

    def __init__(self, kube: Kube) -> None:
        self.informer = Informer(kube, RUNS, namespace=NS)
        self.informer.add_handler(self._on_event)
        self.max_active = 0
        self.max_per_pod = 0
        #: run uid -> {(attempt, assignedPodUID)} seen while Scheduled
        self.binds: dict[str, set[tuple[int, str]]] = defaultdict(set)
        self.scheduled_at: list[float] = []
        self.released_at: list[float] = []

    def _on_event(self, event: InformerEvent) -> None:
        now = trio.current_time()
        status = event.obj.get("status") or {}
        phase = _phase(event.obj)
        old_phase = _phase(event.old) if event.old is not None else Phase.PENDING
        if phase is Phase.SCHEDULED and old_phase is not Phase.SCHEDULED:
            uid = str(event.obj["metadata"]["uid"])
            self.binds[uid].add((int(status.get("attempt") or 0), str(status["assignedPodUID"])))
            self.scheduled_at.append(now)
        if is_active(old_phase) and not is_active(phase):
            self.released_at.append(now)
        active = [o for o in self.informer.items() if is_active(_phase(o))]
        self.max_active = max(self.max_active, len(active))
        per_pod: dict[str, int] = defaultdict(int)
        for obj in active:
            per_pod[str((obj.get("status") or {}).get("assignedPodUID"))] += 1
        self.max_per_pod = max([self.max_per_pod, *per_pod.values()])

    def phases(self) -> dict[Phase, int]:
        counts: dict[Phase, int] = defaultdict(int)
        for obj in self.informer.items():
            counts[_phase(obj)] += 1
        return counts


class RunFinisher:
    """Plays runtimed's part for tasks: a Scheduled Run succeeds after ``hold`` seconds."""

    def __init__(self, kube: Kube, watch: RunWatch, *, hold: float) -> None:
        self._kube = kube
        self._watch = watch
        self._hold = hold
        self._send, self._receive = trio.open_memory_channel[str](1000)
        watch.informer.add_handler(self._on_event)

    def _on_event(self, event: InformerEvent) -> None:
        if event.type is not EventType.DELETED and _phase(event.obj) is Phase.SCHEDULED:
            self._send.send_nowait(str(event.obj["metadata"]["name"]))

    async def _finish(self, name: str) -> None:
        await trio.sleep(self._hold)
        obj = self._watch.informer.get(NS, name)
        if obj is None or _phase(obj) is not Phase.SCHEDULED:
            return
        now = format_time(SystemClock().now())
        patch: dict[str, Any] = {
            "phase": "Succeeded",
            "startTime": now,
            "completionTime": now,
            "reason": "Succeeded",
        }
        try:
            await write_status(self._kube, RUNS, obj, apply_merge_patch(obj.get("status"), patch))
        except (Conflict, NotFound):
            pass

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            task_status.started()
            async for name in self._receive:
                nursery.start_soon(self._finish, name)


async def _pool(kube: Kube, *, replicas: int, runs: int) -> None:
    await create_runtime(kube, replicas=replicas, runs=runs)

    async def ready() -> bool:
        runtime = await kube.get(RUNTIMES, "python", NS)
        return int((runtime.get("status") or {}).get("readyReplicas") or 0) == replicas

    try:
        await wait_for(ready, seconds=30)
    except trio.TooSlowError:  # say why: which Pod is not ready, whose heartbeat is missing
        pods, _ = await kube.list(PODS, NS)
        leases, _ = await kube.list(LEASES, NS)
        runtime = await kube.get(RUNTIMES, "python", NS)
        raise AssertionError(
            f"pool not ready: runtime status {runtime.get('status')}; pods "
            + str([(p["metadata"]["name"], p.get("status", {}).get("conditions")) for p in pods])
            + f"; leases {[(x['metadata']['name'], x.get('spec')) for x in leases]}"
        ) from None


async def _create_runs(kube: Kube, count: int, **kwargs: Any) -> None:
    async with trio.open_nursery() as nursery:
        limiter = trio.CapacityLimiter(16)

        async def one(index: int) -> None:
            async with limiter:
                await kube.create(RUNS, run_manifest(f"run-{index:03d}", **kwargs))

        for index in range(count):
            nursery.start_soon(one, index)


async def test_fifty_runs_on_capacity_eight_never_exceed_it(
    kube: Kube, heartbeats: HeartbeatDouble, nursery: trio.Nursery
) -> None:
    """50 Runs at once on 2 Pods x 4: all placed, never more than 8 active, one bind each."""
    watch = RunWatch(kube)
    await nursery.start(watch.informer.run)
    finisher = RunFinisher(kube, watch, hold=0.05)
    await nursery.start(finisher.run)
    async with running_controlplane(kube) as plane:
        await _pool(kube, replicas=2, runs=4)
        await _create_runs(kube, 50)
        await wait_for(lambda: watch.phases()[Phase.SUCCEEDED] == 50, seconds=60)
        assert watch.max_active <= 8
        assert watch.max_active == 8  # the pool was used to the full
        assert watch.max_per_pod <= 4
        assert len(watch.binds) == 50
        assert all(len(assignments) == 1 for assignments in watch.binds.values())
        assert all(attempt == 1 for s in watch.binds.values() for attempt, _ in s)
        await wait_for(lambda: plane.scheduler.bound == 50)
        # capacity release -> next bind (measured, printed; not a timed assertion)
        gaps = []
        for released in watch.released_at:
            later = [t for t in watch.scheduled_at if t >= released]
            if later:
                gaps.append(min(later) - released)
        if gaps:
            print(
                f"\nrelease -> bind: n={len(gaps)} p50={statistics.median(gaps) * 1000:.1f} ms "
                f"max={max(gaps) * 1000:.1f} ms"
            )


async def test_pod_loss_requeues_with_attempt_two_or_fails(
    kube: Kube, heartbeats: HeartbeatDouble, nursery: trio.Nursery
) -> None:
    watch = RunWatch(kube)
    await nursery.start(watch.informer.run)
    async with running_controlplane(kube):
        await _pool(kube, replicas=1, runs=4)
        await kube.create(RUNS, run_manifest("retry", max_attempts=2))
        await kube.create(RUNS, run_manifest("once", max_attempts=1))

        def both_scheduled() -> bool:
            objs = [watch.informer.get(NS, name) for name in ("retry", "once")]
            return all(o is not None and _phase(o) is Phase.SCHEDULED for o in objs)

        await wait_for(both_scheduled)
        retry = watch.informer.get(NS, "retry")
        assert retry is not None
        pod_name = retry["status"]["assignedPod"]
        pod_uid = retry["status"]["assignedPodUID"]
        heartbeats.stop(pod_uid)
        await kube.delete(PODS, pod_name, NS)

        def recovered() -> bool:
            once = watch.informer.get(NS, "once")
            again = watch.informer.get(NS, "retry")
            return (
                once is not None
                and _phase(once) is Phase.FAILED
                and again is not None
                and _phase(again) is Phase.SCHEDULED
                and again["status"]["assignedPodUID"] != pod_uid
            )

        await wait_for(recovered, seconds=30)
        once = watch.informer.get(NS, "once")
        again = watch.informer.get(NS, "retry")
        assert once is not None
        assert again is not None
        assert once["status"]["reason"] == "PodLost"
        assert again["status"]["attempt"] == 2
        assert "reason" not in again["status"]  # cleared by the bind of attempt 2
        assert "(attempt 2; attempt 1 failed: PodLost: " in again["status"]["message"]
        retry_uid = again["metadata"]["uid"]
        assert {attempt for attempt, _ in watch.binds[retry_uid]} == {1, 2}

        async def events_recorded() -> bool:
            events, _ = await kube.list(EVENTS, NS)
            reasons = {
                (e["involvedObject"]["name"], e["reason"])
                for e in events
                if e["involvedObject"].get("kind") == "Run"
            }
            return {("retry", "Scheduled"), ("retry", "PodLost"), ("once", "PodLost")} <= reasons

        await wait_for(events_recorded, seconds=10)


async def test_deleted_function_run_on_lost_pod_loses_its_finalizer_once_pod_uid_is_gone(
    kube: Kube, heartbeats: HeartbeatDouble, nursery: trio.Nursery
) -> None:
    """Seed 000 Cleanup and Finalization: only "Pod UID gone" lets the reaper drop the finalizer."""
    watch = RunWatch(kube)
    await nursery.start(watch.informer.run)
    async with running_controlplane(kube):
        await _pool(kube, replicas=1, runs=2)
        await kube.create(RUNS, run_manifest("fn", function=True, max_attempts=3))

        def scheduled() -> bool:
            obj = watch.informer.get(NS, "fn")
            return obj is not None and _phase(obj) is Phase.SCHEDULED

        await wait_for(scheduled)
        obj = watch.informer.get(NS, "fn")
        assert obj is not None
        # act as runtimed: add the cleanup finalizer, register, go Ready
        obj = await kube.patch(
            RUNS,
            "fn",
            NS,
            {"metadata": {"finalizers": [REGISTRATION_CLEANUP_FINALIZER]}},
        )
        await write_status(
            kube, RUNS, obj, apply_merge_patch(obj.get("status"), {"phase": "Ready"})
        )
        pod_name = obj["status"]["assignedPod"]
        await kube.delete(RUNS, "fn", NS)  # the user deletes the Run: the finalizer holds it
        deleting = await kube.get(RUNS, "fn", NS)
        assert deleting["metadata"]["deletionTimestamp"]
        heartbeats.stop(obj["status"]["assignedPodUID"])
        await kube.delete(PODS, pod_name, NS, grace_period_seconds=0)

        async def run_gone() -> bool:
            try:
                await kube.get(RUNS, "fn", NS)
            except NotFound:
                return True
            return False

        await wait_for(run_gone, seconds=15)


async def test_cancel_before_assignment_and_runtime_not_found(
    kube: Kube, nursery: trio.Nursery
) -> None:
    watch = RunWatch(kube)
    await nursery.start(watch.informer.run)
    async with running_controlplane(kube):
        await kube.create(RUNS, run_manifest("orphan", runtime="nope"))

        def not_found() -> bool:
            obj = watch.informer.get(NS, "orphan")
            conditions = (obj or {}).get("status", {}).get("conditions") or []
            return any(c["reason"] == "RuntimeNotFound" for c in conditions)

        await wait_for(not_found)
        await kube.patch(RUNS, "orphan", NS, {"spec": {"cancelRequested": True}})

        def cancelled() -> bool:
            obj = watch.informer.get(NS, "orphan")
            return obj is not None and _phase(obj) is Phase.CANCELLED

        await wait_for(cancelled)


async def test_gc_deletes_terminal_run_after_ttl(kube: Kube, nursery: trio.Nursery) -> None:
    async with running_controlplane(kube):
        manifest = run_manifest("done", runtime="nope")
        manifest["spec"]["ttlSecondsAfterFinished"] = 1
        await kube.create(RUNS, manifest)
        keep = run_manifest("keep", runtime="nope")
        await kube.create(RUNS, keep)

        async def finished() -> bool:  # act as runtimed: end the Run (retry on a conflict)
            current = await kube.get(RUNS, "done", NS)
            now = format_time(SystemClock().now())
            status = {"phase": "Succeeded", "completionTime": now, "attempt": 1}
            try:
                await write_status(kube, RUNS, current, status)
            except Conflict:
                return False
            return True

        await wait_for(finished)

        async def gone() -> bool:
            try:
                await kube.get(RUNS, "done", NS)
            except NotFound:
                return True
            return False

        await wait_for(gone, seconds=10)  # exact timing: test_loops.py, on virtual time
        await kube.get(RUNS, "keep", NS)  # a Run without TTL stays
