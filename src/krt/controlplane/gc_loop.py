"""Completed-Run GC: deletes terminal Runs ``ttlSecondsAfterFinished`` after completion.

Issue 5, Completed-Run GC; seed 000 (Ready is never collected: only terminal phases are,
:func:`krt.api.phases.gc_deadline`). Each Run with a deadline gets a timer of its own (the
work queue's ``add_after``: one heap served by one task, no scan loop); any change to the
Run (a new TTL, a restored phase) re-arms it. When the timer fires the Run is re-checked
against the cache and deleted with a UID precondition, so a Run recreated under the same
name is never deleted by its predecessor's timer.

Wall-clock deadlines become trio delays at arming time (``deadline - now``), so the GC runs
on ``autojump_clock`` in tests.
"""

from __future__ import annotations

import functools
import logging

import trio

from krt.api.phases import gc_deadline
from krt.controlplane.caches import Caches
from krt.controlplane.metrics import ControlPlaneMetrics
from krt.kube.client import Kube, Obj
from krt.kube.errors import Conflict, NotFound
from krt.kube.informer import EventType, InformerEvent, object_key
from krt.kube.resources import RUNS
from krt.kube.workqueue import Requeue, WorkQueue

log = logging.getLogger(__name__)

RunKey = tuple[str, str]


class CompletedRunGC:
    """Deletes finished Runs after their TTL; see the module docstring.

    Args:
        kube: the client.
        caches: the shared informers (a handler is registered on Runs).
        metrics: deletions are counted.
    """

    def __init__(self, kube: Kube, caches: Caches, *, metrics: ControlPlaneMetrics) -> None:
        self._kube = kube
        self._caches = caches
        self._metrics = metrics
        self.queue: WorkQueue[RunKey] = WorkQueue("gc")
        caches.runs.add_handler(self._on_run)
        metrics.track_queue("gc", lambda: len(self.queue))

    def _arm(self, obj: Obj) -> None:
        run = self._caches.parse_run(obj)
        if run is None or run.metadata.is_deleting:
            return
        deadline = gc_deadline(
            run.status.phase,
            completion_time=run.status.completion_time,
            ttl_seconds_after_finished=run.spec.ttl_seconds_after_finished,
        )
        if deadline is None:
            return
        delay = (deadline - self._caches.now()).total_seconds()
        self.queue.add_after(object_key(obj), delay)

    def _on_run(self, event: InformerEvent) -> None:
        if event.type is EventType.DELETED:
            return
        self._arm(event.obj)

    async def reconcile(self, key: RunKey) -> Requeue | None:
        """Delete the Run if its deadline has passed (re-checked on the cached Run)."""
        obj = self._caches.runs.get(*key)
        if obj is None:
            return None
        run = self._caches.parse_run(obj)
        if run is None or run.metadata.is_deleting:
            return None
        deadline = gc_deadline(
            run.status.phase,
            completion_time=run.status.completion_time,
            ttl_seconds_after_finished=run.spec.ttl_seconds_after_finished,
        )
        if deadline is None:
            return None
        remaining = (deadline - self._caches.now()).total_seconds()
        if remaining > 0:
            return Requeue(after=remaining)
        try:
            await self._kube.delete(
                RUNS,
                key[1],
                key[0],
                preconditions={"uid": run.metadata.uid},
                propagation_policy="Background",
            )
        except (NotFound, Conflict):
            return None
        self._metrics.gc_deleted.inc()
        log.info(
            "deleted Run %s/%s: %s %ss after completion",
            *key,
            run.status.phase.value,
            run.spec.ttl_seconds_after_finished,
        )
        return None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Collect until cancelled (the caller holds leadership). Arms every cached Run first."""
        for obj in self._caches.runs.items():
            self._arm(obj)
        async with trio.open_nursery() as nursery:
            await nursery.start(functools.partial(self.queue.run, self.reconcile, workers=2))
            task_status.started()
