"""ReplicaSet controller: keeps ``spec.replicas`` Pods of the template alive.

Rules (kube-controller-manager's ReplicaSet controller, simplified where noted):
Pods count when they match the selector, are controlled by the ReplicaSet (ownerReference
``controller: true`` with its uid; orphans are not adopted) and are active (not terminal,
no deletionTimestamp). Missing Pods are created as ``<rs-name>-<5 chars>`` with the
template's labels and a controller ownerReference; surplus Pods are deleted, cheapest first
(unbound, then Pending, then not ready, then most restarts, then newest). Creations and
deletions not yet seen by the informer are remembered ("expectations") so a quick second
pass never over-creates. Status: replicas, fullyLabeledReplicas, readyReplicas,
availableReplicas (ready for ``minReadySeconds``), observedGeneration.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import trio

from localkube.controllers.common import (
    controller_of,
    is_active,
    is_available,
    is_ready,
    owner_reference,
    parse_time,
    random_suffix,
    selector_matches,
)
from localkube.controllers.events import EventRecorder
from localkube.controllers.informer import Informer, KeyedQueue, ObjectKey, key_of
from localkube.controllers.kubeapi import ApiStatusError, Kube, collection_path

log = logging.getLogger(__name__)


def owned_pods(rs: Mapping[str, Any], pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pods in the ReplicaSet's namespace that it controls and its selector matches."""
    uid = rs["metadata"]["uid"]
    ns = rs["metadata"].get("namespace")
    selector = rs.get("spec", {}).get("selector")
    out = []
    for p in pods:
        ref = controller_of(p)
        if p["metadata"].get("namespace") != ns or ref is None or ref.get("uid") != uid:
            continue
        if selector_matches(selector, p["metadata"].get("labels") or {}):
            out.append(p)
    return out


def deletion_rank(pod: Mapping[str, Any]) -> tuple[int, int, int, int, float]:
    """Sort key: Pods that sort first are deleted first when scaling down."""
    status = pod.get("status") or {}
    restarts = sum(int(c.get("restartCount", 0)) for c in status.get("containerStatuses", []) or [])
    created = str(pod["metadata"].get("creationTimestamp", ""))
    return (
        0 if not pod.get("spec", {}).get("nodeName") else 1,
        0 if status.get("phase") == "Pending" else 1,
        0 if not is_ready(pod) else 1,
        -restarts,
        -(parse_time(created) or 0.0),  # newest first
    )


@dataclass(frozen=True)
class ReplicaSetPlan:
    """What to do for one ReplicaSet: ``create`` Pods, ``delete`` these Pods, write
    ``status``."""

    create: int
    delete: list[dict[str, Any]]
    status: dict[str, Any]


def plan_replicaset(
    rs: Mapping[str, Any], pods: list[dict[str, Any]], *, pending_creates: int, now: float
) -> ReplicaSetPlan:
    """Decide the Pods to create or delete and the new status.

    Args:
        rs: the ReplicaSet.
        pods: the active Pods it controls (see :func:`owned_pods`, filtered by ``is_active``).
        pending_creates: Pods created but not yet seen by the informer.
        now: epoch seconds (for availability).
    """
    spec = rs.get("spec", {})
    desired = int(spec.get("replicas", 1))
    have = len(pods) + pending_creates
    create = max(0, desired - have)
    delete: list[dict[str, Any]] = []
    if have > desired and pending_creates == 0:
        delete = sorted(pods, key=deletion_rank)[: have - desired]
    template_labels = (spec.get("template", {}).get("metadata", {}) or {}).get("labels") or {}
    min_ready = int(spec.get("minReadySeconds", 0))
    status = {
        "replicas": len(pods),
        "fullyLabeledReplicas": sum(
            1
            for p in pods
            if all(
                (p["metadata"].get("labels") or {}).get(k) == v for k, v in template_labels.items()
            )
        ),
        "readyReplicas": sum(1 for p in pods if is_ready(p)),
        "availableReplicas": sum(1 for p in pods if is_available(p, min_ready, now)),
        "observedGeneration": int(rs["metadata"].get("generation", 1)),
    }
    return ReplicaSetPlan(create, delete, status)


