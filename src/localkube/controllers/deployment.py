"""Deployment controller: Deployment -> ReplicaSets, rolling template changes.

Rules (kube-controller-manager's Deployment controller, simplified where noted):
the template's hash (FNV-1a of its canonical JSON and ``status.collisionCount``, encoded
like kube's ``SafeEncodeString``) is the ``pod-template-hash`` label of the new ReplicaSet
``<deployment>-<hash>`` and of its Pods and selector. ``RollingUpdate`` scales the new
ReplicaSet up within ``maxSurge`` (default 25%, rounded up) and old ones down while at
least ``replicas - maxUnavailable`` (default 25%, rounded down) Pods stay available
(unavailable old Pods go first); ``Recreate`` scales old ReplicaSets to zero and starts the
new one once their Pods are gone. Revisions (``deployment.kubernetes.io/revision``) count
up per template; old ReplicaSets beyond ``revisionHistoryLimit`` (10) are deleted when
empty. ``spec.paused`` stops rollouts. Status: replicas, updatedReplicas, readyReplicas,
availableReplicas, unavailableReplicas, observedGeneration and the Available and
Progressing conditions (progress deadlines are not enforced).
"""

from __future__ import annotations

import copy
import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import trio

from localkube.controllers.common import (
    controller_of,
    fnv32a,
    now_rfc3339,
    owner_reference,
    safe_encode,
)
from localkube.controllers.events import EventRecorder
from localkube.controllers.informer import Informer, KeyedQueue, ObjectKey, key_of
from localkube.controllers.kubeapi import ApiStatusError, Kube, collection_path

HASH_LABEL = "pod-template-hash"
REVISION = "deployment.kubernetes.io/revision"


def template_hash(template: Mapping[str, Any], collision_count: int = 0) -> str:
    """Return the ``pod-template-hash`` of a Pod template (stable across runs)."""
    data = json.dumps(template, sort_keys=True, separators=(",", ":")).encode()
    if collision_count:
        data += str(collision_count).encode()
    return safe_encode(str(fnv32a(data)))


def resolve_fraction(value: int | str | None, total: int, *, round_up: bool, default: str) -> int:
    """Resolve an int-or-percent (``maxSurge``/``maxUnavailable``) against ``total``.

    Raises:
        ValueError: for a malformed percentage or a negative value.
    """
    raw: int | str = default if value is None else value
    if isinstance(raw, int):
        if raw < 0:
            raise ValueError(f"must be >= 0, got {raw}")
        return raw
    if not raw.endswith("%") or not raw[:-1].isdigit():
        raise ValueError(f"must be an integer or a percentage like '25%', got {raw!r}")
    exact = int(raw[:-1]) * total / 100
    return math.ceil(exact) if round_up else math.floor(exact)


def revision_of(rs: Mapping[str, Any]) -> int:
    """The ReplicaSet's revision annotation (0 if absent)."""
    value = (rs.get("metadata", {}).get("annotations") or {}).get(REVISION, "0")
    return int(value) if str(value).isdigit() else 0


def _spec_replicas(rs: Mapping[str, Any]) -> int:
    return int(rs.get("spec", {}).get("replicas", 0))


def _st(rs: Mapping[str, Any], name: str) -> int:
    return int((rs.get("status") or {}).get(name, 0) or 0)


@dataclass
class RolloutPlan:
    """Target ``spec.replicas`` per ReplicaSet name (only changes), plus status."""

    scale: dict[str, int] = field(default_factory=dict)
    status: dict[str, Any] = field(default_factory=dict)


