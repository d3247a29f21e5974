"""The scheduler: binds Pending Runs to Runtime Pods (the I/O around :mod:`.scheduling`).

Issue 5, Scheduler. Shape (after kube-scheduler): one *scheduling cycle* at a time takes a
Run key from the queue, decides (:func:`~krt.controlplane.scheduling.decide_schedule`) on
the cached Run, Pods, Leases and usage, and for a bind records an *assumption*
(:class:`~krt.controlplane.capacity.AssumedBinds`) before starting the bind request in a
child task. The next cycle therefore already counts the Run on its Pod even though the
informer has not delivered the bind yet, and cycles never wait on the network.

A bind is a conditional status update (:func:`krt.kube.status.write_status_patch`: PUT /status
with the cached ``resourceVersion``). On 409 Conflict the assumption is dropped, the Run is
re-read from the API and scheduled again from that fresh copy; a Run some other writer
already bound is no longer Pending and is left alone, so a Run is never bound twice.

Wake-ups: a Run is queued when it is (or becomes) Pending. A Run whose decision is to stay
Pending is *parked* (:class:`~krt.controlplane.parked_runs.ParkedRuns`, by Runtime and
request shape, oldest first). When capacity is released on a Runtime (a Run holding
capacity becomes terminal, is unassigned or is deleted) one :class:`CapacityReleased` item
is queued; its cycle (:meth:`Scheduler.retry_parked`) decides the parked Runs oldest first
and stops each shape at its first Run that still does not fit, which decides exactly what
queueing every Pending Run of the Runtime would, at O(binds + shapes) instead of
O(Pending Runs). When one of its Pods becomes schedulable, a heartbeat turns fresh or the
Runtime changes, every Pending Run of the Runtime is queued (their reasons may all change).
The Runs informer's periodic RESYNC re-queues every Pending Run as a fallback.

First come, first bound: Pending Runs are queued oldest first (the watch delivers creations
in order; a wake-up queues a Runtime's Pending Runs by creation time, then arrival, and a
release decides parked Runs in that order), the queue is FIFO with one scheduling worker,
and status writes start in decision order on :data:`MAX_CONCURRENT_BINDS` writers
(:class:`~krt.controlplane.fifo_writers.FifoWriters`).

Cost per Run event is O(1) in the number of Runs (O(log n) for parking): the Pending Runs
of a Runtime come from the cache's index (:class:`~krt.controlplane.run_index.RunIndex`),
per-Pod usage is a :class:`~krt.controlplane.capacity.CapacityLedger` that the handlers
recount one Run at a time (its cached version, or this process's assumption while a bind is
in flight), and a release decides only the parked Runs that the freed capacity can take.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import trio

from krt.api.constants import Reason
from krt.api.phases import Phase
from krt.api.run import Run
from krt.controlplane.caches import Caches, runtime_key
from krt.controlplane.capacity import (
    AssumedBinds,
    Assumption,
    CapacityLedger,
    capacity_holder,
    counted_requests,
)
from krt.controlplane.fifo_writers import FifoWriters
from krt.controlplane.metrics import ControlPlaneMetrics
from krt.controlplane.parked_runs import ParkedRuns, Shape, shape_of
from krt.controlplane.podstate import pod_name_of_heartbeat_lease
from krt.controlplane.scheduling import (
    Backoff,
    Bind,
    Cancel,
    Skip,
    Unschedulable,
    decide_schedule,
)
from krt.kube.client import Kube, Obj
from krt.kube.errors import Conflict, KubeError, NotFound
from krt.kube.events import EventSink
from krt.kube.heartbeat import heartbeat_fresh
from krt.kube.informer import EventType, InformerEvent, object_key
from krt.kube.resources import RUNS
from krt.kube.status import write_status_patch
from krt.kube.workqueue import Requeue, WorkQueue

log = logging.getLogger(__name__)

RunKey = tuple[str, str]


@dataclass(frozen=True, slots=True)
class CapacityReleased:
    """A queue item: capacity was released on a Runtime; retry its parked Runs.

    Attributes:
        namespace: the Runtime's namespace.
        runtime: the Runtime's name.
    """

    namespace: str
    runtime: str


QueueKey = RunKey | CapacityReleased
"""What the scheduler's queue holds: a Run (``(namespace, name)``) or a release."""

