"""The control plane with the real runtimed sidecar and the built-in Python Runtime Server.

No test double here: the Runtime controller's Pod template (env, workspace volume,
ServiceAccount with the generated Role, readiness gate) must be enough for ``krt-runtimed``
to heartbeat, pass its readiness gate and run the Runs this scheduler binds.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from krt.kube.client import Kube
from krt.kube.resources import PODS, RUNS, RUNTIMES

from .harness import NS, run_manifest, running_controlplane, wait_for

BIN = Path(sys.executable).parent
pytestmark = pytest.mark.skipif(
    not (BIN / "krt-runtimed").exists() or not (BIN / "krt-python-runtime").exists(),
    reason="krt-runtimed or krt-python-runtime is not installed",
)


def python_runtime(*, runs: int) -> dict[str, Any]:
    """A Runtime of the built-in Python Runtime Server; runtimed is the default sidecar."""
    return {
        "apiVersion": "kruntimes.io/v1alpha1",
        "kind": "Runtime",
        "metadata": {"name": "python", "namespace": NS},
        "spec": {
            "replicas": 1,
            "capacity": {"resources": {"runs": runs}},
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "runtime",
                            "image": "kruntimes/python-runtime",
                            "env": [
                                {
                                    "name": "POD_IP",
                                    "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}},
                                }
                            ],
                            # localkube runs containers as processes: the workspace volume
                            # is the Pod root's workspace directory
                            "args": [
                                "--listen",
                                "$(POD_IP):9091",
                                "--work-dir",
                                "$(KRT_POD_ROOT)/workspace",
                            ],
                        }
                    ]
                }
            },
        },
    }


async def test_runs_succeed_on_real_runtimed_within_capacity(kube: Kube) -> None:
    await kube.create(RUNTIMES, python_runtime(runs=2))
    async with running_controlplane(kube) as plane:
        for index in range(4):
            manifest = run_manifest(f"hello-{index}")
            manifest["spec"]["source"] = {"inline": f"print('hello {index}')\n"}
            manifest["spec"]["mode"] = {"task": {}}
            await kube.create(RUNS, manifest)

        async def all_succeeded() -> bool:
            runs, _ = await kube.list(RUNS, NS)
            phases = [(r.get("status") or {}).get("phase") for r in runs]
            assert "Failed" not in phases, runs
            return phases.count("Succeeded") == 4

        await wait_for(all_succeeded, seconds=60)
        runtime = await kube.get(RUNTIMES, "python", NS)
        assert runtime["status"]["readyReplicas"] == 1
        await wait_for(lambda: plane.scheduler.bound == 4)


async def test_pod_loss_with_real_runtimed_retries_on_the_replacement_pod(kube: Kube) -> None:
    await kube.create(RUNTIMES, python_runtime(runs=2))
    async with running_controlplane(kube):
        manifest = run_manifest("long", max_attempts=2)
        manifest["spec"]["source"] = {"inline": "import time\ntime.sleep(60)\n"}
        manifest["spec"]["mode"] = {"task": {}}
        await kube.create(RUNS, manifest)

        async def running_on() -> str | None:
            run = await kube.get(RUNS, "long", NS)
            status = run.get("status") or {}
            return str(status["assignedPod"]) if status.get("phase") == "Running" else None

        await wait_for(running_on, seconds=30)
        first = await kube.get(RUNS, "long", NS)
        old_uid = first["status"]["assignedPodUID"]
        assert first["status"]["attempt"] == 1
        await kube.delete(PODS, first["status"]["assignedPod"], NS)

        async def second_attempt_running() -> bool:
            run = await kube.get(RUNS, "long", NS)
            status = run.get("status") or {}
            assert status.get("phase") != "Failed", status
            return (
                status.get("phase") == "Running"
                and status.get("attempt") == 2
                and status.get("assignedPodUID") != old_uid
            )

        await wait_for(second_attempt_running, seconds=45)
