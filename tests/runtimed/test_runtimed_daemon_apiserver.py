"""The whole daemon (serve_daemon) against a real API server (localkube, in memory) and the
real Bash Runtime Server process: informer, conditional status writes, heartbeat Lease,
RuntimedReady, task lifecycle, /metrics. The scheduler's bind is written by the test."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import yaml
from runtimed_servers import runtime_server

from krt.api import Run, bind_patch
from krt.api.patches import apply_merge_patch
from krt.kube.client import Kube, connect
from krt.kube.errors import NotFound
from krt.kube.resources import EVENTS, LEASES, NAMESPACES, PODS, RUNS, ResourceRef
from localkube.apiserver import ApiServerConfig, running_apiserver
from runtimed.daemon import DaemonConfig, DaemonHandle, serve_daemon
from runtimed.identity import PodIdentity
from runtimed.sources import Workspace
from runtimed.tasks import TaskTimings

NS = "rt"
CRDS = ResourceRef(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", False, "CustomResourceDefinition"
)
CRD_DIR = Path(__file__).resolve().parents[2] / "charts" / "kruntimes" / "crds"


@pytest.fixture
async def kube() -> AsyncIterator[Kube]:
    async with running_apiserver(ApiServerConfig(bookmark_interval=1.0)) as handle:
        client = await connect(kubeconfig=handle.kubeconfig_path)
        async with client:
            await client.create(NAMESPACES, {"metadata": {"name": NS}})
            for path in sorted(CRD_DIR.glob("*.yaml")):
                await client.create(CRDS, yaml.safe_load(path.read_text()))
            with trio.fail_after(10):
                while True:
                    try:
                        await client.list(RUNS, NS)
                        break
                    except NotFound:
                        await trio.sleep(0.05)
            yield client


async def make_pod(kube: Kube) -> dict[str, Any]:
    return await kube.create(
        PODS,
        {
            "metadata": {"name": "runtime-bash-x1", "namespace": NS},
            "spec": {"containers": [{"name": "runtime", "image": "kruntimes/bash-runtime"}]},
        },
    )


async def create_bound_run(kube: Kube, pod: dict[str, Any], name: str, spec: dict[str, Any]) -> str:
    obj = await kube.create(
        RUNS, {"metadata": {"name": name, "namespace": NS}, "spec": {"runtime": "bash", **spec}}
    )
    patch = bind_patch(
        Run.from_dict(obj),
        pod_name=pod["metadata"]["name"],
        pod_uid=pod["metadata"]["uid"],
        now=datetime.now(UTC),
    )
    obj["status"] = apply_merge_patch(obj.get("status"), patch)
    await kube.replace_status(RUNS, obj)
    return str(obj["metadata"]["uid"])


async def wait_phase(kube: Kube, name: str, *phases: str, within: float = 20) -> dict[str, Any]:
    with trio.fail_after(within):
        while True:
            obj = await kube.get(RUNS, name, NS)
            if (obj.get("status") or {}).get("phase") in phases:
                return obj
            await trio.sleep(0.05)


async def test_daemon_runs_tasks_end_to_end(kube: Kube, tmp_path: Path) -> None:
    pod = await make_pod(kube)
    workspace = tmp_path / "ws"
    async with runtime_server("bash", workspace) as (port, _), trio.open_nursery() as nursery:
        config = DaemonConfig(
            pod=PodIdentity(name=pod["metadata"]["name"], namespace=NS, uid=pod["metadata"]["uid"]),
            server_host="127.0.0.1",
            server_port=port,
            workspace=Workspace(root=workspace),
            http_host="127.0.0.1",
            http_port=0,
            timings=TaskTimings(rleg_period=0.02),
        )
        handle: DaemonHandle = await nursery.start(
            lambda task_status: serve_daemon(config, kube=kube, task_status=task_status)
        )

        # readiness gate and heartbeat
        with trio.fail_after(10):
            while True:
                conditions = (await kube.get(PODS, pod["metadata"]["name"], NS)).get(
                    "status", {}
                ).get("conditions") or []
                if any(
                    c["type"] == "kruntimes.io/RuntimedReady" and c["status"] == "True"
                    for c in conditions
                ):
                    break
                await trio.sleep(0.05)
        lease = await kube.get(LEASES, f"runtimed-{pod['metadata']['name']}", NS)
        assert lease["spec"]["holderIdentity"] == pod["metadata"]["uid"]

        # success with outputs; stdout goes to the log, not the status
        await create_bound_run(
            kube,
            pod,
            "ok",
            {
                "source": {
                    "inline": 'echo "to the log"\necho "greeting=hello world" >> "$KRUNTIME_OUTPUTS"\n'
                },
                "mode": {"task": {}},
            },
        )
        done = await wait_phase(kube, "ok", "Succeeded", "Failed")
        assert done["status"]["phase"] == "Succeeded", done["status"]
        assert done["status"]["outputs"] == {"greeting": "hello world"}
        assert done["status"]["attempt"] == 1

        # failure: exit code and stderr tail in the message
        await create_bound_run(
            kube,
            pod,
            "bad",
            {"source": {"inline": "echo oops >&2\nexit 7\n"}, "mode": {"task": {}}},
        )
        failed = await wait_phase(kube, "bad", "Failed", "Succeeded")
        assert failed["status"]["reason"] == "ExecutionFailed"
        assert "exit code 7" in failed["status"]["message"]
        assert "oops" in failed["status"]["message"]

        # timeout: the process is cancelled at the server
        await create_bound_run(
            kube,
            pod,
            "slow",
            {"source": {"inline": "sleep 30\n"}, "mode": {"task": {}}, "timeout": "1s"},
        )
        timed_out = await wait_phase(kube, "slow", "Timeout", "Failed", "Succeeded")
        assert timed_out["status"]["phase"] == "Timeout"
        assert (await handle.server.status(timed_out["metadata"]["uid"])).state.value == "NotFound"

        # a start failure (the server rejects Execute as invalid) fails the Run for good
        # (ExecuteRejected, naming the fields to set) and records a StartFailed Event
        await create_bound_run(kube, pod, "reject", {"mode": {"task": {"args": ["a", "b"]}}})
        rejected = await wait_phase(kube, "reject", "Failed", "Succeeded")
        assert rejected["status"]["reason"] == "ExecuteRejected"
        assert "INVALID_ARGUMENT" in rejected["status"]["message"]
        assert "set spec.mode.task.args" in rejected["status"]["message"]
        with trio.fail_after(10):
            while True:
                events, _ = await kube.list(EVENTS, NS)
                if any(
                    e["reason"] == "StartFailed" and e["involvedObject"]["name"] == "reject"
                    for e in events
                ):
                    break
                await trio.sleep(0.05)

        async with httpx.AsyncClient() as http:
            body = (await http.get(f"http://127.0.0.1:{handle.http_port}/metrics")).text
        assert 'runtimed_task_runs_total{outcome="Succeeded"} 1.0' in body
        assert "runtimed_runtime_server_healthy 1.0" in body
        assert "runtimed_claim_lag_seconds_count 4.0" in body
        nursery.cancel_scope.cancel()
