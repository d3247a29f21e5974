"""runtimed's liveness heartbeat: one ``coordination.k8s.io/v1`` Lease per Runtime Pod.

docs/design-notes.md, "runtimed heartbeat": runtimed renews the Lease
``runtimed-<pod-name>`` in its Pod's namespace every 10 s with ``holderIdentity`` = the Pod
UID and ``leaseDurationSeconds`` = 40. The control plane treats the heartbeat as fresh when
``renewTime + leaseDurationSeconds`` is in the future and the holder is the Pod's *current*
UID (a Pod recreated under the same name must not inherit its predecessor's heartbeat).
This is how node heartbeats work in Kubernetes: one small object per Pod, no Pod status
write per beat.

The Lease carries an ownerReference to the Pod, so the garbage collector deletes it with
the Pod. :func:`heartbeat_fresh` is pure (the caller passes ``now``), for the scheduler's
synchronous decisions.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from typing import Any, Final

import trio

from krt.kube.backoff import Backoff
from krt.kube.clock import Clock, format_micro_time, parse_time
from krt.kube.errors import AlreadyExists, Conflict, KubeError, NotFound
from krt.kube.interface import KubeClient, Obj
from krt.kube.resources import LEASES

__all__ = [
    "HEARTBEAT_LEASE_DURATION_SECONDS",
    "HEARTBEAT_LEASE_PREFIX",
    "HEARTBEAT_PERIOD_SECONDS",
    "heartbeat_fresh",
    "heartbeat_lease_name",
    "renew_heartbeat",
    "run_heartbeat",
]

log = logging.getLogger(__name__)

HEARTBEAT_LEASE_PREFIX: Final = "runtimed-"
HEARTBEAT_PERIOD_SECONDS: Final = 10.0
HEARTBEAT_LEASE_DURATION_SECONDS: Final = 40
MAX_NAME_LENGTH: Final = 253


def heartbeat_lease_name(pod_name: str) -> str:
    """Return the heartbeat Lease name for a Pod: ``runtimed-<pod-name>``.

    Raises:
        ValueError: empty ``pod_name``, or the Lease name would exceed 253 characters.
    """
    if not pod_name:
        raise ValueError("pod_name must not be empty")
    name = HEARTBEAT_LEASE_PREFIX + pod_name
    if len(name) > MAX_NAME_LENGTH:
        raise ValueError(
            f"heartbeat Lease name {name[:40]}... is {len(name)} characters; the limit is "
            f"{MAX_NAME_LENGTH} (pod names up to {MAX_NAME_LENGTH - len(HEARTBEAT_LEASE_PREFIX)})"
        )
    return name


def heartbeat_fresh(lease: Mapping[str, Any], pod_uid: str, now: float) -> bool:
    """Whether ``lease`` proves the runtimed of Pod ``pod_uid`` alive at ``now``.

    Args:
        lease: a heartbeat Lease object.
        pod_uid: the Pod's current ``metadata.uid``.
        now: wall-clock time, seconds since the epoch.

    Returns:
        True when ``spec.holderIdentity == pod_uid`` and ``renewTime +
        leaseDurationSeconds > now``. A malformed or incomplete Lease is not fresh.
    """
    spec = lease.get("spec")
    if not isinstance(spec, Mapping) or not pod_uid:
        return False
    if spec.get("holderIdentity") != pod_uid:
        return False
    duration = spec.get("leaseDurationSeconds")
    renew = spec.get("renewTime")
    if isinstance(duration, bool) or not isinstance(duration, int) or duration <= 0:
        return False
    if not isinstance(renew, str):
        return False
    try:
        renewed = parse_time(renew).timestamp()
    except ValueError:
        return False
    return renewed + duration > now


def _desired(
    previous: Mapping[str, Any] | None,
    *,
    namespace: str,
    pod_name: str,
    pod_uid: str,
    now: str,
    lease_duration_seconds: int,
) -> dict[str, Any]:
    lease: dict[str, Any] = (
        copy.deepcopy(dict(previous))
        if previous is not None
        else {"metadata": {"name": heartbeat_lease_name(pod_name), "namespace": namespace}}
    )
    spec = dict(lease.get("spec") or {})
    if spec.get("holderIdentity") != pod_uid:
        if "holderIdentity" in spec:
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        spec["acquireTime"] = now
        lease["metadata"]["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Pod", "name": pod_name, "uid": pod_uid}
        ]
    spec["holderIdentity"] = pod_uid
    spec["leaseDurationSeconds"] = lease_duration_seconds
    spec["renewTime"] = now
    lease["spec"] = spec
    return lease


async def renew_heartbeat(
    kube: KubeClient,
    *,
    namespace: str,
    pod_name: str,
    pod_uid: str,
    clock: Clock,
    lease_duration_seconds: int = HEARTBEAT_LEASE_DURATION_SECONDS,
    previous: Obj | None = None,
) -> Obj:
    """Create or renew the Pod's heartbeat Lease (one request when ``previous`` is current).

    Args:
        kube: the client.
        namespace: the Pod's namespace (the Lease lives there too).
        pod_name: the Pod's name.
        pod_uid: the Pod's current ``metadata.uid`` (the holder identity).
        clock: wall clock for ``renewTime`` (MicroTime).
        lease_duration_seconds: written to ``spec.leaseDurationSeconds`` (>= 1).
        previous: the Lease this function returned last time; saves the GET. If it is
            stale the write conflicts, and the Lease is re-read and written once more.

    Returns:
        The stored Lease (pass it as ``previous`` next time).

    Raises:
        ValueError: a bad Pod name/uid or duration.
        ApiError, ConnectionFailed: the write failed (after one re-read on conflict).
    """
    if not pod_uid:
        raise ValueError("pod_uid must not be empty")
    if lease_duration_seconds < 1:
        raise ValueError(f"lease_duration_seconds must be >= 1, got {lease_duration_seconds}")
    name = heartbeat_lease_name(pod_name)
    current = previous
    for attempt in range(2):
        now = format_micro_time(clock.now())
        if current is None:
            try:
                current = await kube.get(LEASES, name, namespace)
            except NotFound:
                body = _desired(
                    None,
                    namespace=namespace,
                    pod_name=pod_name,
                    pod_uid=pod_uid,
                    now=now,
                    lease_duration_seconds=lease_duration_seconds,
                )
                try:
                    return await kube.create(LEASES, body)
                except AlreadyExists:
                    if attempt:
                        raise
                    continue
        body = _desired(
            current,
            namespace=namespace,
            pod_name=pod_name,
            pod_uid=pod_uid,
            now=now,
            lease_duration_seconds=lease_duration_seconds,
        )
        try:
            return await kube.replace(LEASES, body)
        except (Conflict, NotFound):
            if attempt:
                raise
            current = None
    raise AssertionError("unreachable")  # pragma: no cover


async def run_heartbeat(
    kube: KubeClient,
    *,
    namespace: str,
    pod_name: str,
    pod_uid: str,
    clock: Clock,
    period: float = HEARTBEAT_PERIOD_SECONDS,
    lease_duration_seconds: int = HEARTBEAT_LEASE_DURATION_SECONDS,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Renew the heartbeat every ``period`` seconds; never returns unless cancelled.

    Failed renewals are logged and retried with backoff (never sooner than 0.5 s, never
    later than ``period``).

    Args:
        kube: the client.
        namespace: as for :func:`renew_heartbeat`.
        pod_name: as for :func:`renew_heartbeat`.
        pod_uid: as for :func:`renew_heartbeat`.
        clock: as for :func:`renew_heartbeat`.
        lease_duration_seconds: as for :func:`renew_heartbeat`.
        period: seconds between renewals (> 0, well below ``lease_duration_seconds``).
        task_status: ``started()`` after the first successful renewal.

    Raises:
        ValueError: ``period`` is not positive or not below ``lease_duration_seconds``.
    """
    if not 0 < period < lease_duration_seconds:
        raise ValueError(
            f"period must be > 0 and below lease_duration_seconds ({lease_duration_seconds} s), "
            f"got {period}"
        )
    heartbeat_lease_name(pod_name)
    backoff = Backoff(base=min(0.5, period), maximum=period)
    lease: Obj | None = None
    started = False
    while True:
        try:
            lease = await renew_heartbeat(
                kube,
                namespace=namespace,
                pod_name=pod_name,
                pod_uid=pod_uid,
                clock=clock,
                lease_duration_seconds=lease_duration_seconds,
                previous=lease,
            )
        except KubeError as exc:
            lease = None
            delay = backoff.next_delay()
            log.warning(
                "heartbeat %s/%s failed (retry in %.1f s): %s", namespace, pod_name, delay, exc
            )
            await trio.sleep(delay)
            continue
        backoff.reset()
        if not started:
            started = True
            task_status.started()
        await trio.sleep(period)