#: Status writes (binds, cancels, FailedScheduling) in flight at once. Each is one HTTP/1.1
#: request holding one keep-alive connection. Two cover the API server's round trip; more
#: only answer a burst's binds together, later (was 8: complete p50 of bench/task_runs.py
#: ~15% higher together with runtimed's 12 status writes, and ~7 new TLS connections per
#: burst).
MAX_CONCURRENT_BINDS = 2


class Scheduler:
    """Places Pending Runs; see the module docstring.

    Args:
        kube: the client.
        caches: the shared informers (handlers are registered here).
        metrics: where binds, conflicts and latencies are counted.
        recorder: Events (``Scheduled``, ``FailedScheduling``, ``Cancelled``).
    """

    def __init__(
        self,
        kube: Kube,
        caches: Caches,
        *,
        metrics: ControlPlaneMetrics,
        recorder: EventSink,
    ) -> None:
        self._kube = kube
        self._caches = caches
        self._metrics = metrics
        self._recorder = recorder
        self.queue: WorkQueue[QueueKey] = WorkQueue("scheduler")
        self.assumed = AssumedBinds()
        #: Pending Runs last decided "stay Pending", waiting for a wake-up.
        self.parked = ParkedRuns()
        #: Per-Pod usage of each Runtime (``namespace/runtime``), kept current by the handlers.
        self.ledger = CapacityLedger()
        self._pending_since: dict[RunKey, float] = {}
        self._fresh: dict[RunKey, tuple[str, Obj]] = {}
        self._writes: FifoWriters | None = None
        #: Binds that succeeded in this process.
        self.bound = 0
        caches.runs.add_handler(self._on_run)
        caches.pods.add_handler(self._on_pod)
        caches.leases.add_handler(self._on_lease)
        caches.runtimes.add_handler(self._on_runtime)
        metrics.track_queue("scheduler", lambda: len(self.queue))

    # -- wake-ups (informer handlers: synchronous, enqueue only) ----------------------------

    def _enqueue(self, key: RunKey) -> None:
        self._pending_since.setdefault(key, trio.current_time())
        self.queue.add(key)

    def wake_runtime(self, namespace: str, runtime: str) -> None:
        """Queue every Pending Run of a Runtime, oldest first.

        For changes that may alter every Run's decision or message (a Pod became
        schedulable, a heartbeat turned fresh, the Runtime changed): O(Pending Runs of the
        Runtime), but these are rare. Released capacity uses :meth:`release`.
        """
        for run in self._caches.pending_runs_of_runtime(namespace, runtime):
            self._enqueue((namespace, run.metadata.name))

    def release(self, namespace: str, runtime: str) -> None:
        """Capacity was released on a Runtime: queue one :class:`CapacityReleased` item.

        Its cycle (:meth:`retry_parked`) runs where the Runtime's Pending Runs would have been
        queued, and decides as many of them, oldest first, as the released capacity can take.
        Nothing is queued when no Run of the Runtime is parked: every other Pending Run is
        still waiting for its first decision, which will see the released capacity.
        """
        if self.parked.holds(runtime_key(namespace, runtime)):
            self.queue.add(CapacityReleased(namespace, runtime))

    def _recount(self, run_uid: str, run: Run | None) -> None:
        """Set one Run's usage in the ledger: its assumption, else its cached version.

        Args:
            run_uid: the Run's UID.
            run: the cached Run of that UID's key (``None`` when gone or malformed; a Run
                of another UID, a newer incarnation of the name, counts as gone).
        """
        assumption = self.assumed.get(run_uid)
        if assumption is not None:
            self.ledger.count(run_uid, assumption.group, assumption.pod_uid, assumption.requests)
            return
        holder = capacity_holder(run) if run is not None and run.metadata.uid == run_uid else None
        if run is None or holder is None:
            self.ledger.uncount(run_uid)
            return
        group = runtime_key(run.metadata.namespace, run.spec.runtime)
        self.ledger.count(run_uid, group, holder, counted_requests(run))

    def _on_run(self, event: InformerEvent) -> None:
        obj = event.obj
        key = object_key(obj)
        meta = obj.get("metadata") or {}
        uid = str(meta.get("uid", ""))
        if event.type is EventType.DELETED:
            self.assumed.observe(uid, None)
            self._recount(uid, None)
            self._pending_since.pop(key, None)
            self.parked.discard(key)
            old = self._caches.parse_run(event.old or obj)
            if old is not None and capacity_holder(old) is not None:
                self.release(key[0], old.spec.runtime)
            return
        run = self._caches.parse_run(obj)
        if event.type is not EventType.RESYNC:
            self.assumed.observe(uid, str(meta.get("resourceVersion", "")))
            self._recount(uid, run)
        if run is None:
            self.parked.discard(key)
            return
        if run.status.phase is Phase.PENDING and not run.metadata.is_deleting:
            self._enqueue(key)
        else:
            self._pending_since.pop(key, None)
            self.parked.discard(key)
        if event.old is not None:
            old = self._caches.parse_run(event.old)
            if (
                old is not None
                and capacity_holder(old) is not None
                and capacity_holder(run) != capacity_holder(old)
            ):
                self.release(key[0], run.spec.runtime)

    def _on_pod(self, event: InformerEvent) -> None:
        """Wake the Runtime's Pending Runs when a Pod becomes schedulable (Ready, not deleting)."""
        if event.type is EventType.DELETED:
            return
        state = self._caches.pod_state(event.obj)
        if not state.schedulable or not state.runtime:
            return
        was = self._caches.pod_state(event.old).schedulable if event.old is not None else False
        if not was:
            self.wake_runtime(state.namespace, state.runtime)

    def _on_lease(self, event: InformerEvent) -> None:
        """Wake the Runtime's Pending Runs when a Pod's heartbeat turns fresh.

        A renewal of a Lease that was still fresh changes nothing and wakes nobody; one that
        comes after the old renewal lapsed (or a new Lease) does.
        """
        if event.type is EventType.DELETED:
            return
        meta = event.obj.get("metadata") or {}
        pod_name = pod_name_of_heartbeat_lease(str(meta.get("name", "")))
        if pod_name is None:
            return
        pod = self._caches.pods.get(str(meta.get("namespace", "")), pod_name)
        if pod is None:
            return
        state = self._caches.pod_state(pod)
        if not state.schedulable or not state.runtime:
            return
        now = self._caches.now()
        was_fresh = event.old is not None and heartbeat_fresh(event.old, state.uid, now.timestamp())
        if not was_fresh:
            self.wake_runtime(state.namespace, state.runtime)

    def _on_runtime(self, event: InformerEvent) -> None:
        if event.type is EventType.RESYNC:
            return
        meta = event.obj.get("metadata") or {}
        self.wake_runtime(str(meta.get("namespace", "")), str(meta.get("name", "")))

    # -- the scheduling cycle -------------------------------------------------------------

    def _usage_of(self, namespace: str, runtime: str) -> Mapping[str, Mapping[str, int]]:
        """Per-Pod usage of a Runtime's Runs, this process's assumed binds included."""
        return self.ledger.usage(runtime_key(namespace, runtime))

    def _current(self, key: RunKey) -> tuple[Obj, Run] | None:
        """The Run to decide on: the cache, or a fresher copy read after a bind conflict."""
        cached = self._caches.runs.get(*key)
        fresh = self._fresh.pop(key, None)
        if cached is None:
            return None
        if fresh is not None and (cached.get("metadata") or {}).get("resourceVersion") == fresh[0]:
            run = _parse(fresh[1])
            return (fresh[1], run) if run is not None else None
        run = self._caches.parse_run(cached)
        return (cached, run) if run is not None else None

    async def reconcile(self, key: QueueKey) -> Requeue | None:
        """One scheduling cycle: for the Run ``key`` (``(namespace, name)``), or a release."""
        if isinstance(key, CapacityReleased):
            self.retry_parked(key.namespace, key.runtime)
            return None
        return self._schedule(key)

    def retry_parked(self, namespace: str, runtime: str) -> None:
        """Decide the Runtime's parked Runs, oldest first, while released capacity lasts.

        Equivalent to queueing every Pending Run of the Runtime at this point, oldest first,
        and deciding each (what a release did before), without deciding the ones that
        cannot fit: when the oldest parked Run of a shape stays Pending, so would every
        younger Run of that shape (same Runtime, Pods, usage and requests), and that shape is
        done. If that Run's message changed (the Runtime's Pods changed meanwhile), the other
        Runs of its shape are queued to have their message rewritten too, as a full wake-up
        would. Cost: O(binds + shapes) decisions.
        """
        group = runtime_key(namespace, runtime)
        full: set[Shape] = set()
        while (head := self.parked.oldest(group, excluding=full)) is not None:
            key, shape = head
            try:
                result = self._schedule(key)
            except Exception:
                log.exception("scheduling %s/%s failed; retrying it through the queue", *key)
                self.parked.discard(key)
                self.queue.add(key)
                continue
            if result is not None and result.after is not None:
                self.queue.add_after(key, result.after)
            if key in self.parked:
                full.add(shape)
                if len(self.parked.messages(group, shape)) > 1:
                    for other in self.parked.keys(group, shape):
                        self._enqueue(other)

    def _schedule(self, key: RunKey) -> Requeue | None:
        """Decide on one Run and start what the decision asks for; parks it if it stays Pending.

        Raises:
            ResourceError: the Run's requests are malformed (the queue retries with backoff).
        """
        self.parked.discard(key)
        current = self._current(key)
        if current is None:
            self._pending_since.pop(key, None)
            return None
        obj, run = current
        if self.assumed.get(run.metadata.uid) is not None:
            return None  # bound by this process; the informer has not caught up yet
        namespace = run.metadata.namespace
        now = self._caches.now()
        runtime = self._caches.get_runtime(namespace, run.spec.runtime)
        pods = self._caches.pods_of_runtime(namespace, run.spec.runtime, now=now)
        usage = self._usage_of(namespace, run.spec.runtime)
        decision = decide_schedule(run, runtime=runtime, pods=pods, usage=usage, now=now)
        if isinstance(decision, Skip):
            self._pending_since.pop(key, None)
            return None
        if isinstance(decision, Backoff):
            return Requeue(after=decision.delay_seconds)
        writes = self._writes
        assert writes is not None, "reconcile runs only inside Scheduler.run"
        if isinstance(decision, Bind):
            assumption = self.assumed.assume(run, decision.pod.uid)
            self._recount(run.metadata.uid, run)
            # read now: the informer may deliver the bind (and drop the key) before the
            # bind's own response returns
            since = self._pending_since.get(key)
            writes.submit(functools.partial(self._bind, key, obj, run, decision, assumption, since))
            return None
        if isinstance(decision, Cancel):
            self._pending_since.pop(key, None)
            writes.submit(
                functools.partial(
                    self._write,
                    key,
                    obj,
                    decision.patch,
                    ("Normal", Reason.CANCELLED.value, "cancelled before it was scheduled"),
                )
            )
            return None
        assert isinstance(decision, Unschedulable)
        self._metrics.unschedulable_reason(decision.reason.value).inc()
        self.parked.park(
            key,
            group=runtime_key(namespace, run.spec.runtime),
            shape=shape_of(counted_requests(run)),
            age=self._caches.run_index.age(run),
            message=decision.message,
        )
        if decision.patch:
            writes.submit(
                functools.partial(
                    self._write,
                    key,
                    obj,
                    decision.patch,
                    ("Warning", "FailedScheduling", decision.message),
                )
            )
        return None

    async def _write(
        self, key: RunKey, obj: Obj, patch: Mapping[str, Any], event: tuple[str, str, str]
    ) -> None:
        """A conditional status write off the scheduling cycle, then its Event.

        A conflict or a vanished Run is left to the informer (the newer Run is queued
        again); other API errors retry the key after half a second.
        """
        try:
            await write_status_patch(self._kube, RUNS, obj, patch)
        except (Conflict, NotFound) as exc:
            log.debug("status write of %s/%s skipped: %s", *key, exc)
            return
        except KubeError as exc:
            log.warning("status write of %s/%s failed: %s", *key, exc)
            self.queue.add_after(key, 0.5)
            return
        kind, reason, message = event
        self._recorder.emit(obj, type_=kind, reason=reason, message=message)

    def _drop_assumption(self, key: RunKey, run: Run, assumption: Assumption) -> None:
        self.assumed.forget(run.metadata.uid, assumption)
        self._recount(run.metadata.uid, self._caches.get_run(*key))

    async def _bind(
        self,
        key: RunKey,
        obj: Obj,
        run: Run,
        decision: Bind,
        assumption: Assumption,
        since: float | None,
    ) -> None:
        """Send one bind; on 409 re-read the Run and schedule it again from the fresh copy.

        ``assumption`` is this bind's entry in the assumed cache (dropped if the bind fails);
        ``since`` is the trio time the Run was first queued as Pending (bind latency).
        """
        try:
            await write_status_patch(self._kube, RUNS, obj, decision.patch)
        except Conflict:
            self._metrics.bind_conflicts.inc()
            self._drop_assumption(key, run, assumption)
            try:
                fresh = await self._kube.get(RUNS, key[1], key[0])
            except NotFound:
                return
            except KubeError as exc:
                log.info("re-read of %s/%s after a conflict failed: %s", *key, exc)
                self.queue.add_after(key, 0.5)
                return
            stale = str((obj.get("metadata") or {}).get("resourceVersion", ""))
            self._fresh[key] = (stale, fresh)
            self._enqueue(key)
            return
        except NotFound:
            self._drop_assumption(key, run, assumption)
            return
        except KubeError as exc:
            self._drop_assumption(key, run, assumption)
            log.warning("bind of %s/%s failed: %s", *key, exc)
            self.queue.add_after(key, 0.5)
            return
        self.bound += 1
        self._metrics.binds.inc()
        self._pending_since.pop(key, None)
        if since is not None:
            self._metrics.bind_latency.observe(trio.current_time() - since)
        self._recorder.emit(
            obj,
            type_="Normal",
            reason="Scheduled",
            message=f"bound to Pod {decision.pod.name} (attempt {decision.attempt})",
        )

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Schedule until cancelled (the caller holds leadership). Queues every Pending Run first.

        Assumptions and queued writes belong to one term of leadership: each term starts
        with none and recounts the usage ledger from the cache.
        """
        self.assumed = AssumedBinds()
        self.parked.clear()
        self.ledger.clear()
        for run in self._caches.run_index.runs():
            self._recount(run.metadata.uid, run)
        writes = FifoWriters(MAX_CONCURRENT_BINDS)
        async with trio.open_nursery() as nursery:
            await nursery.start(writes.run)
            self._writes = writes
            for run in self._caches.run_index.pending():
                self._enqueue((run.metadata.namespace, run.metadata.name))
            await nursery.start(functools.partial(self.queue.run, self.reconcile, workers=1))
            task_status.started()


def _parse(obj: Obj) -> Run | None:
    try:
        return Run.from_dict(obj)
    except Exception:  # a malformed fresh read: leave it to the informer
        meta = obj.get("metadata") or {}
        log.warning("ignoring malformed Run %s/%s", meta.get("namespace"), meta.get("name"))
        return None
