"""Issue 7 acceptance on the full localkube cluster: control plane (scheduler, reaper), Runtime
Pods running real runtimed sidecars and the real Python Runtime Server, driven only through
Run objects.

Until runtimed's daemon itself dispatches function Runs to
:class:`runtimed.functions.lifecycle.FunctionLifecycle`, the Runtime Pods' runtimed image is
``runtimed_with_functions.py`` (the real runtimed command with the lifecycle wired next to
the daemon), through a localkube images overlay.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import trio
from runtimed_cluster import NS, running_cluster, runtime_manifest, wait_phase, wait_runtime_ready

from krt.api.constants import REGISTRATION_CLEANUP_FINALIZER
from krt.kube.errors import NotFound
from krt.kube.resources import PODS, RUNS, RUNTIMES

DAEMON = Path(__file__).resolve().parents[3] / "src" / "runtimed" / "daemon.py"
WIRED = "FunctionLifecycle" in DAEMON.read_text()
WRAPPER = Path(__file__).resolve().with_name("runtimed_with_functions.py")
#: the runtimed image: as installed once the daemon is wired, else the test wrapper
IMAGES = None if WIRED else {"kruntimes/runtimed": {"entrypoint": [sys.executable, str(WRAPPER)]}}

pytestmark = pytest.mark.slow

HANDLER = "def invoke(request):\n    return {'echo': request}\n"


def function_run(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kruntimes.io/v1alpha1",
        "kind": "Run",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "runtime": "python",
            "source": {"inline": HANDLER},
            "mode": {"function": {"handler": "main.invoke"}},
            **spec,
        },
    }


async def test_ready_capacity_cancel_and_delete(tmp_path: Path) -> None:
    async with running_cluster(tmp_path / "state", images=IMAGES) as cluster:
        kube = cluster.kube
        await kube.create(RUNTIMES, runtime_manifest("python", kind="python", runs=1))
        (pod,) = await wait_runtime_ready(kube, "python", 1)
        await kube.create(RUNS, function_run("first"))
        first = await wait_phase(kube, "first", "Ready", "Failed")
        uid = first["metadata"]["uid"]
        assert first["status"]["phase"] == "Ready", first["status"]
        assert first["status"]["endpoint"]["url"].endswith(
            f"/v1/namespaces/{NS}/runtimes/python/functions/{uid}:invoke"
        )
        assert first["status"]["assignedPodUID"] == pod["metadata"]["uid"]
        assert REGISTRATION_CLEANUP_FINALIZER in first["metadata"]["finalizers"]

        # the Pod is full: a second function Run waits for the slot
        await kube.create(RUNS, function_run("second"))
        await trio.sleep(1.0)
        assert (await kube.get(RUNS, "second", NS))["status"]["phase"] == "Pending"

        # cancelling the first releases its unit: the second gets it
        await kube.patch(RUNS, "first", NS, {"spec": {"cancelRequested": True}})
        cancelled = await wait_phase(kube, "first", "Cancelled", "Failed")
        assert cancelled["status"]["reason"] == "Cancelled"
        second = await wait_phase(kube, "second", "Ready", "Failed")
        assert second["status"]["phase"] == "Ready"

        # deleting the second runs cleanup and removes the finalizer; a third gets the slot
        await kube.create(RUNS, function_run("third"))
        await kube.delete(RUNS, "second", NS)
        with trio.fail_after(30):
            while True:
                try:
                    await kube.get(RUNS, "second", NS)
                except NotFound:
                    break
                await trio.sleep(0.05)
        third = await wait_phase(kube, "third", "Ready", "Failed")
        assert third["status"]["phase"] == "Ready"


async def test_pod_loss_re_registers_elsewhere_with_attempt_2(tmp_path: Path) -> None:
    async with running_cluster(tmp_path / "state", images=IMAGES) as cluster:
        kube = cluster.kube
        await kube.create(RUNTIMES, runtime_manifest("python", kind="python", replicas=2, runs=2))
        await wait_runtime_ready(kube, "python", 2)
        await kube.create(RUNS, function_run("moving", retryPolicy={"maxAttempts": 3}))
        ready = await wait_phase(kube, "moving", "Ready", "Failed")
        assert ready["status"]["attempt"] == 1
        url = ready["status"]["endpoint"]["url"]
        old_pod = ready["status"]["assignedPod"]
        old_uid = ready["status"]["assignedPodUID"]
        await kube.delete(PODS, old_pod, NS)
        with trio.fail_after(90):
            while True:
                obj = await kube.get(RUNS, "moving", NS)
                status = obj.get("status") or {}
                if status.get("assignedPodUID") == old_uid:
                    # never without the finalizer while the old registration could serve
                    assert REGISTRATION_CLEANUP_FINALIZER in obj["metadata"].get("finalizers", [])
                if status.get("phase") == "Ready" and status.get("attempt") == 2:
                    break
                await trio.sleep(0.05)
        assert status["assignedPodUID"] != old_uid
        assert status["endpoint"]["url"] == url
