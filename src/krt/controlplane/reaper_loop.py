"""The stale-Run reaper: recovers Runs whose Runtime Pod is lost (the I/O around :mod:`.fencing`).

Issue 5, Stale-Run reaper; seed 000, Ownership Epoch and Fencing. A Run is checked when it
is assigned (and in scope, :func:`~krt.controlplane.fencing.in_scope`), and again whenever
something that could fence or lose its Pod changes: the Pod (including deletion and
replacement under the same name), the Runtime Service's EndpointSlices, or the Pod's
heartbeat Lease. The check is the reconcile's own decision, made in the handler: a Run on a
live Pod stops there, any other is queued for the reconcile (issue 6: no queue round trip
per bind, claim or heartbeat). A suspect but unfenced Run is re-checked every
:data:`RECHECK_SECONDS` (heartbeats expire without an event).

A Run no runtimed has claimed yet (phase Scheduled) on a live Pod whose heartbeat went stale
is unassigned instead (:mod:`krt.controlplane.unclaimed`): back to Pending with its attempt
unchanged, a ``NotClaimed`` Warning Event, and the scheduler places it again. A heartbeat
expires without any event, so while such a Run waits on a Pod whose heartbeat is fresh, the
Pod is re-checked once its Lease lapses (one timer per Pod, not per Run).

"Pod UID gone" is confirmed with one live GET of the Pod before anything is written (and
"heartbeat stale", before an unassignment, with one GET of the Lease): the caches may lag
(a new leader lists Pods before Runs), and a stale read must never fence a live assignment
or move a Run a live runtimed is about to claim. A recovery then writes the retry engine's patch with a conditional status update (requeue to
Pending with ``attempt + 1`` and reason ``PodLost``, or Failed), *then* removes the
registration-cleanup finalizer when the fence was "Pod UID gone", with a merge patch that
carries the Run's ``resourceVersion`` (conditional too). A 409 at either step re-reads from
the cache on the next pass.
"""

from __future__ import annotations

import functools
import logging

import trio

from krt.api.constants import REGISTRATION_CLEANUP_FINALIZER
from krt.api.patches import apply_merge_patch
from krt.api.retry import Retry
from krt.api.run import Run
from krt.controlplane.caches import Caches
from krt.controlplane.fencing import (
    Fence,
    Healthy,
    NotFenced,
    ReapDecision,
    Recover,
    decide_reap,
    in_scope,
)
from krt.controlplane.metrics import ControlPlaneMetrics
from krt.controlplane.podstate import pod_name_of_heartbeat_lease
from krt.controlplane.unclaimed import NOT_CLAIMED_EVENT_REASON, Unassign, never_claimed
from krt.kube.client import Kube, Obj
from krt.kube.errors import Conflict, NotFound
from krt.kube.events import EventSink
from krt.kube.heartbeat import heartbeat_fresh, heartbeat_lease_name
from krt.kube.informer import EventType, InformerEvent, object_key
from krt.kube.resources import LEASES, PODS, RUNS
from krt.kube.status import write_status
from krt.kube.workqueue import Requeue, WorkQueue

log = logging.getLogger(__name__)

RunKey = tuple[str, str]
#: Seconds between checks of a Run whose Pod looks lost but is not fenced yet.
RECHECK_SECONDS = 5.0
#: Seconds after a heartbeat Lease's expiry at which its Pod's unclaimed Runs are re-checked
#: (a margin for the difference between trio's clock and the wall clock).
LEASE_EXPIRY_SLACK_SECONDS = 0.5
#: Metrics label of an unassignment (``recoveries_total{fence=...,outcome="unassigned"}``).
UNCLAIMED_FENCE_LABEL = "HeartbeatStaleUnclaimed"


