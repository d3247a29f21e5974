"""ReplicaSet controller: keeps ``spec.replicas`` Pods of the template alive.

Rules (kube-controller-manager's ReplicaSet controller, simplified where noted):
Pods count when they match the selector, are controlled by the ReplicaSet (ownerReference
``controller: true`` with its uid; orphans are not adopted) and are active (not terminal,
no deletionTimestamp). Missing Pods are created as ``<rs-name>-<5 chars>`` with the
template's labels and a controller ownerReference; surplus Pods are deleted in Kubernetes
1.32's scale-down order (:func:`compare_for_deletion`: unbound, Pending, not ready, lowest
``controller.kubernetes.io/pod-deletion-cost``, Ready for the least time, most restarts,
newest). Creations and deletions not yet seen by the informer are remembered
("expectations") so a quick second pass never over-creates. Status: replicas,
fullyLabeledReplicas, readyReplicas, availableReplicas (ready for ``minReadySeconds``),
observedGeneration.
"""

from __future__ import annotations

import functools
import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import trio

from krt.kube.deletion_cost import pod_deletion_cost
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


#: The annotation a user (or a controller) sets on a Pod to steer ReplicaSet scale-down.

#: ``podPhaseToOrdinal``: phases missing here (none for active Pods) count as Pending (0).
_PHASE_ORDINAL: Final = {"Pending": 0, "Unknown": 1, "Running": 2}


def _ready_since(pod: Mapping[str, Any]) -> float | None:
    """``podReadyTime``: when the Ready condition became True (epoch s), None if not Ready."""
    if not is_ready(pod):
        return None
    for c in (pod.get("status") or {}).get("conditions", []) or []:
        if c.get("type") == "Ready" and c.get("status") == "True":
            return parse_time(c.get("lastTransitionTime"))
    return None


def _max_restarts(pod: Mapping[str, Any]) -> int:
    statuses = (pod.get("status") or {}).get("containerStatuses", []) or []
    return max((int(c.get("restartCount", 0) or 0) for c in statuses), default=0)


def _log_rank(since: float, now: float) -> int:
    """``int(log2(nanoseconds since since))``; -1 when ``since`` is not in the past."""
    nanos = (now - since) * 1e9
    return int(math.log2(nanos)) if nanos > 0 else -1


def _compare_times(a: float | None, b: float | None, uids: tuple[str, str], now: float) -> int:
    """Rules 6 and 8: the more recent time first, in logarithmic buckets of age.

    A missing (zero) time comes first (``afterOrZero``); times in the same bucket are
    ordered by Pod UID, a pseudo-random but stable order.
    """
    if a is None or b is None:
        return -1 if a is None else 1
    diff = _log_rank(a, now) - _log_rank(b, now)
    if diff == 0:
        return -1 if uids[0] < uids[1] else 1
    return -1 if diff < 0 else 1


def compare_for_deletion(a: Mapping[str, Any], b: Mapping[str, Any], *, now: float) -> int:
    """Which of two Pods a ReplicaSet deletes first when scaling down.

    Kubernetes 1.32's ``ActivePodsWithRanks.Less`` (pkg/controller/controller_utils.go) with
    ``LogarithmicScaleDown`` (GA since 1.31) and ``PodDeletionCost`` (beta, on by default)
    enabled. The first rule that tells the Pods apart decides:

    1. a Pod not assigned to a node (no ``spec.nodeName``) before an assigned one;
    2. by phase: Pending, then Unknown, then Running;
    3. a not Ready Pod before a Ready one;
    4. the lower ``controller.kubernetes.io/pod-deletion-cost`` first
       (:func:`pod_deletion_cost`; missing or invalid is 0);
    5. (Pods doubled up on one node first: localkube has one node, so this never decides);
    6. if both are Ready at different times: the one Ready for *less* time first, compared in
       logarithmic buckets (``int(log2(nanoseconds since Ready))``; a missing time first;
       equal buckets are ordered by UID);
    7. the Pod whose containers have restarted more (maximum ``restartCount``) first;
    8. at different creation times: the newer Pod first, in the same logarithmic buckets
       (equal buckets by UID).

    Args:
        a: a Pod.
        b: another Pod.
        now: the reference time of the logarithmic comparisons, epoch seconds (the caller's
            clock; the function reads none).

    Returns:
        Negative when ``a`` goes first, positive when ``b`` does, 0 when no rule decides.
    """
    node_a = str((a.get("spec") or {}).get("nodeName") or "")
    node_b = str((b.get("spec") or {}).get("nodeName") or "")
    if node_a != node_b and (not node_a or not node_b):
        return -1 if not node_a else 1
    phase_a = _PHASE_ORDINAL.get(str((a.get("status") or {}).get("phase")), 0)
    phase_b = _PHASE_ORDINAL.get(str((b.get("status") or {}).get("phase")), 0)
    if phase_a != phase_b:
        return -1 if phase_a < phase_b else 1
    if is_ready(a) != is_ready(b):
        return -1 if not is_ready(a) else 1
    cost_a, cost_b = pod_deletion_cost(a), pod_deletion_cost(b)
    if cost_a != cost_b:
        return -1 if cost_a < cost_b else 1
    uids = (str(a["metadata"].get("uid", "")), str(b["metadata"].get("uid", "")))
    if is_ready(a) and is_ready(b):
        ready_a, ready_b = _ready_since(a), _ready_since(b)
        if ready_a != ready_b:
            return _compare_times(ready_a, ready_b, uids, now)
    restarts_a, restarts_b = _max_restarts(a), _max_restarts(b)
    if restarts_a != restarts_b:
        return -1 if restarts_a > restarts_b else 1
    created_a = parse_time(str(a["metadata"].get("creationTimestamp", "")))
    created_b = parse_time(str(b["metadata"].get("creationTimestamp", "")))
    if created_a != created_b:
        return _compare_times(created_a, created_b, uids, now)
    return 0


def deletion_order(pods: Sequence[dict[str, Any]], *, now: float) -> list[dict[str, Any]]:
    """``pods`` sorted so the ones to delete first come first (:func:`compare_for_deletion`).

    Args:
        pods: active Pods of one ReplicaSet.
        now: the reference time, epoch seconds.
    """
    return sorted(pods, key=functools.cmp_to_key(functools.partial(compare_for_deletion, now=now)))


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
        now: epoch seconds (availability, and the scale-down order's reference time).
    """
    spec = rs.get("spec", {})
    desired = int(spec.get("replicas", 1))
    have = len(pods) + pending_creates
    create = max(0, desired - have)
    delete: list[dict[str, Any]] = []
    if have > desired and pending_creates == 0:
        delete = deletion_order(pods, now=now)[: have - desired]
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