def plan_rollout(
    deployment: Mapping[str, Any],
    new_rs: Mapping[str, Any],
    old_rss: Sequence[Mapping[str, Any]],
    *,
    now: float,
) -> RolloutPlan:
    """Decide ReplicaSet sizes and the Deployment status for one reconcile pass.

    Args:
        deployment: the Deployment.
        new_rs: the ReplicaSet of the current template (already exists).
        old_rss: the other ReplicaSets it controls.
        now: epoch seconds, for condition timestamps.

    Raises:
        ValueError: for a malformed maxSurge/maxUnavailable.
    """
    spec = deployment.get("spec", {})
    desired = int(spec.get("replicas", 1))
    strategy = spec.get("strategy") or {}
    plan = RolloutPlan()
    new_name = new_rs["metadata"]["name"]
    new_target = _spec_replicas(new_rs)
    targets = {rs["metadata"]["name"]: _spec_replicas(rs) for rs in old_rss}
    surge = unavailable = 0
    if strategy.get("type") == "Recreate":
        for name in targets:
            targets[name] = 0
        if all(_st(rs, "replicas") == 0 for rs in old_rss):
            new_target = desired
    else:
        ru = strategy.get("rollingUpdate") or {}
        surge = resolve_fraction(ru.get("maxSurge"), desired, round_up=True, default="25%")
        unavailable = resolve_fraction(
            ru.get("maxUnavailable"), desired, round_up=False, default="25%"
        )
        if surge == 0 and unavailable == 0:
            unavailable = 1 if desired else 0
        if not spec.get("paused"):
            total = new_target + sum(targets.values())
            if new_target < desired:
                new_target = min(desired, new_target + max(0, desired + surge - total))
            elif new_target > desired:
                new_target = desired
            available = _st(new_rs, "availableReplicas") + sum(
                _st(rs, "availableReplicas") for rs in old_rss
            )
            budget = max(0, available - (desired - unavailable))
            for rs in sorted(
                old_rss, key=lambda r: str(r["metadata"].get("creationTimestamp", ""))
            ):
                name = rs["metadata"]["name"]
                unhealthy = max(0, targets[name] - _st(rs, "availableReplicas"))
                cut = min(targets[name], unhealthy + budget)
                budget -= max(0, cut - unhealthy)
                targets[name] -= cut
    if new_target != _spec_replicas(new_rs):
        plan.scale[new_name] = new_target
    for rs in old_rss:
        name = rs["metadata"]["name"]
        if targets[name] != _spec_replicas(rs):
            plan.scale[name] = targets[name]
    everything = [new_rs, *old_rss]
    replicas = sum(_st(rs, "replicas") for rs in everything)
    available = sum(_st(rs, "availableReplicas") for rs in everything)
    updated = _st(new_rs, "replicas")
    old_status = deployment.get("status") or {}
    previous = {c.get("type"): c for c in old_status.get("conditions", []) or []}

    def cond(ctype: str, ok: bool, reason: str, message: str) -> dict[str, Any]:
        status = "True" if ok else "False"
        prev = previous.get(ctype) or {}
        same = prev.get("status") == status
        ts = now_rfc3339(now)
        return {
            "type": ctype,
            "status": status,
            "reason": reason,
            "message": message,
            "lastUpdateTime": prev.get("lastUpdateTime", ts)
            if same and prev.get("reason") == reason
            else ts,
            "lastTransitionTime": prev.get("lastTransitionTime", ts) if same else ts,
        }

    is_available = available >= desired - unavailable
    complete = (
        updated == desired
        and replicas == desired
        and _st(new_rs, "availableReplicas") == desired
        and not plan.scale
    )
    conditions = [
        cond(
            "Available",
            is_available,
            "MinimumReplicasAvailable" if is_available else "MinimumReplicasUnavailable",
            "Deployment has minimum availability."
            if is_available
            else "Deployment does not have minimum availability.",
        ),
        cond(
            "Progressing",
            True,
            "NewReplicaSetAvailable" if complete else "ReplicaSetUpdated",
            f'ReplicaSet "{new_name}" has successfully progressed.'
            if complete
            else f'ReplicaSet "{new_name}" is progressing.',
        ),
    ]
    plan.status = {
        "observedGeneration": int(deployment["metadata"].get("generation", 1)),
        "replicas": replicas,
        "updatedReplicas": updated,
        "readyReplicas": sum(_st(rs, "readyReplicas") for rs in everything),
        "availableReplicas": available,
        "unavailableReplicas": max(0, desired - available),
        "conditions": conditions,
    }
    if old_status.get("collisionCount"):
        plan.status["collisionCount"] = old_status["collisionCount"]
    return plan


def new_replicaset(
    deployment: Mapping[str, Any], pod_hash: str, revision: int, replicas: int
) -> dict[str, Any]:
    """The ReplicaSet for the Deployment's current template."""
    spec = deployment.get("spec", {})
    template = copy.deepcopy(spec.get("template") or {})
    tmeta = template.setdefault("metadata", {})
    tmeta["labels"] = {**(tmeta.get("labels") or {}), HASH_LABEL: pod_hash}
    selector = copy.deepcopy(spec.get("selector") or {})
    selector["matchLabels"] = {**(selector.get("matchLabels") or {}), HASH_LABEL: pod_hash}
    desired = int(spec.get("replicas", 1))
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": f"{deployment['metadata']['name']}-{pod_hash}",
            "namespace": deployment["metadata"]["namespace"],
            "labels": dict(tmeta["labels"]),
            "annotations": {
                REVISION: str(revision),
                "deployment.kubernetes.io/desired-replicas": str(desired),
                "deployment.kubernetes.io/max-replicas": str(desired + 1),
            },
            "ownerReferences": [
                owner_reference(deployment, api_version="apps/v1", kind="Deployment")
            ],
        },
        "spec": {
            "replicas": replicas,
            "minReadySeconds": int(spec.get("minReadySeconds", 0)),
            "selector": selector,
            "template": template,
        },
    }


def _template_without_hash(rs: Mapping[str, Any]) -> dict[str, Any]:
    template = copy.deepcopy(rs.get("spec", {}).get("template") or {})
    labels = (template.get("metadata") or {}).get("labels") or {}
    labels.pop(HASH_LABEL, None)
    return template


