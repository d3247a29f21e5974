"""A Runtime's status: ``readyReplicas``, ``replicas`` and its conditions (pure).

Issue 5, Runtime controller: "status.readyReplicas and conditions kept current". A ready
replica is a Runtime Pod the scheduler could use right now (Ready, not deleting, runtimed
heartbeat fresh), so ``readyReplicas`` and the scheduler never disagree.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from krt.api.conditions import set_condition
from krt.api.constants import ConditionStatus, RuntimeConditionType
from krt.api.patches import StatusPatch
from krt.api.runtime import Runtime
from krt.controlplane.podstate import PodState


def runtime_status_patch(
    runtime: Runtime,
    *,
    deployment: Mapping[str, Any] | None,
    pods: Iterable[PodState],
    now: datetime,
) -> StatusPatch:
    """The Runtime status patch, or ``{}`` when the status is already current.

    ``readyReplicas`` counts the Runtime's Pods that are schedulable (Ready, not deleting,
    heartbeat fresh); ``replicas`` counts its Pods that are not deleting. ``Available`` is
    True with at least one ready Pod; ``Progressing`` is True while the Deployment is missing
    or not yet at the desired replica count of ready Pods.

    Args:
        runtime: the Runtime as cached.
        deployment: its Deployment as cached, or ``None``.
        pods: the Runtime's Pods (its namespace and label).
        now: the current wall-clock time (aware ``datetime``).
    """
    mine = [p for p in pods if p.runtime == runtime.metadata.name]
    ready = sum(1 for p in mine if p.schedulable)
    existing = sum(1 for p in mine if not p.deleting)
    want = runtime.spec.replicas
    conditions = list(runtime.status.conditions)
    if ready > 0:
        conditions = set_condition(
            conditions,
            RuntimeConditionType.AVAILABLE,
            True,
            reason="PodsReady",
            message=f"{ready} of {want} Runtime Pods ready",
            now=now,
        )
    else:
        conditions = set_condition(
            conditions,
            RuntimeConditionType.AVAILABLE,
            False,
            reason="NoReadyPod" if deployment is not None else "DeploymentMissing",
            message=f"0 of {want} Runtime Pods ready",
            now=now,
        )
    if deployment is None:
        progressing = (ConditionStatus.TRUE, "DeploymentCreating", "creating the Deployment")
    elif ready < want or existing != want:
        progressing = (
            ConditionStatus.TRUE,
            "RollingOut",
            f"{ready} of {want} Runtime Pods ready, {existing} exist",
        )
    else:
        progressing = (ConditionStatus.FALSE, "Complete", f"{want} Runtime Pods ready")
    conditions = set_condition(
        conditions,
        RuntimeConditionType.PROGRESSING,
        progressing[0],
        reason=progressing[1],
        message=progressing[2],
        now=now,
    )
    patch: StatusPatch = {}
    if runtime.status.ready_replicas != ready:
        patch["readyReplicas"] = ready
    if runtime.status.replicas != existing:
        patch["replicas"] = existing
    if runtime.status.observed_generation != runtime.metadata.generation:
        patch["observedGeneration"] = runtime.metadata.generation
    if conditions != list(runtime.status.conditions):
        patch["conditions"] = [c.to_dict() for c in conditions]
    return patch
