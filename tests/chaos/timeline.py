"""What the suite saw of every Run, in order, from a watch (an informer on Runs).

Each change of a Run's phase, reason, attempt or assignment is one :class:`Observation`
stamped with the trio clock when the watch delivered it. A watch lags the API server, so an
observation at time ``t`` says "this was true at some time before ``t``": the promise checks
rely only on that direction (see ``promises.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import trio

from krt.kube.client import Kube
from krt.kube.informer import EventType, Informer, InformerEvent
from krt.kube.resources import RUNS

from .cluster import NS


@dataclass(frozen=True)
class Observation:
    """One observed state of a Run.

    Attributes:
        at: trio clock seconds when the watch delivered it.
        phase, reason, attempt: ``status.phase``, ``status.reason``, ``status.attempt``.
        pod_uid, pod: ``status.assignedPodUID`` / ``status.assignedPod`` ('' when unassigned).
        deleted: the Run is gone (the last observation of a deleted Run).
        condition_reasons: reasons of its conditions (for "why was it retried").
    """

    at: float
    phase: str
    reason: str
    attempt: int
    pod_uid: str
    pod: str
    deleted: bool = False
    condition_reasons: tuple[str, ...] = ()


def observe(obj: dict[str, Any], at: float, *, deleted: bool = False) -> Observation:
    """The :class:`Observation` of a Run object."""
    status = obj.get("status") or {}
    return Observation(
        at=at,
        phase=str(status.get("phase") or ""),
        reason=str(status.get("reason") or ""),
        attempt=int(status.get("attempt") or 0),
        pod_uid=str(status.get("assignedPodUID") or ""),
        pod=str(status.get("assignedPod") or ""),
        deleted=deleted,
        condition_reasons=tuple(str(c.get("reason") or "") for c in status.get("conditions") or []),
    )


@dataclass
class RunTimeline:
    """Every observed state per Run name (only changes are kept).

    Attributes:
        history: Run name -> its observations in delivery order.
        kinds: Run name -> ``function`` or ``task`` (the ``chaos`` label).
        uids: Run name -> metadata.uid.
    """

    kube: Kube
    history: dict[str, list[Observation]] = field(default_factory=dict)
    kinds: dict[str, str] = field(default_factory=dict)
    uids: dict[str, str] = field(default_factory=dict)
    latest: dict[str, dict[str, Any]] = field(default_factory=dict)

    def _on_run(self, event: InformerEvent) -> None:
        meta = event.obj.get("metadata") or {}
        name = str(meta.get("name"))
        kind = (meta.get("labels") or {}).get("chaos")
        if kind is None:
            return
        self.kinds[name] = str(kind)
        self.uids[name] = str(meta.get("uid"))
        deleted = event.type is EventType.DELETED
        if deleted:
            self.latest.pop(name, None)
        else:
            self.latest[name] = event.obj
        seen = observe(event.obj, trio.current_time(), deleted=deleted)
        past = self.history.setdefault(name, [])
        if past and _same(past[-1], seen):
            return
        past.append(seen)

    def names(self, kind: str) -> list[str]:
        """Names of the Runs of ``kind`` (``function`` or ``task``) ever seen."""
        return sorted(n for n, k in self.kinds.items() if k == kind)

    def last(self, name: str) -> Observation | None:
        """The latest observation of ``name``."""
        seen = self.history.get(name)
        return seen[-1] if seen else None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Watch Runs until cancelled; started once the first list is delivered."""
        informer = Informer(self.kube, RUNS, namespace=NS, label_selector="chaos")
        informer.add_handler(self._on_run)
        await informer.run(task_status=task_status)


def _same(a: Observation, b: Observation) -> bool:
    return (a.phase, a.reason, a.attempt, a.pod_uid, a.deleted) == (
        b.phase,
        b.reason,
        b.attempt,
        b.pod_uid,
        b.deleted,
    )
