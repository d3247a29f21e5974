"""What the control plane needs to know about a Runtime Pod, read from plain Pod dicts.

Pure: the informer adapters pass Pod, Lease and EndpointSlice dicts in; the scheduler and
the reaper decide on :class:`PodState`. A Pod is *schedulable* (issue 5, Scheduler) when it
is Ready (its readiness gate ``kruntimes.io/RuntimedReady`` included), not deleting, and its
runtimed heartbeat Lease is fresh (:func:`krt.kube.heartbeat.heartbeat_fresh`,
docs/design-notes.md: ``renewTime + leaseDurationSeconds`` in the future and
``holderIdentity`` equal to the Pod's current UID).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from krt.api.constants import RUNTIME_LABEL
from krt.kube.clock import parse_time
from krt.kube.heartbeat import HEARTBEAT_LEASE_PREFIX, heartbeat_fresh


@dataclass(frozen=True, slots=True)
class PodState:
    """One Runtime Pod as the scheduler and reaper see it.

    Attributes:
        name: Pod name.
        uid: Pod UID (assignments are fenced by UID, not name).
        namespace: Pod namespace.
        runtime: value of the ``kruntimes.io/runtime`` label (``""`` when absent).
        ready: the Pod's ``Ready`` condition is True.
        deleting: ``metadata.deletionTimestamp`` is set.
        heartbeat_fresh: runtimed's heartbeat Lease is fresh for this exact UID.
    """

    name: str
    uid: str
    namespace: str
    runtime: str
    ready: bool
    deleting: bool
    heartbeat_fresh: bool

    @property
    def schedulable(self) -> bool:
        """Ready, not deleting, heartbeat fresh: the scheduler may bind Runs here."""
        return self.ready and not self.deleting and self.heartbeat_fresh


def pod_is_ready(pod: Mapping[str, Any]) -> bool:
    """True when the Pod's ``status.conditions`` has ``Ready`` = ``"True"``."""
    for condition in pod.get("status", {}).get("conditions", None) or []:
        if (type(condition) is dict or isinstance(condition, Mapping)) and condition.get(
            "type"
        ) == "Ready":
            return condition.get("status") == "True"
    return False


def pod_state(
    pod: Mapping[str, Any], *, lease: Mapping[str, Any] | None, now: datetime
) -> PodState:
    """Read a :class:`PodState` from a Pod dict and its heartbeat Lease.

    Args:
        pod: the Pod as the API returns it.
        lease: its heartbeat Lease (``runtimed-<pod-name>``), or ``None``.
        now: the current wall-clock time (aware).
    """
    meta = pod.get("metadata", {})
    uid = str(meta.get("uid", ""))
    return PodState(
        name=str(meta.get("name", "")),
        uid=uid,
        namespace=str(meta.get("namespace", "")),
        runtime=str((meta.get("labels") or {}).get(RUNTIME_LABEL, "")),
        ready=pod_is_ready(pod),
        deleting=meta.get("deletionTimestamp") is not None,
        heartbeat_fresh=lease is not None and heartbeat_fresh(lease, uid, now.timestamp()),
    )


def heartbeat_deadline(lease: Mapping[str, Any] | None, pod_uid: str) -> float | None:
    """Until when ``lease`` proves Pod ``pod_uid``'s runtimed alive (seconds since the epoch).

    ``None`` when it never does (absent, malformed, held by another UID).
    ``heartbeat_fresh(lease, pod_uid, now)`` is exactly ``deadline is not None and deadline >
    now``; callers that judge the same Lease at many instants compute this once.
    """
    if lease is None or not heartbeat_fresh(lease, pod_uid, -math.inf):
        return None
    spec = lease["spec"]
    return float(parse_time(str(spec["renewTime"])).timestamp() + spec["leaseDurationSeconds"])


def heartbeat_expires_in(
    lease: Mapping[str, Any] | None, pod_uid: str, now: datetime
) -> float | None:
    """Seconds until a fresh heartbeat Lease expires, or ``None`` if it is not fresh.

    Used to re-check a Runtime's ready Pods when a heartbeat would lapse (an expiry sends no
    watch event).

    Args:
        lease: the heartbeat Lease, or ``None``.
        pod_uid: the Pod's current UID.
        now: the current wall-clock time (aware).
    """
    if lease is None or not heartbeat_fresh(lease, pod_uid, now.timestamp()):
        return None
    spec = lease.get("spec") or {}
    renewed = parse_time(str(spec["renewTime"])).timestamp()
    return max(0.0, renewed + int(spec["leaseDurationSeconds"]) - now.timestamp())


def pod_name_of_heartbeat_lease(lease_name: str) -> str | None:
    """The Pod a heartbeat Lease (``runtimed-<pod-name>``) belongs to, or ``None``."""
    if not lease_name.startswith(HEARTBEAT_LEASE_PREFIX):
        return None
    return lease_name[len(HEARTBEAT_LEASE_PREFIX) :] or None


def ready_endpoint_pod_uids(slices: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    """UIDs of the Pods an EndpointSlice set still routes traffic to.

    An endpoint counts while ``conditions.ready`` is not false (Kubernetes treats an unset
    ``ready`` as ready) and ``conditions.terminating`` is not true: that is the set the
    Service forwards to. Seed 000 fencing needs "removed from Service endpoints".

    Args:
        slices: the ``discovery.k8s.io/v1`` EndpointSlices of one Service.
    """
    uids: set[str] = set()
    for endpoint_slice in slices:
        for endpoint in endpoint_slice.get("endpoints", None) or []:
            conditions = endpoint.get("conditions") or {}
            if conditions.get("ready") is False or conditions.get("terminating") is True:
                continue
            target = endpoint.get("targetRef") or {}
            if target.get("kind", "Pod") == "Pod" and target.get("uid"):
                uids.add(str(target["uid"]))
    return frozenset(uids)
