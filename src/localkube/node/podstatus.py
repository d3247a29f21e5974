"""Pod status from container observations (pure): phase, conditions, containerStatuses.

Implements the kubelet's status rules: ``phase`` is Pending until every container has
started at least once, Succeeded/Failed once every container terminated for good (all exit
codes 0 -> Succeeded), Running otherwise. ``ContainersReady`` is True when every container
runs and is ready; ``Ready`` additionally needs every ``spec.readinessGates`` condition to be
True on the Pod. Conditions of other types (patched by other components, for example
``kruntimes.io/RuntimedReady``) are kept as they are; ours keep their
``lastTransitionTime`` while their status does not change.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

NODE_CONDITION_TYPES = ("PodScheduled", "Initialized", "ContainersReady", "Ready")


def rfc3339(epoch_seconds: float) -> str:
    """Format epoch seconds as Kubernetes' second-precision UTC timestamp."""
    return datetime.fromtimestamp(int(epoch_seconds), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class ContainerObservation:
    """What the node knows about one container (times in epoch seconds).

    Attributes:
        name, image: from the spec.
        state: ``waiting``, ``running`` or ``terminated``.
        reason, message: of a waiting or terminated state.
        started_at, finished_at, exit_code, signal: of running/terminated states.
        pid: the running process (containerID ``localkube://<pod-uid>/<name>/<pid>``).
        restart_count: restarts so far.
        last_terminated: the previous run's ``terminated`` state object, if any.
        ready: readiness (True when running without a readiness probe).
        started: startup probe passed (True when running without one).
        ever_started: the container has started at least once in this Pod.
    """

    name: str
    image: str
    state: str = "waiting"
    reason: str = "ContainerCreating"
    message: str = ""
    started_at: float | None = None
    finished_at: float | None = None
    exit_code: int | None = None
    signal: int | None = None
    pid: int | None = None
    restart_count: int = 0
    last_terminated: dict[str, Any] | None = None
    ready: bool = False
    started: bool = False
    ever_started: bool = False

    def completed(self) -> bool:
        """Terminated with exit code 0 (an init container that did its job)."""
        return self.state == "terminated" and self.exit_code == 0

    def terminated_state(self) -> dict[str, Any]:
        """The Kubernetes ``terminated`` state object of the current/last run."""
        t: dict[str, Any] = {
            "exitCode": self.exit_code if self.exit_code is not None else 0,
            "reason": self.reason,
        }
        if self.signal:
            t["signal"] = self.signal
        if self.message:
            t["message"] = self.message
        if self.started_at is not None:
            t["startedAt"] = rfc3339(self.started_at)
        if self.finished_at is not None:
            t["finishedAt"] = rfc3339(self.finished_at)
        if self.pid is not None:
            t["containerID"] = f"localkube://{self.pid}"
        return t

    def status(self, *, init: bool = False) -> dict[str, Any]:
        """The ``containerStatuses[]`` entry (``initContainerStatuses[]`` with ``init``: an
        init container is ready once it completed with exit code 0)."""
        if self.state == "running":
            state: dict[str, Any] = {"running": {"startedAt": rfc3339(self.started_at or 0.0)}}
        elif self.state == "terminated":
            state = {"terminated": self.terminated_state()}
        else:
            w: dict[str, Any] = {"reason": self.reason}
            if self.message:
                w["message"] = self.message
            state = {"waiting": w}
        out: dict[str, Any] = {
            "name": self.name,
            "image": self.image,
            "imageID": "",
            "ready": self.completed() if init else self.state == "running" and self.ready,
            "started": self.state == "running" and self.started,
            "restartCount": self.restart_count,
            "state": state,
            "lastState": {"terminated": self.last_terminated} if self.last_terminated else {},
        }
        if self.pid is not None and self.state != "waiting":
            out["containerID"] = f"localkube://{self.pid}"
        return out


def phase(
    observations: list[ContainerObservation], *, restart_policy: str, final: bool = False
) -> str:
    """Return the Pod phase for its containers' observations (kubelet ``getPhase``).

    Args:
        observations: one per container.
        restart_policy: the Pod's ``restartPolicy`` (Always, OnFailure, Never).
        final: the containers were stopped for good (Pod deletion): no restart follows.

    Failed and Succeeded are terminal, so they are reported only when no container will
    run again: with ``Always`` a Pod whose containers all exited is still Running (they
    restart); with ``OnFailure`` it is Succeeded once all exited 0 and Running otherwise.
    """
    if not observations:
        return "Pending"
    if any(o.state == "waiting" and not o.ever_started for o in observations):
        return "Pending"
    if all(o.state == "terminated" for o in observations):
        succeeded = all(o.exit_code == 0 for o in observations)
        if final or restart_policy == "Never":
            return "Succeeded" if succeeded else "Failed"
        if restart_policy == "OnFailure" and succeeded:
            return "Succeeded"
        return "Running"
    return "Running"


def _condition(
    ctype: str,
    ok: bool,
    previous: Mapping[str, Mapping[str, Any]],
    now: float,
    reason: str = "",
    message: str = "",
) -> dict[str, Any]:
    status = "True" if ok else "False"
    prev = previous.get(ctype)
    transition = (
        prev["lastTransitionTime"]
        if prev and prev.get("status") == status and prev.get("lastTransitionTime")
        else rfc3339(now)
    )
    cond: dict[str, Any] = {
        "type": ctype,
        "status": status,
        "lastProbeTime": None,
        "lastTransitionTime": transition,
    }
    if reason:
        cond["reason"] = reason
    if message:
        cond["message"] = message
    return cond


def pod_status(
    pod: Mapping[str, Any],
    observations: list[ContainerObservation],
    *,
    init_observations: list[ContainerObservation] | None = None,
    pod_ip: str,
    host_ip: str,
    start_time: float,
    now: float,
    pending_reason: str = "",
    pending_message: str = "",
    final: bool = False,
) -> dict[str, Any]:
    """Return the Pod's new ``status``, keeping conditions the node does not own.

    Args:
        pod: the Pod as last read (its ``status.conditions`` are merged).
        observations: one per ``spec.containers`` entry, in spec order.
        init_observations: one per ``spec.initContainers`` entry, in spec order.
        pod_ip: the Pod's 127.0.x.y address. host_ip: the node address.
        start_time: when the node accepted the Pod (epoch seconds).
        now: the current time (epoch seconds).
        pending_reason, pending_message: Pod-level reason while Pending (``ErrImagePull``).
        final: the containers were stopped for good (deletion): the phase is terminal.
    """
    spec = pod.get("spec", {})
    inits = list(init_observations or [])
    incomplete = [o.name for o in inits if not o.completed()]
    init_failed = spec.get("restartPolicy", "Always") == "Never" and any(
        o.state == "terminated" and o.exit_code != 0 for o in inits
    )
    old_status = pod.get("status", {}) or {}
    old_conditions = list(old_status.get("conditions", []) or [])
    previous = {c.get("type", ""): c for c in old_conditions}
    not_ready = [o.name for o in observations if not (o.state == "running" and o.ready)]
    containers_ready = not not_ready
    gates = [g.get("conditionType", "") for g in spec.get("readinessGates", []) or []]
    failed_gates = [g for g in gates if previous.get(g, {}).get("status") != "True"]
    ready = containers_ready and not failed_gates
    cr_msg = f"containers with unready status: [{' '.join(not_ready)}]" if not_ready else ""
    if not containers_ready:
        ready_reason, ready_msg = "ContainersNotReady", cr_msg
    elif failed_gates:
        ready_reason = "ReadinessGatesNotReady"
        ready_msg = f'corresponding condition of pod readiness gate "{failed_gates[0]}" does not exist or is not True'
    else:
        ready_reason, ready_msg = "", ""
    ours = [
        _condition("PodScheduled", True, previous, now),
        _condition(
            "Initialized",
            not incomplete,
            previous,
            now,
            "ContainersNotInitialized" if incomplete else "",
            f"containers with incomplete status: [{' '.join(incomplete)}]" if incomplete else "",
        ),
        _condition(
            "ContainersReady",
            containers_ready,
            previous,
            now,
            "" if containers_ready else "ContainersNotReady",
            cr_msg,
        ),
        _condition("Ready", ready, previous, now, ready_reason, ready_msg),
    ]
    kept = [c for c in old_conditions if c.get("type") not in NODE_CONDITION_TYPES]
    status: dict[str, Any] = dict(old_status)
    status.update(
        {
            "phase": ("Failed" if init_failed else "Pending")
            if incomplete
            else phase(
                observations, restart_policy=spec.get("restartPolicy", "Always"), final=final
            ),
            "conditions": ours + kept,
            "hostIP": host_ip,
            "hostIPs": [{"ip": host_ip}],
            "podIP": pod_ip,
            "podIPs": [{"ip": pod_ip}],
            "startTime": rfc3339(start_time),
            "qosClass": "BestEffort",
            "containerStatuses": [o.status() for o in observations],
        }
    )
    if inits:
        status["initContainerStatuses"] = [o.status(init=True) for o in inits]
    if pending_reason and status["phase"] == "Pending":
        status["reason"], status["message"] = pending_reason, pending_message
    else:
        status.pop("reason", None)
        status.pop("message", None)
    return status


def status_changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether ``new`` differs from ``old`` (so a status write is needed)."""
    return dict(old) != dict(new)
