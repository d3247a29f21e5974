"""Builders of Run, Runtime, Pod and Lease dicts for the control-plane tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from krt.api.constants import RUNTIME_LABEL
from krt.api.phases import Phase
from krt.api.run import Run
from krt.api.runtime import Runtime
from krt.api.times import format_time
from krt.controlplane.podstate import PodState

NOW = datetime(2026, 11, 29, 8, 0, 0, tzinfo=UTC)
NS = "demo"


def run_dict(
    name: str = "r1",
    *,
    uid: str | None = None,
    runtime: str = "python",
    function: bool = False,
    phase: Phase | None = None,
    pod: str | None = None,
    pod_uid: str | None = None,
    attempt: int = 0,
    max_attempts: int | None = None,
    requests: dict[str, int] | None = None,
    cancel: bool = False,
    deleting: bool = False,
    finalizers: tuple[str, ...] = (),
    rv: str = "1",
    retry_after: datetime | None = None,
    completion: datetime | None = None,
    ttl: int | None = None,
) -> dict[str, Any]:
    """A Run dict with the given spec and status fields."""
    spec: dict[str, Any] = {
        "runtime": runtime,
        "mode": {"function": {"handler": "main.invoke"}}
        if function
        else {"task": {"entrypoint": "main.py"}},
        "source": {"inline": "print(1)\n", "inlinePath": "main.py"},
    }
    if max_attempts is not None:
        spec["retryPolicy"] = {"maxAttempts": max_attempts, "backoff": "0s"}
    if requests is not None:
        spec["resources"] = {"requests": requests}
    if cancel:
        spec["cancelRequested"] = True
    if ttl is not None:
        spec["ttlSecondsAfterFinished"] = ttl
    status: dict[str, Any] = {}
    if phase is not None:
        status["phase"] = phase.value
    if pod is not None:
        status["assignedPod"] = pod
        status["assignedPodUID"] = pod_uid or f"uid-{pod}"
    if attempt:
        status["attempt"] = attempt
    if retry_after is not None:
        status["retryAfter"] = format_time(retry_after)
    if completion is not None:
        status["completionTime"] = format_time(completion)
    meta: dict[str, Any] = {
        "name": name,
        "namespace": NS,
        "uid": uid or f"uid-run-{name}",
        "resourceVersion": rv,
    }
    if deleting:
        meta["deletionTimestamp"] = format_time(NOW - timedelta(seconds=1))
    if finalizers:
        meta["finalizers"] = list(finalizers)
    data: dict[str, Any] = {
        "apiVersion": "kruntimes.io/v1alpha1",
        "kind": "Run",
        "metadata": meta,
        "spec": spec,
    }
    if status:
        data["status"] = status
    return data


def make_run(name: str = "r1", **kwargs: Any) -> Run:
    """A parsed Run (see :func:`run_dict`)."""
    return Run.from_dict(run_dict(name, **kwargs))


def runtime_dict(
    name: str = "python",
    *,
    runs: int | None = 2,
    extra: dict[str, int] | None = None,
    replicas: int = 2,
    daemon_image: str | None = None,
    uid: str = "uid-runtime",
) -> dict[str, Any]:
    """A Runtime dict."""
    spec: dict[str, Any] = {
        "replicas": replicas,
        "template": {
            "metadata": {"labels": {"team": "a"}},
            "spec": {
                "containers": [
                    {"name": "runtime", "image": "kruntimes/python-runtime"},
                ]
            },
        },
    }
    resources: dict[str, int] = {}
    if runs is not None:
        resources["runs"] = runs
    resources.update(extra or {})
    if resources:
        spec["capacity"] = {"resources": resources}
    if daemon_image is not None:
        spec["daemonImage"] = daemon_image
    return {
        "apiVersion": "kruntimes.io/v1alpha1",
        "kind": "Runtime",
        "metadata": {"name": name, "namespace": NS, "uid": uid, "generation": 1},
        "spec": spec,
    }


def make_runtime(name: str = "python", **kwargs: Any) -> Runtime:
    """A parsed Runtime."""
    return Runtime.from_dict(runtime_dict(name, **kwargs))


def pod(
    name: str,
    *,
    uid: str | None = None,
    runtime: str = "python",
    ready: bool = True,
    deleting: bool = False,
    fresh: bool = True,
    namespace: str = NS,
) -> PodState:
    """A PodState."""
    return PodState(
        name=name,
        uid=uid or f"uid-{name}",
        namespace=namespace,
        runtime=runtime,
        ready=ready,
        deleting=deleting,
        heartbeat_fresh=fresh,
    )


def pod_dict(
    name: str,
    *,
    uid: str | None = None,
    runtime: str = "python",
    ready: bool = True,
    deleting: bool = False,
) -> dict[str, Any]:
    """A Pod dict."""
    meta: dict[str, Any] = {
        "name": name,
        "namespace": NS,
        "uid": uid or f"uid-{name}",
        "labels": {RUNTIME_LABEL: runtime},
    }
    if deleting:
        meta["deletionTimestamp"] = format_time(NOW)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def lease_dict(
    pod_name: str, *, holder: str | None, renewed: datetime | None, duration: int | None = 40
) -> dict[str, Any]:
    """A heartbeat Lease dict."""
    spec: dict[str, Any] = {}
    if holder is not None:
        spec["holderIdentity"] = holder
    if renewed is not None:
        spec["renewTime"] = format_time(renewed)
    if duration is not None:
        spec["leaseDurationSeconds"] = duration
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": f"runtimed-{pod_name}", "namespace": NS},
        "spec": spec,
    }
