"""serve_daemon with the dataplane on: informer-fed routing on a real API server (localkube).

The Run's status is written by the test (the scheduler and the function lifecycle are not
running here); the registry entry is filled the way the function lifecycle fills it.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import yaml
from dp_harness import FakeRuntimeServer, client, invoke, request

from krt.api import Run, bind_patch
from krt.api.patches import apply_merge_patch
from krt.grpc.client import GrpcStatusError
from krt.kube.client import Kube, connect
from krt.kube.errors import NotFound
from krt.kube.resources import NAMESPACES, PODS, RUNS, ResourceRef
from krt.proto.executor.v1 import runtime_grpc
from krt.proto.executor.v1 import runtime_pb2 as pb
from localkube.apiserver import ApiServerConfig, running_apiserver
from runtimed.daemon import DaemonConfig, DaemonHandle, serve_daemon
from runtimed.dataplane.app import DataplaneSettings
from runtimed.dataplane.server import serve_grpc
from runtimed.identity import PodIdentity
from runtimed.sources import Workspace

NS = "ns"
CRDS = ResourceRef(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", False, "CustomResourceDefinition"
)
CRD_DIR = Path(__file__).resolve().parents[3] / "charts" / "kruntimes" / "crds"
NOT_FOUND, FAILED_PRECONDITION, UNAVAILABLE = 5, 9, 14


class BaseRuntime(runtime_grpc.RuntimeServicer):  # type: ignore[misc]
    """The base Runtime service, just enough for runtimed's sweep and readiness."""

    async def List(self, message: Any) -> Any:  # noqa: N802
        return pb.ListResponse()

    healthy = True

    async def Health(self, message: Any) -> Any:  # noqa: N802
        if self.healthy:
            return pb.HealthResponse(healthy=True, message="ok")
        return pb.HealthResponse(healthy=False, message="handler pool stuck")


@pytest.fixture
async def kube_and_token() -> AsyncIterator[tuple[Kube, str]]:
    async with running_apiserver(ApiServerConfig(bookmark_interval=1.0)) as handle:
        api = await connect(kubeconfig=handle.kubeconfig_path)
        async with api:
            await api.create(NAMESPACES, {"metadata": {"name": NS}})
            for path in sorted(CRD_DIR.glob("*.yaml")):
                await api.create(CRDS, yaml.safe_load(path.read_text()))
            with trio.fail_after(10):
                while True:
                    try:
                        await api.list(RUNS, NS)
                        break
                    except NotFound:
                        await trio.sleep(0.05)
            yield api, handle.admin_token


async def ready_function_run(kube: Kube, pod: dict[str, Any]) -> dict[str, Any]:
    obj = await kube.create(
        RUNS,
        {
            "metadata": {"name": "fn", "namespace": NS},
            "spec": {
                "runtime": "python",
                "source": {"inline": "def invoke(request):\n    return request\n"},
                "mode": {"function": {"handler": "main.invoke"}},
            },
        },
    )
    now = datetime.now(UTC)
    patch = bind_patch(
        Run.from_dict(obj),
        pod_name=pod["metadata"]["name"],
        pod_uid=pod["metadata"]["uid"],
        now=now,
    )
    obj["status"] = apply_merge_patch(obj.get("status"), patch)
    obj = await kube.replace_status(RUNS, obj)
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    obj["status"] = apply_merge_patch(
        obj["status"],
        {
            "phase": "Running",
            "attempt": 1,
            "startTime": stamp,
        },
    )
    obj = await kube.replace_status(RUNS, obj)
    conditions = [c for c in obj["status"].get("conditions", []) if c["type"] != "Ready"]
    conditions.append(
        {
            "type": "Ready",
            "status": "True",
            "reason": "FunctionRegistered",
            "message": "registered",
            "lastTransitionTime": stamp,
        }
    )
    obj["status"] = {**obj["status"], "phase": "Ready", "conditions": conditions}
    return await kube.replace_status(RUNS, obj)


