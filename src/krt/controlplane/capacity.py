"""Capacity accounting: which Runs occupy which Runtime Pod, derived from Runs only.

Issue 5, Scheduler, and seed 000, Capacity and Concurrency: a Pod's usage is the sum of the
effective ``resources.requests`` of the Runs that hold capacity on it, never an annotation.
A Run holds capacity on the Pod whose UID is its ``status.assignedPodUID`` while

* its phase is active (Scheduled, Running, Ready: :func:`krt.api.phases.holds_capacity`), or
* it is being deleted and still carries the ``kruntimes.io/registration-cleanup`` finalizer
  (runtimed has not yet released the registration; seed 000, Cleanup and Finalization).

Usage is keyed by Pod UID, so a replaced Pod that reuses a name starts empty.

The informer cache lags this process's own writes. :class:`AssumedBinds` is the scheduler's
"assumed" cache (as in kube-scheduler): after a bind succeeds, the Run counts on its Pod
until the informer delivers any newer version of that Run (or its deletion). Without it, a
burst of Pending Runs would all see the same free slot and overfill the Pod.

:func:`usage_by_pod` derives usage from scratch; :class:`CapacityLedger` keeps the same sums
up to date one Run at a time (the scheduler recounts a Run whenever its cached version or
its assumption changes), so a scheduling cycle reads usage in O(Pods) instead of O(Runs).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from krt.api.constants import REGISTRATION_CLEANUP_FINALIZER
from krt.api.errors import ResourceError
from krt.api.phases import holds_capacity
from krt.api.resources import RUNS, ResourceList, add
from krt.api.run import Run
from krt.controlplane.run_index import runtime_key

log = logging.getLogger(__name__)


def capacity_holder(run: Run) -> str | None:
    """The UID of the Pod on which ``run`` holds capacity, or ``None`` if it holds none."""
    uid = run.status.assigned_pod_uid
    if not uid:
        return None
    if holds_capacity(run.status.phase):
        return uid
    if run.metadata.is_deleting and REGISTRATION_CLEANUP_FINALIZER in run.metadata.finalizers:
        return uid
    return None


@dataclass(frozen=True, slots=True)
class Assumption:
    """A bind this process made that its informer may not have delivered yet.

    Attributes:
        pod_uid: the Pod the Run was bound to.
        requests: the Run's effective requests.
        cached_resource_version: the Run's ``resourceVersion`` the bind was made from; any
            other version in the cache includes the bind (or a later change).
        group: the Run's ``namespace/runtime`` (its :class:`CapacityLedger` group).
    """

    pod_uid: str
    requests: Mapping[str, int]
    cached_resource_version: str
    group: str = ""


class AssumedBinds:
    """Binds made by this process, counted until the informer catches up.

    Keys are Run UIDs. Not thread-safe (one trio task owns it).
    """

    def __init__(self) -> None:
        """Create an empty cache."""
        self._by_run: dict[str, Assumption] = {}

    def __len__(self) -> int:
        """Number of binds still assumed."""
        return len(self._by_run)

    def assume(self, run: Run, pod_uid: str) -> Assumption:
        """Record that ``run`` (as read from the cache) was just bound to ``pod_uid``.

        Args:
            run: the Run as the scheduler read it before binding.
            pod_uid: the Pod's UID.

        Returns:
            The assumption; pass it to :meth:`forget` if this bind fails.
        """
        assumption = Assumption(
            pod_uid=pod_uid,
            requests=run.spec.effective_requests,
            cached_resource_version=run.metadata.resource_version,
            group=runtime_key(run.metadata.namespace, run.spec.runtime),
        )
        self._by_run[run.metadata.uid] = assumption
        return assumption

    def observe(self, run_uid: str, resource_version: str | None) -> None:
        """Tell the cache what the informer now holds for a Run.

        Args:
            run_uid: the Run's UID.
            resource_version: its cached ``resourceVersion``, or ``None`` once it is deleted.
                Any version other than the one the bind was made from ends the assumption.
        """
        assumption = self._by_run.get(run_uid)
        if assumption is None:
            return
        if resource_version is None or resource_version != assumption.cached_resource_version:
            del self._by_run[run_uid]

    def forget(self, run_uid: str, assumption: Assumption) -> None:
        """Drop ``assumption`` because its bind did not happen.

        Only that assumption is dropped: when a stale bind fails after the informer moved on,
        a newer bind of the same Run may be in flight, and its assumption must keep counting
        until the informer delivers it (otherwise a burst overfills the Pod).

        Args:
            run_uid: the Run's UID.
            assumption: what :meth:`assume` returned for the failed bind.
        """
        if self._by_run.get(run_uid) is assumption:
            del self._by_run[run_uid]

    def get(self, run_uid: str) -> Assumption | None:
        """The assumption for a Run, if any."""
        return self._by_run.get(run_uid)

    def assumptions(self) -> Iterable[tuple[str, Assumption]]:
        """All (Run UID, assumption) pairs."""
        return tuple(self._by_run.items())


def usage_by_pod(
    runs: Iterable[Run], assumed: AssumedBinds | None = None
) -> dict[str, dict[str, int]]:
    """The resources in use on each Pod (by Pod UID), from Runs and assumed binds.

    Args:
        runs: the cached Runs (of any set of namespaces; only assigned ones count).
        assumed: binds this process made that the cache may not show yet; an assumed Run
            counts on the assumed Pod instead of wherever the (stale) cache places it.

    Returns:
        Pod UID -> resource name -> quantity in use. Pods with no usage are absent.
    """
    usage: dict[str, dict[str, int]] = {}
    assumed_runs: set[str] = set()
    if assumed is not None:
        for run_uid, assumption in assumed.assumptions():
            assumed_runs.add(run_uid)
            usage[assumption.pod_uid] = add(usage.get(assumption.pod_uid, {}), assumption.requests)
    for run in runs:
        if run.metadata.uid in assumed_runs:
            continue
        pod_uid = capacity_holder(run)
        if pod_uid is None:
            continue
        usage[pod_uid] = add(usage.get(pod_uid, {}), run.spec.effective_requests)
    return usage


def pod_usage(
    runs: Iterable[Run], pod_uid: str, assumed: AssumedBinds | None = None
) -> ResourceList:
    """The resources in use on one Pod (see :func:`usage_by_pod`)."""
    return usage_by_pod(runs, assumed).get(pod_uid, {})


def counted_requests(run: Run) -> dict[str, int]:
    """The requests ``run`` occupies while it holds capacity.

    Its effective requests; a Run whose ``runs`` request is 0 (the CRD forbids it) is
    counted with ``runs: 1`` and a warning, so one malformed Run cannot stop the scheduling
    of every other Run of its Runtime.
    """
    try:
        return run.spec.effective_requests
    except ResourceError as exc:
        log.warning("Run %s: %s; counting it as runs=1", run.key, exc)
        return {**(run.spec.requests or {}), RUNS: 1}


@dataclass(frozen=True, slots=True)
class _Counted:
    group: str
    pod_uid: str
    requests: Mapping[str, int]


class CapacityLedger:
    """Per-Pod usage, grouped (by Runtime), kept current one Run at a time.

    Each Run (by UID) contributes its requests to at most one Pod; :meth:`count` replaces a
    Run's contribution, :meth:`uncount` removes it. :meth:`usage` returns the same sums as
    :func:`usage_by_pod` over the Runs counted in a group, with quantities that fell to zero
    removed. Not thread-safe (one trio task owns it).
    """

    def __init__(self) -> None:
        """Create an empty ledger."""
        self._usage: dict[str, dict[str, dict[str, int]]] = {}
        self._counted: dict[str, _Counted] = {}

    def __len__(self) -> int:
        """Number of Runs counted."""
        return len(self._counted)

    def count(self, run_uid: str, group: str, pod_uid: str, requests: Mapping[str, int]) -> None:
        """Set the contribution of Run ``run_uid``: ``requests`` on ``pod_uid`` in ``group``.

        Args:
            run_uid: the Run's UID.
            group: the usage group (the scheduler uses ``namespace/runtime``).
            pod_uid: the Pod the Run occupies.
            requests: resource name -> quantity (non-negative integers).
        """
        previous = self._counted.get(run_uid)
        if (
            previous is not None
            and previous.group == group
            and previous.pod_uid == pod_uid
            and previous.requests == requests
        ):
            return
        self.uncount(run_uid)
        counted = _Counted(group, pod_uid, dict(requests))
        self._counted[run_uid] = counted
        pod = self._usage.setdefault(group, {}).setdefault(pod_uid, {})
        for name, quantity in counted.requests.items():
            pod[name] = pod.get(name, 0) + quantity

    def uncount(self, run_uid: str) -> None:
        """Remove the contribution of Run ``run_uid`` (no-op when it has none)."""
        counted = self._counted.pop(run_uid, None)
        if counted is None:
            return
        pods = self._usage[counted.group]
        pod = pods[counted.pod_uid]
        for name, quantity in counted.requests.items():
            left = pod.get(name, 0) - quantity
            if left:
                pod[name] = left
            else:
                pod.pop(name, None)
        if not pod:
            del pods[counted.pod_uid]
            if not pods:
                del self._usage[counted.group]

    def usage(self, group: str) -> Mapping[str, Mapping[str, int]]:
        """Pod UID -> resource -> quantity in use in ``group`` (a live, read-only view)."""
        return self._usage.get(group, {})

    def clear(self) -> None:
        """Forget every contribution."""
        self._usage.clear()
        self._counted.clear()
