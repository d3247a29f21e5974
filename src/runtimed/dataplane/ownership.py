"""The watch-backed ownership/readiness cache of the invoke path (seed 000, Runtime Gateway).

Seed 000: "Every runtimed maintains a watch-backed cache for function Runs in its Runtime
and namespace: Run namespace/name/UID -> assigned Pod address -> lifecycle readiness. The
cache is populated asynchronously from informer events. The invoke handler must not
synchronously read Runs or Pods from the Kubernetes API."

:class:`OwnershipCache` is fed only by informer handlers (:meth:`~OwnershipCache.on_run_event`
on the daemon's Run informer, :meth:`~OwnershipCache.on_pod_event` on an informer of the
Runtime's Pods) and answers lookups with plain immutable views (:class:`RunView`,
:class:`PodView`); the routing decision over them is :func:`runtimed.dataplane.routing.decide`.
Only function Runs of this Runtime are kept; any other Run (a task, another Runtime's) is
simply unknown here, which the router answers with NOT_FOUND.

Pod addresses come from the Pods themselves (``status.podIP`` and the container port named
``grpc``), not EndpointSlices: the Pod object carries the UID the Run's
``status.assignedPodUID`` fences on, and its readiness and deletion state, in one event.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from krt.api.constants import RunConditionType
from krt.api.durations import parse_duration
from krt.api.naming import RUNTIMED_GRPC_PORT, RUNTIMED_GRPC_PORT_NAME
from krt.api.phases import Phase
from krt.api.times import parse_time
from krt.kube.informer import EventType, InformerEvent

__all__ = ["OwnershipCache", "PodView", "RunView", "pod_view", "run_view"]


@dataclass(frozen=True, slots=True)
class RunView:
    """What the router needs to know about one function Run.

    Attributes:
        uid: ``metadata.uid``.
        namespace, name: the Run's key (for the SelfSubjectAccessReview).
        attempt: ``status.attempt``, the registration attempt (0 before the first claim).
        assigned_pod_uid: ``status.assignedPodUID`` ("" when unassigned).
        ready: phase Ready and condition ``Ready=True``.
        terminating: deletion requested, or ``spec.cancelRequested`` before a terminal phase.
        ended: ``"<phase>: <status.reason>"`` of a terminal phase (the Run will never be
            Ready again), else "".
        not_ready: why a Run that is not :attr:`ready` is not (``"<reason>: <message>"`` of
            its Ready condition, or its phase), else "".
        resource_version: ``metadata.resourceVersion`` of the observed object.
        expires_at: end of the Run's lifetime (``status.startTime`` + ``spec.timeout``) in
            unix seconds, or ``None`` without a timeout (invocation timeouts are bounded by it,
            seed 002, Invocation Semantics).
        timeout: ``spec.timeout`` as written (e.g. ``"5s"``), or "" (named when the lifetime
            cuts an invocation short).
    """

    uid: str
    namespace: str
    name: str
    attempt: int
    assigned_pod_uid: str
    ready: bool
    terminating: bool
    resource_version: str = ""
    ended: str = ""
    not_ready: str = ""
    timeout: str = ""
    expires_at: float | None = None


@dataclass(frozen=True, slots=True)
class PodView:
    """A Runtime Pod as the router sees it.

    Attributes:
        uid: ``metadata.uid``.
        name: ``metadata.name``.
        ip: ``status.podIP`` ("" before it has one).
        port: runtimed's gRPC port (container port named ``grpc``, else 9090).
        ready: condition ``Ready=True``.
        deleting: ``metadata.deletionTimestamp`` is set.
    """

    uid: str
    name: str
    ip: str
    port: int
    ready: bool
    deleting: bool

    @property
    def routable(self) -> bool:
        """True when a peer hop may be sent to it: ready, not deleting, has an address."""
        return self.ready and not self.deleting and bool(self.ip)


def _condition_true(status: Mapping[str, Any], kind: str) -> bool:
    for condition in status.get("conditions") or ():
        if isinstance(condition, dict) and condition.get("type") == kind:
            return condition.get("status") == "True"
    return False


def _condition(status: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for condition in status.get("conditions") or ():
        if isinstance(condition, dict) and condition.get("type") == kind:
            return condition
    return None


def _not_ready(phase: str, condition: Mapping[str, Any] | None) -> str:
    """Why a non-terminal function Run is not Ready, from its Ready condition or phase."""
    if condition is not None and condition.get("reason"):
        message = str(condition.get("message") or "")[:512]
        return f"{condition['reason']}: {message}" if message else str(condition["reason"])
    return f"phase {phase}"


def _expires_at(spec: Mapping[str, Any], status: Mapping[str, Any]) -> float | None:
    timeout, start = spec.get("timeout"), status.get("startTime")
    if not isinstance(timeout, str) or not isinstance(start, str):
        return None
    try:
        return parse_time(start).timestamp() + parse_duration(timeout)
    except ValueError:  # the API server validated both; a bad value just means "unbounded"
        return None


def run_view(obj: Mapping[str, Any], *, runtime: str) -> RunView | None:
    """The :class:`RunView` of a Run object, or ``None`` if it is not a function Run of ``runtime``.

    Args:
        obj: a Run as the informer delivers it.
        runtime: this Runtime's name (``spec.runtime`` must equal it).
    """
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    mode = spec.get("mode") or {}
    if spec.get("runtime") != runtime or not isinstance(mode, dict) or mode.get("function") is None:
        return None
    uid, name = str(meta.get("uid") or ""), str(meta.get("name") or "")
    if not uid or not name:
        return None
    phase = str(status.get("phase") or Phase.PENDING)
    attempt = status.get("attempt")
    terminal = phase in (Phase.SUCCEEDED, Phase.FAILED, Phase.TIMEOUT, Phase.CANCELLED)
    condition = _condition(status, RunConditionType.READY)
    ready = phase == Phase.READY and condition is not None and condition.get("status") == "True"
    ended = ""
    if terminal:
        reason = status.get("reason")
        ended = f"{phase}: {reason}" if isinstance(reason, str) and reason else phase
    return RunView(
        uid=uid,
        namespace=str(meta.get("namespace") or ""),
        name=name,
        attempt=attempt if isinstance(attempt, int) and not isinstance(attempt, bool) else 0,
        assigned_pod_uid=str(status.get("assignedPodUID") or ""),
        ready=ready,
        terminating=bool(meta.get("deletionTimestamp"))
        or (spec.get("cancelRequested") is True and not terminal),
        resource_version=str(meta.get("resourceVersion") or ""),
        expires_at=_expires_at(spec, status),
        ended=ended,
        not_ready="" if ready or terminal else _not_ready(phase, condition),
        timeout=spec["timeout"] if isinstance(spec.get("timeout"), str) else "",
    )


def _grpc_port(spec: Mapping[str, Any]) -> int:
    for container in spec.get("containers") or ():
        for port in (container or {}).get("ports") or ():
            if (port or {}).get("name") == RUNTIMED_GRPC_PORT_NAME:
                value = port.get("containerPort")
                if isinstance(value, int) and 0 < value < 65536:
                    return value
    return RUNTIMED_GRPC_PORT


def pod_view(obj: Mapping[str, Any]) -> PodView | None:
    """The :class:`PodView` of a Pod object (``None`` without a UID)."""
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    uid = str(meta.get("uid") or "")
    if not uid:
        return None
    return PodView(
        uid=uid,
        name=str(meta.get("name") or ""),
        ip=str(status.get("podIP") or ""),
        port=_grpc_port(obj.get("spec") or {}),
        ready=_condition_true(status, "Ready"),
        deleting=bool(meta.get("deletionTimestamp")),
    )


class OwnershipCache:
    """Run UID -> :class:`RunView` and Pod UID -> :class:`PodView`, from informer events only.

    Args:
        runtime: this Runtime's name; other Runs are ignored.

    The cache is not :attr:`synced` until :meth:`mark_synced` is called (after both
    informers finished their first list); until then every invoke is answered 503.
    """

    def __init__(self, *, runtime: str) -> None:
        self.runtime = runtime
        self._runs: dict[str, RunView] = {}
        self._pods: dict[str, PodView] = {}
        self._synced = False

    @property
    def synced(self) -> bool:
        """Whether both informers have delivered their first full list."""
        return self._synced

    def mark_synced(self) -> None:
        """Record that the Run and Pod informers have synced."""
        self._synced = True

    def run(self, uid: str) -> RunView | None:
        """The function Run with UID ``uid``, or ``None`` (never an API request)."""
        return self._runs.get(uid)

    def pod(self, uid: str) -> PodView | None:
        """The Runtime Pod with UID ``uid``, or ``None``."""
        return self._pods.get(uid)

    def __len__(self) -> int:
        return len(self._runs)

    def on_run_event(self, event: InformerEvent) -> None:
        """Informer handler for Runs (synchronous; only updates the map)."""
        if event.old is not None and event.type is EventType.MODIFIED:
            old_uid = str((event.old.get("metadata") or {}).get("uid") or "")
            new_uid = str((event.obj.get("metadata") or {}).get("uid") or "")
            if old_uid and old_uid != new_uid:
                self._runs.pop(old_uid, None)
        view = run_view(event.obj, runtime=self.runtime)
        uid = str((event.obj.get("metadata") or {}).get("uid") or "")
        if event.type is EventType.DELETED or view is None:
            self._runs.pop(uid, None)
            return
        self._runs[view.uid] = view

    def on_pod_event(self, event: InformerEvent) -> None:
        """Informer handler for the Runtime's Pods (synchronous; only updates the map)."""
        view = pod_view(event.obj)
        if view is None:
            return
        if event.type is EventType.DELETED:
            self._pods.pop(view.uid, None)
            return
        self._pods[view.uid] = view

    def load_runs(self, objs: Iterable[Mapping[str, Any]]) -> None:
        """Seed the Run map from an informer that synced before the handler was added."""
        for obj in objs:
            self.on_run_event(InformerEvent(EventType.ADDED, dict(obj)))