class DeploymentController:
    """Reconciles Deployments from the shared ``deployments`` and ``replicasets`` informers."""

    def __init__(
        self,
        kube: Kube,
        deployments: Informer,
        replicasets: Informer,
        events: EventRecorder | None = None,
    ) -> None:
        self.kube = kube
        self.events = events
        self.deployments = deployments
        self.replicasets = replicasets
        self.queue: KeyedQueue[ObjectKey] = KeyedQueue(self.reconcile, name="deployment")
        deployments.add_handler(lambda _t, obj: self.queue.add(key_of(obj)))
        replicasets.add_handler(self._on_rs)

    def _on_rs(self, _etype: str, rs: dict[str, Any]) -> None:
        ref = controller_of(rs)
        if ref is not None and ref.get("kind") == "Deployment":
            self.queue.add((rs["metadata"].get("namespace", ""), str(ref.get("name"))))

    async def reconcile(self, key: ObjectKey) -> None:
        """Create/scale ReplicaSets for one Deployment and write its status."""
        d = self.deployments.cache.get(key)
        if d is None or d["metadata"].get("deletionTimestamp"):
            return
        ns, name = key
        uid = d["metadata"]["uid"]
        owned = [
            rs
            for (rns, _), rs in self.replicasets.cache.items()
            if rns == ns and (controller_of(rs) or {}).get("uid") == uid
        ]
        template = d.get("spec", {}).get("template") or {}
        collisions = int((d.get("status") or {}).get("collisionCount", 0) or 0)
        pod_hash = template_hash(template, collisions)
        rs_path = collection_path("apps/v1", "replicasets", ns)
        new_rs = next(
            (
                rs
                for rs in owned
                if (rs["metadata"].get("labels") or {}).get(HASH_LABEL) == pod_hash
            ),
            None,
        )
        if new_rs is None:
            # an existing ReplicaSet with the same template (a rollback) is reused
            new_rs = next((rs for rs in owned if _template_without_hash(rs) == template), None)
        max_rev = max((revision_of(rs) for rs in owned), default=0)
        if new_rs is None:
            strategy = (d.get("spec", {}).get("strategy") or {}).get("type", "RollingUpdate")
            initial = 0 if owned or strategy == "Recreate" else int(d["spec"].get("replicas", 1))
            body = new_replicaset(d, pod_hash, max_rev + 1, initial)
            try:
                new_rs = await self.kube.create(rs_path, body)
                if initial and self.events is not None:
                    self.events.record(
                        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": d["metadata"]},
                        "Normal",
                        "ScalingReplicaSet",
                        f"Scaled up replica set {body['metadata']['name']} to {initial}",
                        component="deployment-controller",
                    )
            except ApiStatusError as exc:
                if exc.code != 409:
                    raise
                existing = await self.kube.get(f"{rs_path}/{body['metadata']['name']}")
                if existing is not None and (controller_of(existing) or {}).get("uid") == uid:
                    new_rs = existing
                else:  # a foreign object has our name: bump collisionCount and retry
                    await self.kube.merge_patch(
                        collection_path("apps/v1", "deployments", ns) + f"/{name}/status",
                        {"status": {"collisionCount": collisions + 1}},
                    )
                    return
        elif revision_of(new_rs) < max_rev:
            patch = {"metadata": {"annotations": {REVISION: str(max_rev + 1)}}}
            new_rs = await self.kube.merge_patch(f"{rs_path}/{new_rs['metadata']['name']}", patch)
        assert new_rs is not None
        old = [rs for rs in owned if rs["metadata"]["uid"] != new_rs["metadata"]["uid"]]
        plan = plan_rollout(d, new_rs, old, now=time.time())
        current = {rs["metadata"]["name"]: _spec_replicas(rs) for rs in [new_rs, *old]}
        for rs_name, replicas in plan.scale.items():
            await self.kube.merge_patch(f"{rs_path}/{rs_name}", {"spec": {"replicas": replicas}})
            if self.events is not None:
                direction = "up" if replicas > current.get(rs_name, 0) else "down"
                self.events.record(
                    {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": d["metadata"]},
                    "Normal",
                    "ScalingReplicaSet",
                    f"Scaled {direction} replica set {rs_name} from {current.get(rs_name, 0)} to {replicas}",
                    component="deployment-controller",
                )
        await self._cleanup(d, old, rs_path)
        revision = str(revision_of(new_rs))
        if (d["metadata"].get("annotations") or {}).get(REVISION) != revision:
            await self.kube.merge_patch(
                collection_path("apps/v1", "deployments", ns) + f"/{name}",
                {"metadata": {"annotations": {REVISION: revision}}},
            )
        old_status = d.get("status") or {}
        if {**old_status, **plan.status} != old_status:
            try:
                await self.kube.merge_patch(
                    collection_path("apps/v1", "deployments", ns) + f"/{name}/status",
                    {"status": plan.status},
                )
            except ApiStatusError as exc:
                if exc.code != 404:
                    raise

    async def _cleanup(self, d: Mapping[str, Any], old: list[dict[str, Any]], rs_path: str) -> None:
        limit = int(d.get("spec", {}).get("revisionHistoryLimit", 10))
        empty = [
            rs
            for rs in old
            if _spec_replicas(rs) == 0
            and _st(rs, "replicas") == 0
            and not rs["metadata"].get("deletionTimestamp")
        ]
        empty.sort(key=revision_of)
        for rs in empty[: max(0, len(empty) - limit)]:
            await self.kube.delete(f"{rs_path}/{rs['metadata']['name']}")

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the work queue; never returns unless cancelled."""
        await self.queue.run(task_status=task_status)
