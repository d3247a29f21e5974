"""Sample Run and Runtime objects (wire form) for the API tests, including the seeds' examples."""

from __future__ import annotations

import copy
from typing import Any

UID = "2c24c1f0-9f8f-4f80-82d5-3dd16a12d1e6"
SHA = "0123456789abcdef0123456789abcdef01234567"


def task_run() -> dict[str, Any]:
    """A valid task Run using every spec field (seed 001's first example, extended)."""
    return {
        "apiVersion": "kruntimes.io/v1alpha1",
        "kind": "Run",
        "metadata": {"name": "summarize-once", "namespace": "kruntimes-demo", "uid": UID},
        "spec": {
            "runtime": "python",
            "source": {"inline": 'print("hello")\n', "inlinePath": "main.py"},
            "mode": {"task": {"entrypoint": "main.py", "args": ["--verbose"]}},
            "env": [{"name": "LOG_LEVEL", "value": "debug"}, {"name": "A_1", "value": ""}],
            "timeout": "1h30m",
            "retryPolicy": {
                "maxAttempts": 3,
                "backoff": "2s",
                "retryableReasons": ["ExecutionFailed", "ExecutionLost"],
            },
            "ttlSecondsAfterFinished": 300,
            "resources": {"requests": {"runs": 1, "example.com/gpu": 1}},
        },
    }


def function_run() -> dict[str, Any]:
    """Seed 001's function-mode example."""
    return {
        "apiVersion": "kruntimes.io/v1alpha1",
        "kind": "Run",
        "metadata": {"name": "diagnose-service", "namespace": "kruntimes-demo", "uid": UID},
        "spec": {
            "runtime": "python",
            "source": {
                "inlinePath": "main.py",
                "inline": 'def invoke(request):\n    return {"outputs": {"summary": "ok"}}\n',
            },
            "mode": {"function": {"handler": "main.invoke", "idleTimeoutSeconds": 600}},
        },
    }


def repo_run() -> dict[str, Any]:
    """A task Run checking out a repository at a pinned commit."""
    return {
        "apiVersion": "kruntimes.io/v1alpha1",
        "kind": "Run",
        "metadata": {"name": "from-git", "namespace": "default"},
        "spec": {
            "runtime": "bash",
            "source": {"repoURL": "https://github.com/example/tools.git", "commitSHA": SHA},
            "mode": {"task": {"entrypoint": "scripts/run.sh"}},
        },
    }


def full_status() -> dict[str, Any]:
    """A status using every status field."""
    return {
        "phase": "Ready",
        "reason": "FunctionRegistered",
        "message": "registered",
        "assignedPod": "runtime-python-7f587b4668-njcks",
        "assignedPodUID": "7d0c3c53-2a0e-4a0a-9b0e-8f3f9b0c1d2e",
        "endpoint": {
            "protocol": "HTTPS",
            "url": "https://runtime-gateway.kruntimes-system.svc.cluster.local/v1/namespaces/"
            f"kruntimes-demo/runtimes/python/functions/{UID}:invoke",
            "caBundle": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==",
        },
        "startTime": "2026-11-29T08:00:00.000000Z",
        "completionTime": "2026-11-29T08:00:01.500000Z",
        "attempt": 1,
        "retryAfter": "2026-11-29T08:00:02.000000Z",
        "outputs": {"summary": "1 pending pod found", "exit.code": "0"},
        "observedGeneration": 1,
        "conditions": [
            {
                "type": "Scheduled",
                "status": "True",
                "reason": "Assigned",
                "lastTransitionTime": "2026-11-29T08:00:00.000000Z",
            },
            {
                "type": "Ready",
                "status": "True",
                "reason": "FunctionRegistered",
                "message": "accepting invokes",
                "lastTransitionTime": "2026-11-29T08:00:00.250000Z",
                "observedGeneration": 1,
            },
        ],
    }


def runtime() -> dict[str, Any]:
    """A valid Runtime using every field."""
    return {
        "apiVersion": "kruntimes.io/v1alpha1",
        "kind": "Runtime",
        "metadata": {"name": "python", "namespace": "kruntimes-demo"},
        "spec": {
            "replicas": 2,
            "capacity": {"resources": {"runs": 8}},
            "template": {
                "metadata": {"labels": {"team": "a"}},
                "spec": {"containers": [{"name": "runtime", "image": "krt-python-runtime:dev"}]},
            },
            "daemonImage": "runtimed:dev",
            "port": 9091,
        },
        "status": {
            "readyReplicas": 1,
            "replicas": 2,
            "observedGeneration": 3,
            "conditions": [
                {
                    "type": "Available",
                    "status": "True",
                    "reason": "PodsReady",
                    "message": "1 of 2 Pods ready",
                    "lastTransitionTime": "2026-11-29T08:00:00.000000Z",
                    "observedGeneration": 3,
                }
            ],
        },
    }


def with_changes(obj: dict[str, Any], **paths: Any) -> dict[str, Any]:
    """A deep copy of ``obj`` with dotted paths (``spec__mode__task``) set; ``None`` deletes."""
    result = copy.deepcopy(obj)
    for dotted, value in paths.items():
        keys = dotted.split("__")
        target = result
        for key in keys[:-1]:
            target = target.setdefault(key, {})
        if value is None:
            target.pop(keys[-1], None)
        else:
            target[keys[-1]] = value
    return result
