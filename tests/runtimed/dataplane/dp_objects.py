"""Run and Pod objects as informers deliver them (dataplane tests)."""

from __future__ import annotations

from typing import Any

RUNTIME = "python"
NAMESPACE = "ns"


def function_run(
    uid: str,
    *,
    name: str = "fn",
    pod_uid: str = "pod-a",
    attempt: int = 1,
    phase: str = "Ready",
    ready: str = "True",
    runtime: str = RUNTIME,
    rv: str = "1",
    **meta: Any,
) -> dict[str, Any]:
    """A function-mode Run assigned to ``pod_uid``."""
    return {
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "uid": uid,
            "resourceVersion": rv,
            **meta,
        },
        "spec": {"runtime": runtime, "mode": {"function": {"handler": "h.handle"}}},
        "status": {
            "phase": phase,
            "attempt": attempt,
            "assignedPod": f"name-{pod_uid}",
            "assignedPodUID": pod_uid,
            "conditions": [{"type": "Ready", "status": ready}],
        },
    }


def runtime_pod(
    uid: str, *, ip: str, port: int = 9090, ready: bool = True, **meta: Any
) -> dict[str, Any]:
    """A Runtime Pod with runtimed's gRPC container port."""
    return {
        "metadata": {"name": f"name-{uid}", "namespace": NAMESPACE, "uid": uid, **meta},
        "spec": {
            "containers": [
                {"name": "runtime"},
                {"name": "runtimed", "ports": [{"name": "grpc", "containerPort": port}]},
            ]
        },
        "status": {
            "podIP": ip,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }
