"""The shared informers of the control plane, and typed, indexed views over them.

One informer per resource type (per watched namespace, or one for all namespaces) feeds every
loop: the scheduler, the reaper, the GC and the Runtime controller read the same caches and
register their handlers on them. Runs are parsed once per version and indexed by Runtime,
assigned Pod UID and Pending state (:class:`~krt.controlplane.run_index.RunIndex`, fed by
the first Run handler), so no event costs a scan of every Run. Runtimes are parsed once per
version too.

Informer indexes (see :data:`PODS_BY_RUNTIME`, ...) answer the other questions the loops ask
on every event: which Pods belong to a Runtime, which EndpointSlices belong to a Service.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any

import trio

from krt.api.constants import RUNTIME_LABEL
from krt.api.errors import ApiError
from krt.api.naming import MANAGED_BY_LABEL, MANAGED_BY_VALUE, runtime_service_name
from krt.api.run import Run
from krt.api.runtime import Runtime
from krt.controlplane.podstate import (
    PodState,
    heartbeat_deadline,
    heartbeat_expires_in,
    pod_state,
    ready_endpoint_pod_uids,
)
from krt.controlplane.run_index import RunIndex, RunKey, runtime_key
from krt.kube.client import Kube, Obj
from krt.kube.heartbeat import heartbeat_lease_name
from krt.kube.informer import EventType, Handler, IndexFunc, Informer, InformerEvent
from krt.kube.resources import (
    DEPLOYMENTS,
    ENDPOINTSLICES,
    LEASES,
    PODS,
    ROLEBINDINGS,
    ROLES,
    RUNS,
    RUNTIMES,
    SERVICEACCOUNTS,
    SERVICES,
    ResourceRef,
)

log = logging.getLogger(__name__)

__all__ = [
    "PODS_BY_RUNTIME",
    "SLICES_BY_SERVICE",
    "Caches",
    "InformerSet",
    "RunKey",
    "runtime_key",
]

PODS_BY_RUNTIME = "runtime"
"""Pod index: ``namespace/<kruntimes.io/runtime label>``."""
SLICES_BY_SERVICE = "service"
"""EndpointSlice index: ``namespace/<kubernetes.io/service-name label>``."""
SERVICE_NAME_LABEL = "kubernetes.io/service-name"


def _meta(obj: Obj) -> dict[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _pod_runtime(obj: Obj) -> Iterable[str]:
    runtime = (_meta(obj).get("labels") or {}).get(RUNTIME_LABEL)
    return [runtime_key(str(_meta(obj).get("namespace", "")), str(runtime))] if runtime else []


def _slice_service(obj: Obj) -> Iterable[str]:
    service = (_meta(obj).get("labels") or {}).get(SERVICE_NAME_LABEL)
    return [runtime_key(str(_meta(obj).get("namespace", "")), str(service))] if service else []


@dataclasses.dataclass(frozen=True, slots=True)
class _KeptPodState:
    """A Pod version and its Lease version, read once: both answers, and the deadline."""

    pod: Obj
    lease: Obj | None
    fresh: PodState
    stale: PodState
    deadline: float | None


class InformerSet:
    """The informers of one resource type, one per watched namespace (or one for all).

    Reads dispatch by namespace; handlers and indexes apply to every member.
    """

    def __init__(
        self,
        kube: Kube,
        ref: ResourceRef,
        namespaces: Sequence[str] | None,
        *,
        label_selector: str = "",
        resync_seconds: float | None = None,
    ) -> None:
        """Create the informers (not started; see :meth:`run`).

        Args:
            kube: the client.
            ref: the resource type.
            namespaces: the namespaces to watch, or ``None`` for all.
            label_selector: server-side filter.
            resync_seconds: periodic RESYNC re-delivery, seconds, or ``None``.
        """
        self.ref = ref
        spaces: list[str | None] = list(namespaces) if namespaces else [None]
        self._by_namespace: dict[str | None, Informer] = {
            ns: Informer(
                kube,
                ref,
                namespace=ns,
                label_selector=label_selector,
                resync_seconds=resync_seconds,
            )
            for ns in spaces
        }

    @property
    def informers(self) -> list[Informer]:
        """The member informers."""
        return list(self._by_namespace.values())

    def _for(self, namespace: str) -> Informer | None:
        return self._by_namespace.get(namespace) or self._by_namespace.get(None)

    def add_handler(self, handler: Handler) -> None:
        """Register ``handler`` on every member."""
        for informer in self._by_namespace.values():
            informer.add_handler(handler)

    def add_index(self, name: str, fn: IndexFunc) -> None:
        """Add index ``name`` to every member."""
        for informer in self._by_namespace.values():
            informer.add_index(name, fn)

    def get(self, namespace: str, name: str) -> Obj | None:
        """The cached object, or ``None``."""
        informer = self._for(namespace)
        return informer.get(namespace, name) if informer is not None else None

    def items(self) -> list[Obj]:
        """Every cached object of every member."""
        return [obj for informer in self._by_namespace.values() for obj in informer.items()]

    def by_index(self, name: str, value: str) -> list[Obj]:
        """Cached objects under ``value`` in index ``name`` (union over the members)."""
        return [
            obj
            for informer in self._by_namespace.values()
            for obj in informer.by_index(name, value)
        ]

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run every member; ``started()`` once all have synced. Never returns unless cancelled."""
        async with trio.open_nursery() as nursery:
            for informer in self._by_namespace.values():
                await nursery.start(informer.run)
            task_status.started()