async def test_daemon_serves_the_proxy_from_its_informers(
    kube_and_token: tuple[Kube, str], tmp_path: Path
) -> None:
    kube, admin_token = kube_and_token
    pod = await kube.create(
        PODS,
        {
            "metadata": {
                "name": "runtime-python-x1",
                "namespace": NS,
                "labels": {"kruntimes.io/runtime": "python"},
            },
            "spec": {"containers": [{"name": "runtime", "image": "kruntimes/python-runtime"}]},
        },
    )
    functions = FakeRuntimeServer()
    base = BaseRuntime()
    async with trio.open_nursery() as nursery:
        server_port = await nursery.start(
            lambda task_status: serve_grpc(
                {
                    "executor.v1.Runtime": base.service,
                    "executor.v1.FunctionRuntime": functions.service,
                },
                host="127.0.0.1",
                port=0,
                tls=None,
                task_status=task_status,
            )
        )
        config = DaemonConfig(
            pod=PodIdentity(
                name=pod["metadata"]["name"],
                namespace=NS,
                uid=pod["metadata"]["uid"],
                ip="127.0.0.1",
                runtime="python",
            ),
            server_host="127.0.0.1",
            server_port=server_port,
            workspace=Workspace(root=tmp_path / "ws"),
            http_host="127.0.0.1",
            http_port=0,
            dataplane=DataplaneSettings(host="127.0.0.1", port=0),
            functions=None,  # this test writes the function Run's status itself
        )
        with trio.fail_after(15):
            handle: DaemonHandle = await nursery.start(
                functools.partial(serve_daemon, config, kube=kube)
            )
            assert handle.proxy is not None
            assert handle.registry is not None
            async with client("127.0.0.1", handle.proxy.port) as conn:
                with pytest.raises(GrpcStatusError) as info:
                    await invoke(conn, request("9b1b5e0a-0000-4000-8000-000000000000"))
                assert info.value.code == NOT_FOUND
                run = await ready_function_run(kube, pod)
                uid = run["metadata"]["uid"]
                handle.registry.registering(uid, key=f"{NS}/fn", attempt=1, digest="d")
                handle.registry.ready(uid, attempt=1, registration_id="reg-daemon")
                # the informer delivers the Ready Run; the SSAR is made as the admin here
                response = None
                refusals: list[int] = []
                while response is None:
                    try:
                        response = await invoke(
                            conn,
                            request(uid),
                            metadata=[("authorization", f"Bearer {admin_token}")],
                        )
                    except GrpcStatusError as exc:  # until the watch catches up
                        refusals.append(exc.code)
                        await trio.sleep(0.02)
                assert set(refusals) <= {NOT_FOUND, FAILED_PRECONDITION}
                # the Runtime Server reports itself unhealthy: RuntimedReady goes False and
                # invokes are refused at once (503 at the gateway), until Health recovers
                base.healthy = False
                while handle.proxy.server_down is None:  # noqa: ASYNC110 - the readiness loop's 1 s period
                    await trio.sleep(0.05)
                assert "handler pool stuck" in handle.proxy.server_down
                calls = len(functions.requests)
                with pytest.raises(GrpcStatusError) as refused:
                    await invoke(
                        conn, request(uid), metadata=[("authorization", f"Bearer {admin_token}")]
                    )
                assert refused.value.code == UNAVAILABLE
                assert len(functions.requests) == calls
                base.healthy = True
                while handle.proxy.server_down is not None:  # noqa: ASYNC110
                    await trio.sleep(0.05)
                await invoke(
                    conn, request(uid), metadata=[("authorization", f"Bearer {admin_token}")]
                )
            assert functions.requests[-1].registration.registration_id == "reg-daemon"
            async with httpx.AsyncClient() as http:
                metrics = (await http.get(f"http://127.0.0.1:{handle.http_port}/metrics")).text
            assert 'runtimed_invocations_total{code="OK",route="local"} 2.0' in metrics
            assert 'runtimed_authz_cache_lookups_total{result="miss"}' in metrics
        nursery.cancel_scope.cancel()