def pod_from_template(rs: Mapping[str, Any]) -> dict[str, Any]:
    """A new Pod for the ReplicaSet (name ``<rs>-<5 chars>``, controller ownerReference)."""
    template = rs.get("spec", {}).get("template", {})
    tmeta = template.get("metadata") or {}
    meta: dict[str, Any] = {
        "name": f"{rs['metadata']['name']}-{random_suffix()}",
        "namespace": rs["metadata"]["namespace"],
        "labels": dict(tmeta.get("labels") or {}),
        "ownerReferences": [owner_reference(rs, api_version="apps/v1", kind="ReplicaSet")],
    }
    if tmeta.get("annotations"):
        meta["annotations"] = dict(tmeta["annotations"])
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": dict(template.get("spec") or {}),
    }


class ReplicaSetController:
    """Reconciles ReplicaSets from the shared ``replicasets`` and ``pods`` informers."""

    def __init__(
        self, kube: Kube, replicasets: Informer, pods: Informer, events: EventRecorder | None = None
    ) -> None:
        self.kube = kube
        self.events = events
        self.replicasets = replicasets
        self.pods = pods
        self.queue: KeyedQueue[ObjectKey] = KeyedQueue(self.reconcile, name="replicaset")
        self.expected_creates: dict[ObjectKey, set[str]] = {}
        self.expected_deletes: dict[ObjectKey, set[str]] = {}
        replicasets.add_handler(lambda _t, obj: self.queue.add(key_of(obj)))
        pods.add_handler(self._on_pod)

    def _on_pod(self, etype: str, pod: dict[str, Any]) -> None:
        ref = controller_of(pod)
        if ref is None or ref.get("kind") != "ReplicaSet":
            return
        key = (pod["metadata"].get("namespace", ""), str(ref.get("name")))
        self.expected_creates.get(key, set()).discard(pod["metadata"]["name"])
        if etype == "DELETED":
            self.expected_deletes.get(key, set()).discard(pod["metadata"]["uid"])
        self.queue.add(key)

    async def reconcile(self, key: ObjectKey) -> None:
        """Bring one ReplicaSet's Pods and status in line with its spec."""
        rs = self.replicasets.cache.get(key)
        if rs is None:
            self.expected_creates.pop(key, None)
            self.expected_deletes.pop(key, None)
            return
        deleting = self.expected_deletes.setdefault(key, set())
        pods = [
            p
            for p in owned_pods(rs, self.pods.items())
            if is_active(p) and p["metadata"]["uid"] not in deleting
        ]
        creating = self.expected_creates.setdefault(key, set())
        plan = plan_replicaset(rs, pods, pending_creates=len(creating), now=time.time())
        if rs["metadata"].get("deletionTimestamp"):
            plan = ReplicaSetPlan(0, [], plan.status)
        ns = key[0]
        pods_path = collection_path("v1", "pods", ns)
        for _ in range(plan.create):
            body = pod_from_template(rs)
            creating.add(body["metadata"]["name"])
            try:
                await self.kube.create(pods_path, body)
            except BaseException:
                creating.discard(body["metadata"]["name"])
                raise
            self._record(rs, "SuccessfulCreate", f"Created pod: {body['metadata']['name']}")
        for pod in plan.delete:
            deleting.add(pod["metadata"]["uid"])
            await self.kube.delete(
                f"{pods_path}/{pod['metadata']['name']}",
                body={"preconditions": {"uid": pod["metadata"]["uid"]}},
            )
            self._record(rs, "SuccessfulDelete", f"Deleted pod: {pod['metadata']['name']}")
        if (rs.get("status") or {}) != {**(rs.get("status") or {}), **plan.status}:
            path = collection_path("apps/v1", "replicasets", ns) + f"/{key[1]}/status"
            try:
                await self.kube.merge_patch(path, {"status": plan.status})
            except ApiStatusError as exc:
                if exc.code != 404:
                    raise

    def _record(self, rs: Mapping[str, Any], reason: str, message: str) -> None:
        if self.events is not None:
            obj = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": rs["metadata"]}
            self.events.record(obj, "Normal", reason, message, component="replicaset-controller")

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the work queue; never returns unless cancelled."""
        await self.queue.run(task_status=task_status)