class Caches:
    """All shared informers of the control plane, plus parsed and derived views.

    Args:
        kube: the client.
        namespaces: namespaces to watch, or ``None`` for all.
        now: the wall clock (heartbeat freshness is judged at read time).
        resync_seconds: periodic re-delivery of Runs and Runtimes (the fallback retry of
            every loop), seconds.
    """

    def __init__(
        self,
        kube: Kube,
        namespaces: Sequence[str] | None,
        *,
        now: Callable[[], datetime],
        resync_seconds: float | None = 30.0,
    ) -> None:
        self.now = now
        managed = f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"
        self.runs = InformerSet(kube, RUNS, namespaces, resync_seconds=resync_seconds)
        self.runtimes = InformerSet(kube, RUNTIMES, namespaces, resync_seconds=resync_seconds)
        self.pods = InformerSet(kube, PODS, namespaces, label_selector=RUNTIME_LABEL)
        self.leases = InformerSet(kube, LEASES, namespaces)
        self.slices = InformerSet(kube, ENDPOINTSLICES, namespaces)
        self.deployments = InformerSet(kube, DEPLOYMENTS, namespaces, label_selector=managed)
        self.services = InformerSet(kube, SERVICES, namespaces, label_selector=managed)
        self.service_accounts = InformerSet(
            kube, SERVICEACCOUNTS, namespaces, label_selector=managed
        )
        self.roles = InformerSet(kube, ROLES, namespaces, label_selector=managed)
        self.role_bindings = InformerSet(kube, ROLEBINDINGS, namespaces, label_selector=managed)
        self.pods.add_index(PODS_BY_RUNTIME, _pod_runtime)
        self.slices.add_index(SLICES_BY_SERVICE, _slice_service)
        #: The parsed, indexed Runs; updated before any other Run handler sees an event.
        self.run_index = RunIndex()
        self.runs.add_handler(self._index_run)
        self._runtimes_parsed: dict[tuple[str, str], tuple[Obj, Runtime | None]] = {}
        self.runtimes.add_handler(self._forget_runtime)
        self._pod_states: dict[tuple[str, str], _KeptPodState] = {}
        self.pods.add_handler(self._forget_pod)
        #: Ready endpoint Pod UIDs per Service key, with the slice versions they came from.
        self._endpoint_uids: dict[str, tuple[list[Obj], frozenset[str]]] = {}

    @property
    def all_sets(self) -> list[InformerSet]:
        """Every informer set, in start order (Runs last: their handlers read the others)."""
        return [
            self.runtimes,
            self.pods,
            self.leases,
            self.slices,
            self.deployments,
            self.services,
            self.service_accounts,
            self.roles,
            self.role_bindings,
            self.runs,
        ]

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run every informer; ``started()`` once all have synced. Never returns unless cancelled."""
        async with trio.open_nursery() as nursery:
            for informer_set in self.all_sets:
                await nursery.start(informer_set.run)
            task_status.started()

    # -- typed reads -----------------------------------------------------------------------

    def _index_run(self, event: InformerEvent) -> None:
        meta = _meta(event.obj)
        key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
        if event.type is EventType.DELETED:
            self.run_index.remove(key)
        else:
            self.run_index.upsert(key, event.obj)

    def _forget_runtime(self, event: InformerEvent) -> None:
        if event.type is EventType.DELETED:
            meta = _meta(event.obj)
            self._runtimes_parsed.pop(
                (str(meta.get("namespace", "")), str(meta.get("name", ""))), None
            )

    def parse_run(self, obj: Obj) -> Run | None:
        """Parse a Run dict; ``None`` (and a warning) if malformed.

        The cached version of a Run, and the version its latest event replaced, were parsed
        once when the informer delivered them; those parses are returned as they are. Any
        other dict (a fresh read) is parsed on the spot.
        """
        found, run = self.run_index.latest(obj)
        if found:
            return run
        meta = _meta(obj)
        key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
        found, run = self.run_index.parsed(key, obj)
        if found:
            return run
        try:
            return Run.from_dict(obj)
        except ApiError as exc:
            log.warning("ignoring malformed Run %s/%s: %s", key[0], key[1], exc)
            return None

    def get_run(self, namespace: str, name: str) -> Run | None:
        """The cached Run, parsed, or ``None``."""
        return self.run_index.get((namespace, name))

    def runs_of_runtime(self, namespace: str, runtime: str) -> list[Run]:
        """The cached Runs (parsed) naming ``runtime`` in ``namespace``."""
        return self.run_index.of_runtime(namespace, runtime)

    def pending_runs_of_runtime(self, namespace: str, runtime: str) -> list[Run]:
        """The cached Pending (not deleting) Runs of a Runtime, oldest first."""
        return self.run_index.pending_of_runtime(namespace, runtime)

    def runs_on_pod(self, pod_uid: str) -> list[Run]:
        """The cached Runs (parsed) whose ``assignedPodUID`` is ``pod_uid``."""
        return self.run_index.on_pod(pod_uid)

    def get_runtime(self, namespace: str, name: str) -> Runtime | None:
        """The cached Runtime, parsed, or ``None`` (also when malformed)."""
        obj = self.runtimes.get(namespace, name)
        if obj is None:
            return None
        kept = self._runtimes_parsed.get((namespace, name))
        if kept is not None and kept[0] is obj:
            return kept[1]
        try:
            runtime: Runtime | None = Runtime.from_dict(obj)
        except ApiError as exc:
            log.warning("ignoring malformed Runtime %s/%s: %s", namespace, name, exc)
            runtime = None
        self._runtimes_parsed[(namespace, name)] = (obj, runtime)
        return runtime

    def lease_of_pod(self, namespace: str, pod_name: str) -> Obj | None:
        """runtimed's heartbeat Lease of a Pod, or ``None``."""
        return self.leases.get(namespace, heartbeat_lease_name(pod_name))

    def pod_state(self, obj: Obj, *, now: datetime | None = None) -> PodState:
        """A cached Pod as :class:`PodState`, heartbeat judged at ``now`` (default: now).

        The Pod's fields and its heartbeat deadline are read once per (Pod, Lease) version;
        only the comparison with the current time is made on every call.

        Args:
            obj: the cached Pod.
            now: the wall-clock time to judge the heartbeat at (aware); read from the clock
                when ``None``.
        """
        meta = _meta(obj)
        namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        lease = self.lease_of_pod(namespace, name)
        kept = self._pod_states.get((namespace, name))
        if kept is None or kept.pod is not obj or kept.lease is not lease:
            state = pod_state(obj, lease=None, now=now or self.now())
            kept = _KeptPodState(
                pod=obj,
                lease=lease,
                fresh=dataclasses.replace(state, heartbeat_fresh=True),
                stale=dataclasses.replace(state, heartbeat_fresh=False),
                deadline=heartbeat_deadline(lease, state.uid),
            )
            self._pod_states[(namespace, name)] = kept
        if kept.deadline is not None and kept.deadline > (now or self.now()).timestamp():
            return kept.fresh
        return kept.stale

    def heartbeat_deadline_of(self, obj: Obj) -> float | None:
        """Until when a cached Pod's heartbeat Lease is fresh, or ``None`` if it never is.

        Seconds since the epoch (:func:`~krt.controlplane.podstate.heartbeat_deadline`), read
        once per (Pod, Lease) version like :meth:`pod_state`.

        Args:
            obj: the cached Pod.
        """
        self.pod_state(obj)
        meta = _meta(obj)
        kept = self._pod_states.get((str(meta.get("namespace", "")), str(meta.get("name", ""))))
        return kept.deadline if kept is not None else None

    def _forget_pod(self, event: InformerEvent) -> None:
        if event.type is EventType.DELETED:
            meta = _meta(event.obj)
            self._pod_states.pop((str(meta.get("namespace", "")), str(meta.get("name", ""))), None)

    def pods_of_runtime(
        self, namespace: str, runtime: str, *, now: datetime | None = None
    ) -> list[PodState]:
        """The Runtime's Pods as :class:`PodState` (heartbeats judged at ``now``, default now)."""
        now = now or self.now()
        return [
            self.pod_state(obj, now=now)
            for obj in self.pods.by_index(PODS_BY_RUNTIME, runtime_key(namespace, runtime))
        ]

    def next_heartbeat_expiry(self, namespace: str, runtime: str) -> float | None:
        """Seconds until the first fresh heartbeat of the Runtime's Pods lapses, or ``None``."""
        expiries = []
        for obj in self.pods.by_index(PODS_BY_RUNTIME, runtime_key(namespace, runtime)):
            meta = _meta(obj)
            lease = self.lease_of_pod(namespace, str(meta.get("name", "")))
            expiry = heartbeat_expires_in(lease, str(meta.get("uid", "")), self.now())
            if expiry is not None:
                expiries.append(expiry)
        return min(expiries) if expiries else None

    def endpoint_pod_uids(self, namespace: str, runtime: str) -> frozenset[str]:
        """UIDs of the Pods the Runtime's Service routes to (ready, not terminating)."""
        service = runtime_key(namespace, runtime_service_name(runtime))
        slices = self.slices.by_index(SLICES_BY_SERVICE, service)
        # asked on every Run event (the reaper's check); the answer changes only with a slice
        kept = self._endpoint_uids.get(service)
        if (
            kept is not None
            and len(kept[0]) == len(slices)
            and all(a is b for a, b in zip(kept[0], slices, strict=True))
        ):
            return kept[1]
        uids = ready_endpoint_pod_uids(slices)
        self._endpoint_uids[service] = (slices, uids)
        return uids