class Reaper:
    """Fences and recovers Runs of lost Runtime Pods; see the module docstring.

    Args:
        kube: the client.
        caches: the shared informers (handlers are registered here).
        metrics: recoveries are counted by fence and outcome.
        recorder: ``PodLost`` and ``NotClaimed`` Events.
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
        self.queue: WorkQueue[RunKey] = WorkQueue("reaper")
        #: Pod UIDs whose Runs to re-check when the Pod's heartbeat Lease lapses.
        self.lease_expiries: WorkQueue[str] = WorkQueue("reaper-lease-expiry")
        caches.runs.add_handler(self._on_run)
        caches.pods.add_handler(self._on_pod)
        caches.slices.add_handler(self._on_slice)
        caches.leases.add_handler(self._on_lease)
        metrics.track_queue("reaper", lambda: len(self.queue))

    # -- handlers ---------------------------------------------------------------------------

    def _on_run(self, event: InformerEvent) -> None:
        if event.type is EventType.DELETED:
            return
        run = self._caches.parse_run(event.obj)
        if run is not None:
            self._check(object_key(event.obj), run)

    def _check(self, key: RunKey, run: Run) -> None:
        """Queue ``key`` unless its Run is out of scope or :func:`decide_reap` says Healthy now.

        A Run on a live Pod (the common case: every bind, claim and heartbeat renewal) costs
        one decision here instead of a trip through the queue; a reconcile would decide on
        the same cache and do nothing. Anything else (or a decision that raises) is queued.
        """
        if not in_scope(run):
            return
        try:
            if isinstance(self._assess(key, run), Healthy):
                return
        except Exception:  # the reconcile raises it again, logs it and backs off
            log.debug("reap decision for %s/%s failed; queued", *key, exc_info=True)
        self.queue.add(key)

    def _assess(self, key: RunKey, run: Run) -> ReapDecision:
        """:func:`decide_reap` on the cached Pod, EndpointSlices and the clock.

        A Healthy Run no runtimed has claimed yet also arms its Pod's lease-expiry check:
        if the heartbeat lapses before the claim, that check unassigns the Run.
        """
        pod_obj = (
            self._caches.pods.get(key[0], run.status.assigned_pod)
            if run.status.assigned_pod
            else None
        )
        now = self._caches.now()
        pod = self._caches.pod_state(pod_obj, now=now) if pod_obj is not None else None
        in_endpoints = (run.status.assigned_pod_uid or "") in self._caches.endpoint_pod_uids(
            key[0], run.spec.runtime
        )
        decision = decide_reap(run, pod=pod, pod_in_endpoints=in_endpoints, now=now)
        if isinstance(decision, Healthy) and pod_obj is not None and never_claimed(run):
            deadline = self._caches.heartbeat_deadline_of(pod_obj)
            if deadline is not None:
                self.lease_expiries.add_after(
                    run.status.assigned_pod_uid or "",
                    max(0.0, deadline - now.timestamp()) + LEASE_EXPIRY_SLACK_SECONDS,
                )
        return decision

    async def _lease_expired(self, pod_uid: str) -> None:
        """Re-check the unclaimed Runs on Pod ``pod_uid`` once its heartbeat Lease may have lapsed.

        Only those: a claimed Run on a live Pod with a stale heartbeat is not recoverable
        (seed 000) and is re-checked by Pod and EndpointSlice events as before.
        """
        for run in self._caches.runs_on_pod(pod_uid):
            if never_claimed(run):
                self._check((run.metadata.namespace, run.metadata.name), run)

    def _wake_pod_uid(self, uid: str) -> None:
        for run in self._caches.runs_on_pod(uid):
            self._check((run.metadata.namespace, run.metadata.name), run)

    def _on_pod(self, event: InformerEvent) -> None:
        for obj in (event.obj, event.old):
            if obj is not None:
                self._wake_pod_uid(str((obj.get("metadata") or {}).get("uid", "")))

    def _on_slice(self, event: InformerEvent) -> None:
        for obj in (event.obj, event.old):
            for endpoint in (obj or {}).get("endpoints") or []:
                uid = (endpoint.get("targetRef") or {}).get("uid")
                if uid:
                    self._wake_pod_uid(str(uid))

    def _on_lease(self, event: InformerEvent) -> None:
        meta = event.obj.get("metadata") or {}
        pod_name = pod_name_of_heartbeat_lease(str(meta.get("name", "")))
        if pod_name is not None:
            pod = self._caches.pods.get(str(meta.get("namespace", "")), pod_name)
            if pod is not None:
                self._wake_pod_uid(str((pod.get("metadata") or {}).get("uid", "")))

    # -- reconcile --------------------------------------------------------------------------

    async def reconcile(self, key: RunKey) -> Requeue | None:
        """Check one Run's assignment and recover it if it is lost and fenced."""
        obj = self._caches.runs.get(*key)
        if obj is None:
            return None
        run = self._caches.parse_run(obj)
        if run is None or not in_scope(run):
            return None
        decision = self._assess(key, run)
        if isinstance(decision, Healthy):
            return None
        if isinstance(decision, NotFenced):
            log.debug("Run %s/%s: %s", *key, decision.why)
            return Requeue(after=RECHECK_SECONDS)
        if isinstance(decision, Unassign):
            if await self._heartbeat_still_fresh(run):
                # the Leases cache lags: never move a Run a live runtimed may claim
                return Requeue(after=RECHECK_SECONDS)
            await self._unassign(obj, decision)
            return None
        assert isinstance(decision, Recover)
        if decision.fence is Fence.POD_GONE and await self._pod_still_exists(run):
            # the Pod cache lags (e.g. a fresh leader's Pods list predates the bind): never
            # fence a live assignment on a stale read
            return Requeue(after=1.0)
        current = obj
        if decision.decision is not None:
            try:
                current = await write_status(
                    self._kube,
                    RUNS,
                    obj,
                    apply_merge_patch(obj.get("status"), decision.decision.patch),
                )
            except Conflict:
                return None  # the informer delivers the newer Run, which is queued again
            except NotFound:
                return None
            outcome = "requeued" if isinstance(decision.decision, Retry) else "failed"
            self._metrics.recoveries.labels(fence=decision.fence.value, outcome=outcome).inc()
            self._recorder.emit(
                obj,
                type_="Warning",
                reason="PodLost",
                message=f"{decision.message}; "
                + (
                    f"requeued as attempt {decision.decision.attempt}"
                    if isinstance(decision.decision, Retry)
                    else "no attempts left: Failed"
                ),
            )
        if decision.remove_finalizer:
            await self._remove_finalizer(current)
            if decision.decision is None:
                self._metrics.recoveries.labels(
                    fence=decision.fence.value, outcome="finalizer-removed"
                ).inc()
        return None

    async def _unassign(self, obj: Obj, decision: Unassign) -> None:
        """Write the unassignment (conditional: a claim that won the race makes it a 409)."""
        try:
            await write_status(
                self._kube, RUNS, obj, apply_merge_patch(obj.get("status"), decision.patch)
            )
        except (Conflict, NotFound):
            return  # claimed, changed or gone meanwhile: the informer delivers what it is now
        self._metrics.recoveries.labels(fence=UNCLAIMED_FENCE_LABEL, outcome="unassigned").inc()
        log.info("Run %s unassigned: %s", object_key(obj), decision.message)
        self._recorder.emit(
            obj, type_="Warning", reason=NOT_CLAIMED_EVENT_REASON, message=decision.message
        )

    async def _heartbeat_still_fresh(self, run: Run) -> bool:
        """Confirm "heartbeat stale" with a live read of the Lease before unassigning."""
        pod_name = run.status.assigned_pod or ""
        try:
            lease = await self._kube.get(
                LEASES, heartbeat_lease_name(pod_name), run.metadata.namespace
            )
        except NotFound:
            return False
        return heartbeat_fresh(
            lease, run.status.assigned_pod_uid or "", self._caches.now().timestamp()
        )

    async def _pod_still_exists(self, run: Run) -> bool:
        """Confirm "Pod UID gone" with a live read before acting on it (rare: only on loss)."""
        try:
            pod = await self._kube.get(PODS, run.status.assigned_pod or "", run.metadata.namespace)
        except NotFound:
            return False
        return bool((pod.get("metadata") or {}).get("uid") == run.status.assigned_pod_uid)

    async def _remove_finalizer(self, obj: Obj) -> None:
        meta = obj.get("metadata") or {}
        finalizers = list(meta.get("finalizers") or [])
        if REGISTRATION_CLEANUP_FINALIZER not in finalizers:
            return
        remaining = [f for f in finalizers if f != REGISTRATION_CLEANUP_FINALIZER]
        patch = {
            "metadata": {
                "resourceVersion": meta.get("resourceVersion"),
                "finalizers": remaining or None,
            }
        }
        try:
            await self._kube.patch(RUNS, str(meta["name"]), str(meta["namespace"]), patch)
        except (Conflict, NotFound) as exc:
            log.debug("finalizer removal on %s skipped: %s", object_key(obj), exc)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Reap until cancelled (the caller holds leadership). Checks every assigned Run first."""
        for obj in self._caches.runs.items():
            run = self._caches.parse_run(obj)
            if run is not None and in_scope(run):
                self.queue.add(object_key(obj))
        async with trio.open_nursery() as nursery:
            await nursery.start(functools.partial(self.queue.run, self.reconcile, workers=4))
            await nursery.start(
                functools.partial(self.lease_expiries.run, self._lease_expired, workers=1)
            )
            task_status.started()
