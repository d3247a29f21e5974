"""Marking busy Runtime Pods before a scale-down, so the ReplicaSet removes the idle ones (pure).

Scaling a Runtime down lowers its Deployment's ``spec.replicas``; the ReplicaSet controller
then deletes surplus Pods in Kubernetes' scale-down order, where the
``controller.kubernetes.io/pod-deletion-cost`` annotation (lower first) outranks Ready time
and age (``ActivePodsWithRanks.Less`` in pkg/controller/controller_utils.go, rule 4). Left
alone, that order can remove the Pod holding Ready functions and keep a newer, idle one:
every Run on the removed Pod then ends through the Pod-loss path (``PodLost``).

So, just before the Runtime controller lowers ``spec.replicas``, it sets each Pod's deletion
cost to the number of non-terminal Runs assigned to it (:func:`busy_runs_by_pod`), writing a
merge patch only where the value differs (:func:`deletion_cost_patches`). Nothing is written
in steady state or per Run: costs are refreshed only at a scale-down, the only time they are
read by our own scale-downs (a stale cost can at most reorder the old ReplicaSet's Pods during
a rollout). It is best effort: a Run bound to a Pod between the patch and the deletion takes
the ordinary ``PodLost`` path.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from krt.api.phases import is_terminal
from krt.api.run import Run
from krt.kube.deletion_cost import INT32_MAX, POD_DELETION_COST_ANNOTATION
from krt.kube.deletion_cost import pod_deletion_cost as current_deletion_cost

#: The Pod annotation Kubernetes' ReplicaSet controller reads (int32 text; lower goes first).


@dataclass(frozen=True, slots=True)
class CostPatch:
    """One Pod whose deletion cost must change.

    Attributes:
        pod_name: the Pod's name (in the Runtime's namespace).
        cost: the new cost (the number of non-terminal Runs on the Pod).
        patch: the JSON merge patch setting the annotation.
    """

    pod_name: str
    cost: int
    patch: dict[str, Any]


def busy_runs_by_pod(runs: Iterable[Run]) -> Counter[str]:
    """The number of non-terminal Runs assigned to each Pod UID.

    A Run counts on the Pod of its ``status.assignedPodUID`` while its phase is not terminal:
    a function Run that is Scheduled, Running or Ready on it (or Pending with an assignment
    not yet cleared), a task Run that is Scheduled or Running on it.

    Args:
        runs: parsed Runs (e.g. the Runtime's Runs from the control plane's Run index).
    """
    counts: Counter[str] = Counter()
    for run in runs:
        uid = run.status.assigned_pod_uid
        if uid and not is_terminal(run.status.phase):
            counts[uid] += 1
    return counts


def deletion_cost_patches(
    pods: Sequence[Mapping[str, Any]],
    busy: Mapping[str, int],
    *,
    current_replicas: int | None,
    desired_replicas: int,
) -> list[CostPatch]:
    """The deletion-cost patches to write before the Deployment's replicas change.

    Nothing unless the change lowers ``spec.replicas`` (``desired_replicas`` below
    ``current_replicas``). Then each Pod not already being deleted gets its number of busy
    Runs as its cost, where its current cost (as Kubernetes reads it; missing is 0) differs.

    Args:
        pods: the Runtime's Pods (API dicts).
        busy: non-terminal Runs per Pod UID (:func:`busy_runs_by_pod`).
        current_replicas: the Deployment's ``spec.replicas`` now (``None``: no Deployment).
        desired_replicas: the replica count about to be written.

    Returns:
        The patches, in the order of ``pods``.
    """
    if current_replicas is None or desired_replicas >= current_replicas:
        return []
    patches = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            continue
        cost = min(int(busy.get(str(meta.get("uid", "")), 0)), INT32_MAX)
        if cost == current_deletion_cost(pod):
            continue
        patches.append(
            CostPatch(
                pod_name=str(meta.get("name", "")),
                cost=cost,
                patch={"metadata": {"annotations": {POD_DELETION_COST_ANNOTATION: str(cost)}}},
            )
        )
    return patches
