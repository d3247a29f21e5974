"""Picking up Pods after a node restart (pure): the kubelet's node-reboot rules.

A Pod that was running under a previous node process is treated like a Pod after a node
reboot: its containers start again with ``restartCount`` + 1 and ``lastState.terminated``
reason ``Unknown`` (exit code 255); ``restartPolicy: Never`` containers end terminated
instead; containers that finished for good stay finished. Init containers run again
before the containers (as after a sandbox restart) unless the Pod had finished.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from localkube.node.podstatus import ContainerObservation


def parse_time(value: str | None) -> float | None:
    """Parse a Kubernetes timestamp to epoch seconds (None for None/invalid)."""
    if not value:
        return None
    try:
        return datetime.strptime(value[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


def restore_observations(pod: Mapping[str, Any]) -> list[ContainerObservation]:
    """Observations for a Pod the node picks up, applying the node-restart rule."""
    spec = pod.get("spec", {})
    policy = spec.get("restartPolicy", "Always")
    previous = {
        cs.get("name"): cs
        for cs in (pod.get("status", {}) or {}).get("containerStatuses", []) or []
    }
    out = []
    for c in spec.get("containers", []):
        o = ContainerObservation(c["name"], c.get("image", ""))
        cs = previous.get(c["name"])
        if cs:
            state = cs.get("state") or {}
            o.restart_count = int(cs.get("restartCount", 0))
            last = (cs.get("lastState") or {}).get("terminated")
            o.last_terminated = last
            o.ever_started = bool(
                "running" in state or "terminated" in state or last or o.restart_count
            )
            term = state.get("terminated")
            if term and (
                policy == "Never" or (policy == "OnFailure" and term.get("exitCode") == 0)
            ):
                o.state, o.reason = "terminated", term.get("reason", "Completed")
                o.exit_code = int(term.get("exitCode", 0))
                o.message = term.get("message", "")
                o.started_at = parse_time(term.get("startedAt"))
                o.finished_at = parse_time(term.get("finishedAt"))
            elif "running" in state or term:
                lost: dict[str, Any] = {
                    "exitCode": 255,
                    "reason": "Unknown",
                    "message": "the container was running when the node stopped",
                }
                started = (state.get("running") or term or {}).get("startedAt")
                if started:
                    lost["startedAt"] = started
                if policy == "Never":
                    o.state, o.reason, o.exit_code = "terminated", "Unknown", 255
                    o.message = str(lost["message"])
                    o.started_at = parse_time(started)
                    o.finished_at = time.time()
                else:
                    o.last_terminated = lost
                    o.restart_count += 1
        out.append(o)
    return out


def restore_init_observations(
    pod: Mapping[str, Any], observations: list[ContainerObservation]
) -> list[ContainerObservation]:
    """Init container observations: they run (again) whenever the Pod's containers start,
    as after a sandbox restart; restart counts carry over. Containers wait with reason
    ``PodInitializing`` meanwhile."""
    spec = pod.get("spec", {})
    inits = spec.get("initContainers", []) or []
    previous = {
        cs.get("name"): cs
        for cs in (pod.get("status", {}) or {}).get("initContainerStatuses", []) or []
    }
    out = []
    for c in inits:
        o = ContainerObservation(c["name"], c.get("image", ""))
        o.restart_count = int((previous.get(c["name"]) or {}).get("restartCount", 0))
        if observations and all(x.state == "terminated" for x in observations):
            # the Pod finished before a node restart: nothing runs again
            o.state, o.reason, o.exit_code, o.ever_started = "terminated", "Completed", 0, True
        out.append(o)
    if inits:
        for o in observations:
            if o.state == "waiting" and not o.ever_started:
                o.reason = "PodInitializing"
    return out
