"""Issue 7 acceptance on the full localkube cluster: control plane (scheduler, reaper), Runtime
Pods running real runtimed sidecars and the real Python Runtime Server, driven only through
Run objects.

runtimed's daemon dispatches function Runs (``spec.mode.function``) to
:class:`runtimed.functions.lifecycle.FunctionLifecycle`.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
import trio
from runtimed_cluster import (
    NS,
    container_pid,
    running_cluster,
    runtime_manifest,
    wait_phase,
    wait_runtime_ready,
)

from krt.api.constants import REGISTRATION_CLEANUP_FINALIZER
from krt.kube.errors import NotFound
from krt.kube.resources import PODS, RUNS, RUNTIMES

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
    async with running_cluster(tmp_path / "state") as cluster:
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
    async with running_cluster(tmp_path / "state") as cluster:
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


def _pod_root(cluster: Any, pod_uid: str) -> Path:
    (root,) = [r for r in cluster.pod_roots() if r.name.endswith(pod_uid)]
    return root


def _log_lines(root: Path, container: str) -> list[str]:
    return [
        line
        for path in sorted((root / "logs" / container).glob("*.log"))
        for line in path.read_text().splitlines()
    ]


async def test_runtimed_restart_keeps_the_registration_and_server_kill_re_registers(
    tmp_path: Path,
) -> None:
    async with running_cluster(tmp_path / "state") as cluster:
        kube = cluster.kube
        await kube.create(RUNTIMES, runtime_manifest("python", kind="python"))
        (pod,) = await wait_runtime_ready(kube, "python", 1)
        await kube.create(
            RUNS, function_run("sticky", retryPolicy={"maxAttempts": 2, "backoff": "100ms"})
        )
        ready = await wait_phase(kube, "sticky", "Ready", "Failed")
        uid = ready["metadata"]["uid"]
        version = ready["metadata"]["resourceVersion"]
        root = _pod_root(cluster, pod["metadata"]["uid"])

        # runtimed restart: re-adopted (same registration, no status write)
        os.kill(container_pid(root, "runtimed"), signal.SIGKILL)
        with trio.fail_after(30):
            while not any(  # noqa: ASYNC110 - polling a log file
                "re-adopted registration" in line for line in _log_lines(root, "runtimed")
            ):
                await trio.sleep(0.1)
        await trio.sleep(1.0)
        obj = await kube.get(RUNS, "sticky", NS)
        assert obj["metadata"]["resourceVersion"] == version
        assert obj["status"]["phase"] == "Ready"
        ready_lines = [
            line
            for line in _log_lines(root, "runtime")
            if "registration ready" in line and uid in line
        ]
        assert len(ready_lines) == 1, ready_lines  # the Runtime Server registered it once

        # Runtime Server kill: the registration is lost, attempt 2 registers again
        os.kill(container_pid(root, "runtime"), signal.SIGKILL)
        with trio.fail_after(60):
            while True:
                status = (await kube.get(RUNS, "sticky", NS))["status"]
                if status.get("phase") == "Ready" and status.get("attempt") == 2:
                    break
                await trio.sleep(0.05)
        assert status["endpoint"] == ready["status"]["endpoint"]
