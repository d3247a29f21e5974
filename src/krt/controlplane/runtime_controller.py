"""The Runtime controller: keeps each Runtime's pool objects and status current.

Issue 5, Runtime controller. The desired objects and status come from
:mod:`krt.controlplane.runtime_resources` (pure); this module compares them with the
informer caches and writes the difference: a missing object is created (a deleted
Deployment comes back), a drifted one is replaced conditionally (its ``resourceVersion``),
and the status is written conditionally when it changed. Children carry a controller owner
reference, so deleting the Runtime lets the garbage collector remove them.

A Runtime key is queued when the Runtime changes, when one of its children changes or
disappears (found by the ``kruntimes.io/runtime`` label), and when one of its Pods or their
heartbeat Leases changes (``readyReplicas``), and again just after the earliest heartbeat of
its Pods would lapse (an expiry sends no event). The Runtimes informer's RESYNC re-checks
every Runtime periodically as a fallback.

Before an update that lowers the Deployment's ``spec.replicas``, the controller sets each
Pod's ``controller.kubernetes.io/pod-deletion-cost`` to its number of non-terminal Runs
(:mod:`krt.controlplane.deletion_cost`), so the ReplicaSet removes the least busy Pods.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from typing import Any

import trio

from krt.api.constants import RUNTIME_LABEL
from krt.api.patches import apply_merge_patch
from krt.controlplane.caches import PODS_BY_RUNTIME, Caches, InformerSet
from krt.controlplane.deletion_cost import busy_runs_by_pod, deletion_cost_patches
from krt.controlplane.metrics import ControlPlaneMetrics
from krt.controlplane.podstate import pod_name_of_heartbeat_lease
from krt.controlplane.run_index import runtime_key
from krt.controlplane.runtime_resources import (
    RuntimedWiring,
    desired_objects,
    merge_for_update,
    needs_update,
)
from krt.controlplane.runtime_status import runtime_status_patch
from krt.kube.client import Kube, Obj
from krt.kube.errors import AlreadyExists, BadRequest, Conflict, Forbidden, Invalid, NotFound
from krt.kube.events import EventSink
from krt.kube.informer import InformerEvent
from krt.kube.resources import (
    DEPLOYMENTS,
    PODS,
    ROLEBINDINGS,
    ROLES,
    RUNTIMES,
    SERVICEACCOUNTS,
    SERVICES,
    ResourceRef,
)
from krt.kube.status import write_status
from krt.kube.workqueue import Requeue, WorkQueue

log = logging.getLogger(__name__)

RuntimeKey = tuple[str, str]


class RuntimeController:
    """Reconciles Runtimes; see the module docstring.

    Args:
        kube: the client.
        caches: the shared informers (handlers are registered here).
        metrics: queue depth is reported.
        recorder: ``InvalidTemplate`` and ``Created``/``Updated`` Events.
        wiring: the installation's gateway URL, gateway CA ConfigMap and peer TLS Secret
            given to every runtimed sidecar (``None``: none of them).
    """

    def __init__(
        self,
        kube: Kube,
        caches: Caches,
        *,
        metrics: ControlPlaneMetrics,
        recorder: EventSink,
        wiring: RuntimedWiring | None = None,
    ) -> None:
        self._kube = kube
        self._wiring = wiring or RuntimedWiring()
        self._caches = caches
        self._recorder = recorder
        self.queue: WorkQueue[RuntimeKey] = WorkQueue("runtimes")
        self._children: dict[str, tuple[ResourceRef, InformerSet]] = {
            "ServiceAccount": (SERVICEACCOUNTS, caches.service_accounts),
            "Role": (ROLES, caches.roles),
            "RoleBinding": (ROLEBINDINGS, caches.role_bindings),
            "Service": (SERVICES, caches.services),
            "Deployment": (DEPLOYMENTS, caches.deployments),
        }
        caches.runtimes.add_handler(self._on_runtime)
        for _, informer_set in self._children.values():
            informer_set.add_handler(self._on_labelled)
        caches.pods.add_handler(self._on_labelled)
        caches.leases.add_handler(self._on_lease)
        metrics.track_queue("runtimes", lambda: len(self.queue))

    def _on_runtime(self, event: InformerEvent) -> None:
        meta = event.obj.get("metadata") or {}
        self.queue.add((str(meta.get("namespace", "")), str(meta.get("name", ""))))

    def _on_labelled(self, event: InformerEvent) -> None:
        meta = event.obj.get("metadata") or {}
        runtime = (meta.get("labels") or {}).get(RUNTIME_LABEL)
        if runtime:
            self.queue.add((str(meta.get("namespace", "")), str(runtime)))

    def _on_lease(self, event: InformerEvent) -> None:
        meta = event.obj.get("metadata") or {}
        pod_name = pod_name_of_heartbeat_lease(str(meta.get("name", "")))
        if pod_name is not None:
            pod = self._caches.pods.get(str(meta.get("namespace", "")), pod_name)
            if pod is not None:
                self._on_labelled(InformerEvent(event.type, pod))

    async def reconcile(self, key: RuntimeKey) -> Requeue | None:
        """Create or repair a Runtime's children, then write its status."""
        namespace, name = key
        obj = self._caches.runtimes.get(namespace, name)
        runtime = self._caches.get_runtime(namespace, name)
        if obj is None or runtime is None or runtime.metadata.is_deleting:
            return None
        try:
            desired = desired_objects(runtime, self._wiring)
        except ValueError as exc:
            self._recorder.emit(obj, type_="Warning", reason="InvalidTemplate", message=str(exc))
            log.warning("Runtime %s/%s: %s", namespace, name, exc)
            return None
        requeue = False
        blocked = False
        for want in desired:
            ref, informer_set = self._children[want["kind"]]
            have = informer_set.get(namespace, want["metadata"]["name"])
            try:
                # Strict: a field the user misspelled in spec.template is refused (and
                # reported below) instead of silently dropped by the API server
                if have is None:
                    await self._kube.create(ref, want, field_validation="Strict")
                    log.info("Runtime %s/%s: created %s", namespace, name, want["kind"])
                elif needs_update(have, want):
                    if want["kind"] == "Deployment":
                        await self._mark_busy_pods(namespace, name, have, want)
                    await self._kube.replace(
                        ref, merge_for_update(have, want), field_validation="Strict"
                    )
                    log.info("Runtime %s/%s: updated %s", namespace, name, want["kind"])
            except AlreadyExists:
                if not await self._owned_elsewhere(ref, want, obj):
                    requeue = True  # ours: the cache is behind; its event queues this key
                else:
                    blocked = True
            except (Conflict, NotFound):
                requeue = True  # the cache is behind; its event queues this key again
            except (Invalid, BadRequest) as exc:
                self._recorder.emit(
                    obj, type_="Warning", reason="InvalidTemplate", message=str(exc)
                )
                log.warning("Runtime %s/%s: %s rejected: %s", namespace, name, want["kind"], exc)
        deployment = self._caches.deployments.get(namespace, desired[-1]["metadata"]["name"])
        patch = runtime_status_patch(
            runtime,
            deployment=deployment,
            pods=self._caches.pods_of_runtime(namespace, name),
            now=self._caches.now(),
        )
        if patch:
            try:
                await write_status(
                    self._kube, RUNTIMES, obj, apply_merge_patch(_status(obj), patch)
                )
            except (Conflict, NotFound):
                requeue = True
        if blocked:
            return Requeue(after=None)  # exponential backoff until the name is freed
        if requeue:
            return Requeue(after=1.0)
        expiry = self._caches.next_heartbeat_expiry(namespace, name)
        # re-check when a heartbeat would lapse: readyReplicas must drop without an event
        return Requeue(after=expiry + 0.1) if expiry is not None else None

    async def _mark_busy_pods(
        self, namespace: str, name: str, have: Mapping[str, Any], want: Mapping[str, Any]
    ) -> None:
        """Before a scale-down, set each Pod's deletion cost to its number of busy Runs.

        See :mod:`krt.controlplane.deletion_cost`: the ReplicaSet then deletes the least busy
        Pods first. One merge patch per Pod whose cost changes, none unless ``want`` lowers
        ``spec.replicas``. Best effort: a Pod already gone is skipped, and without the
        ``patch pods`` permission (an older ClusterRole) the scale-down proceeds unmarked,
        with a warning. Other API errors propagate (the reconcile is retried).
        """
        current = (have.get("spec") or {}).get("replicas")
        patches = deletion_cost_patches(
            self._caches.pods.by_index(PODS_BY_RUNTIME, runtime_key(namespace, name)),
            busy_runs_by_pod(self._caches.runs_of_runtime(namespace, name)),
            current_replicas=current if isinstance(current, int) else None,
            desired_replicas=int(want["spec"]["replicas"]),
        )
        for cost in patches:
            try:
                await self._kube.patch(PODS, cost.pod_name, namespace, cost.patch)
            except NotFound:
                continue  # deleted meanwhile: nothing to protect
            except Forbidden as exc:
                log.warning(
                    "Runtime %s/%s: cannot mark busy Pods before scaling down (%s); the "
                    "ReplicaSet may remove a Pod that holds Runs",
                    namespace,
                    name,
                    exc,
                )
                return
            log.info(
                "Runtime %s/%s: Pod %s deletion cost %d before scaling down",
                namespace,
                name,
                cost.pod_name,
                cost.cost,
            )

    async def _owned_elsewhere(
        self, ref: ResourceRef, want: Mapping[str, Any], runtime_obj: Mapping[str, Any]
    ) -> bool:
        """True (and a Warning Event) when an object of that name exists but is not ours."""
        meta = want["metadata"]
        try:
            existing = await self._kube.get(ref, meta["name"], meta["namespace"])
        except NotFound:
            return False
        uid = (runtime_obj.get("metadata") or {}).get("uid")
        owners = (existing.get("metadata") or {}).get("ownerReferences") or []
        if any(owner.get("uid") == uid for owner in owners):
            return False
        message = (
            f'{want["kind"]} "{meta["name"]}" already exists and is not owned by this Runtime; '
            "delete or rename it"
        )
        self._recorder.emit(runtime_obj, type_="Warning", reason="NameConflict", message=message)
        log.warning(
            "Runtime %s/%s: %s", meta["namespace"], runtime_obj["metadata"]["name"], message
        )
        return True

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Reconcile until cancelled (the caller holds leadership). Checks every Runtime first."""
        for obj in self._caches.runtimes.items():
            meta = obj.get("metadata") or {}
            self.queue.add((str(meta.get("namespace", "")), str(meta.get("name", ""))))
        async with trio.open_nursery() as nursery:
            await nursery.start(functools.partial(self.queue.run, self.reconcile, workers=2))
            task_status.started()


def _status(obj: Mapping[str, Any]) -> Obj | None:
    status = obj.get("status")
    return dict(status) if isinstance(status, Mapping) else None
