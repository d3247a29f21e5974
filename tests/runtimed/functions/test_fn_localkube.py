"""Issue 7 integration: the function lifecycle against a real API server (localkube, in
memory, with the Run CRD from the chart) and the real Python Runtime Server process.

The test creates each Run and binds it itself (the scheduler's bind patch), then lets the
lifecycle (real informer, conditional status writes, finalizer patches, purerpc
FunctionRuntime client) drive it. Timings are real but short (2 s idle, 2 s lifetime).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import trio
import yaml
from runtimed_servers import free_port, runtime_server

from krt.api import Run, bind_patch
from krt.api.constants import REGISTRATION_CLEANUP_FINALIZER
from krt.api.patches import apply_merge_patch
from krt.kube.client import Kube, connect
from krt.kube.clock import SystemClock
from krt.kube.errors import NotFound
from krt.kube.informer import Informer
from krt.kube.resources import NAMESPACES, PODS, RUNS, ResourceRef
from localkube.apiserver import ApiServerConfig, running_apiserver
from runtimed.functions.client import FunctionRuntimeClient
from runtimed.functions.finalizers import KubeFinalizers
from runtimed.functions.lifecycle import FunctionLifecycle
from runtimed.functions.settings import FunctionSettings, FunctionTimings
from runtimed.identity import PodIdentity
from runtimed.sources import Workspace
from runtimed.tasks import KubeStatusWriter

pytestmark = pytest.mark.slow

NS = "fn"
CRDS = ResourceRef(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", False, "CustomResourceDefinition"
)
CRD_DIR = Path(__file__).resolve().parents[3] / "charts" / "kruntimes" / "crds"
BASE_ONLY_SERVER = Path(__file__).resolve().parents[1] / "base_only_server.py"
GATEWAY = "https://runtime-gateway.kruntimes-system.svc.cluster.local"
HANDLER = (
    "import time\n"
    "def invoke(request):\n"
    "    time.sleep(request.get('sleep', 0))\n"
    "    return {'echo': request}\n"
)


@dataclass
class Env:
    kube: Kube
    pod: dict[str, Any]
    workspace: Path
    port: int


@asynccontextmanager
async def api() -> AsyncIterator[Kube]:
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


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    async with api() as kube:
        pod = await kube.create(
            PODS,
            {
                "metadata": {"name": "runtime-python-x1", "namespace": NS},
                "spec": {"containers": [{"name": "runtime", "image": "kruntimes/python-runtime"}]},
            },
        )
        workspace = tmp_path / "ws"
        port = free_port()
        async with runtime_server("python", workspace, port=port) as (bound, _process):
            yield Env(kube, pod, workspace, bound)


@asynccontextmanager
async def lifecycle(env: Env, **timings: float) -> AsyncIterator[FunctionLifecycle]:
    """A running function lifecycle (its own informer and FunctionRuntime channel)."""
    meta = env.pod["metadata"]
    async with trio.open_nursery() as nursery:
        client = FunctionRuntimeClient("127.0.0.1", env.port)
        await nursery.start(client.run)
        informer = Informer(env.kube, RUNS, namespace=NS)
        life = FunctionLifecycle(
            pod=PodIdentity(name=meta["name"], namespace=NS, uid=meta["uid"]),
            cache=informer,
            writer=KubeStatusWriter(env.kube),
            finalizers=KubeFinalizers(env.kube),
            server=client,
            workspace=Workspace(env.workspace),
            clock=SystemClock(),
            settings=FunctionSettings(
                gateway_url=GATEWAY,
                timings=FunctionTimings(**{"poll_max": 0.5, "drain": 1.0, **timings}),
            ),
        )
        informer.add_handler(life.on_run_event)
        await nursery.start(informer.run)
        await nursery.start(life.run)
        life.adopt(informer.items())
        yield life
        nursery.cancel_scope.cancel()


async def create_bound(env: Env, name: str, **spec: Any) -> str:
    function = {"handler": spec.pop("handler", "main.invoke")}
    if "idle" in spec:
        function["idleTimeoutSeconds"] = spec.pop("idle")
    obj = await env.kube.create(
        RUNS,
        {
            "metadata": {"name": name, "namespace": NS},
            "spec": {
                "runtime": "python",
                "source": {"inline": spec.pop("inline", HANDLER)},
                "mode": {"function": function},
                **spec,
            },
        },
    )
    patch = bind_patch(
        Run.from_dict(obj),
        pod_name=env.pod["metadata"]["name"],
        pod_uid=env.pod["metadata"]["uid"],
        now=datetime.now(UTC),
    )
    obj["status"] = apply_merge_patch(obj.get("status"), patch)
    await env.kube.replace_status(RUNS, obj)
    return str(obj["metadata"]["uid"])


async def wait_phase(kube: Kube, name: str, *phases: str, within: float = 20) -> dict[str, Any]:
    with trio.fail_after(within):
        while True:
            obj = await kube.get(RUNS, name, NS)
            if (obj.get("status") or {}).get("phase") in phases:
                return obj
            await trio.sleep(0.02)


async def invoke(life: FunctionLifecycle, uid: str, request: dict[str, Any]) -> dict[str, Any]:
    entry = life.registry.accepting(uid)
    assert entry is not None
    assert entry.registration_id is not None
    server = life._server  # noqa: SLF001 - the test's own handle on the client
    assert isinstance(server, FunctionRuntimeClient)
    outcome = await server.invoke(uid, entry.registration_id, input=json.dumps(request).encode())
    return dict(json.loads(outcome.output))


async def test_create_ready_invoke_bad_handler_and_restart_adoption(env: Env) -> None:
    async with lifecycle(env) as life:
        uid = await create_bound(env, "hello")
        bad = await create_bound(env, "bad", handler="main.missing")
        obj = await wait_phase(env.kube, "hello", "Ready", "Failed")
        status = obj["status"]
        assert status["phase"] == "Ready", status
        assert status["endpoint"] == {
            "protocol": "HTTPS",
            "url": f"{GATEWAY}/v1/namespaces/{NS}/runtimes/python/functions/{uid}:invoke",
        }
        assert REGISTRATION_CLEANUP_FINALIZER in obj["metadata"]["finalizers"]
        assert (env.workspace / "runs" / uid / "work" / "main.py").read_text() == HANDLER
        assert await invoke(life, uid, {"x": 1}) == {"echo": {"x": 1}}
        first_id = life.registry.accepting(uid).registration_id  # type: ignore[union-attr]
        assert first_id not in json.dumps(obj)

        failed = await wait_phase(env.kube, "bad", "Failed", "Ready")
        assert failed["status"]["reason"] == "RegistrationFailed"
        assert "missing" in failed["status"]["message"]
        assert "AttributeError" in failed["status"]["message"], failed["status"]["message"]
        assert bad
    version = (await env.kube.get(RUNS, "hello", NS))["metadata"]["resourceVersion"]

    # runtimed restart: the Ready Run is re-adopted with the same registration, no write
    async with lifecycle(env) as life2:
        with trio.fail_after(10):
            while life2.registry.accepting(uid) is None:  # noqa: ASYNC110
                await trio.sleep(0.02)
        assert life2.registry.accepting(uid).registration_id == first_id  # type: ignore[union-attr]
        assert await invoke(life2, uid, {"again": True}) == {"echo": {"again": True}}
        await trio.sleep(0.5)
        obj = await env.kube.get(RUNS, "hello", NS)
        assert obj["metadata"]["resourceVersion"] == version
        assert obj["status"]["phase"] == "Ready"


async def test_idle_and_lifetime_timeouts(env: Env) -> None:
    async with lifecycle(env) as life:
        created = trio.current_time()
        idle_uid = await create_bound(env, "idle", idle=2)
        busy_uid = await create_bound(env, "busy", idle=2)
        await create_bound(env, "life", timeout="2s")
        await wait_phase(env.kube, "idle", "Ready")
        await wait_phase(env.kube, "busy", "Ready")
        start = trio.current_time()
        async with trio.open_nursery() as nursery:
            # a 3 s invocation holds "busy" past its 2 s idle timeout
            nursery.start_soon(invoke, life, busy_uid, {"sleep": 3.0})
            idle = await wait_phase(env.kube, "idle", "Timeout", "Failed")
            assert idle["status"]["reason"] == "IdleTimeout"
            # no invocation: it ends after the 2 s idle period (+ at most one 0.5 s poll)
            assert 2.0 <= trio.current_time() - created
            assert trio.current_time() - start <= 3.5
            assert (await env.kube.get(RUNS, "busy", NS))["status"]["phase"] == "Ready"
        busy = await wait_phase(env.kube, "busy", "Timeout", "Failed")
        assert busy["status"]["reason"] == "IdleTimeout"
        assert trio.current_time() - start >= 5.0
        lifetime = await wait_phase(env.kube, "life", "Timeout", "Failed")
        assert lifetime["status"]["reason"] == "LifetimeExceeded"
        assert not (env.workspace / "runs" / idle_uid).exists()
        with trio.fail_after(5):
            while (await env.kube.get(RUNS, "idle", NS))["metadata"].get("finalizers"):  # noqa: ASYNC110
                await trio.sleep(0.05)


async def test_cancel_and_delete_run_the_cleanup_sequence(env: Env) -> None:
    async with lifecycle(env) as life:
        cancel_uid = await create_bound(env, "cancel-me")
        delete_uid = await create_bound(env, "delete-me")
        await wait_phase(env.kube, "cancel-me", "Ready")
        await wait_phase(env.kube, "delete-me", "Ready")
        await env.kube.patch(RUNS, "cancel-me", NS, {"spec": {"cancelRequested": True}})
        cancelled = await wait_phase(env.kube, "cancel-me", "Cancelled", "Failed")
        assert cancelled["status"]["reason"] == "Cancelled"
        assert life.registry.get(cancel_uid) is None
        assert not (env.workspace / "runs" / cancel_uid).exists()

        await env.kube.delete(RUNS, "delete-me", NS)
        with trio.fail_after(15):
            while True:
                try:
                    await env.kube.get(RUNS, "delete-me", NS)
                except NotFound:
                    break
                await trio.sleep(0.05)
        assert life.registry.get(delete_uid) is None
        assert not (env.workspace / "runs" / delete_uid).exists()


async def test_runtime_server_kill_re_registers_with_attempt_2(tmp_path: Path) -> None:
    async with api() as kube:
        pod = await kube.create(
            PODS,
            {
                "metadata": {"name": "runtime-python-x2", "namespace": NS},
                "spec": {"containers": [{"name": "runtime", "image": "kruntimes/python-runtime"}]},
            },
        )
        workspace = tmp_path / "ws"
        port = free_port()
        async with trio.open_nursery() as outer:
            env = Env(kube, pod, workspace, port)
            first_server = trio.CancelScope()
            server_up = trio.Event()

            async def first() -> None:
                with first_server:
                    async with runtime_server("python", workspace, port=port):
                        server_up.set()
                        await trio.sleep_forever()

            outer.start_soon(first)
            await server_up.wait()
            async with lifecycle(env, rpc=1.0) as life:
                uid = await create_bound(
                    env, "survivor", retryPolicy={"maxAttempts": 2, "backoff": "100ms"}
                )
                ready = await wait_phase(kube, "survivor", "Ready")
                assert ready["status"]["attempt"] == 1
                first_id = life.registry.accepting(uid).registration_id  # type: ignore[union-attr]
                first_server.cancel()  # kills the process
                await trio.sleep(0.3)
                async with runtime_server("python", workspace, port=port):
                    with trio.fail_after(20):
                        while True:
                            obj = await kube.get(RUNS, "survivor", NS)
                            status = obj["status"]
                            if status.get("phase") == "Ready" and status.get("attempt") == 2:
                                break
                            await trio.sleep(0.05)
                    assert status["reason"] == "FunctionRegistered" or status.get("reason") in (
                        "RegistrationLost",
                        "FunctionRegistered",
                    )
                    entry = life.registry.accepting(uid)
                    assert entry is not None
                    assert entry.attempt == 2
                    assert entry.registration_id != first_id
                    assert status["endpoint"]["url"].endswith(f"/functions/{uid}:invoke")
                    assert await invoke(life, uid, {"after": "restart"}) == {
                        "echo": {"after": "restart"}
                    }


async def test_runtimed_and_server_killed_together_is_a_visible_registration_loss(
    tmp_path: Path,
) -> None:
    # the Pod's containers restarted: the new runtimed must not silently register the Run
    # afresh under attempt 1 on the new server (it holds nothing); seed 000 recovery instead
    async with api() as kube:
        pod = await kube.create(
            PODS,
            {
                "metadata": {"name": "runtime-python-x3", "namespace": NS},
                "spec": {"containers": [{"name": "runtime", "image": "kruntimes/python-runtime"}]},
            },
        )
        workspace = tmp_path / "ws"
        port = free_port()
        env = Env(kube, pod, workspace, port)
        async with runtime_server("python", workspace, port=port):
            async with lifecycle(env) as life:
                uid = await create_bound(
                    env, "both", retryPolicy={"maxAttempts": 2, "backoff": "100ms"}
                )
                ready = await wait_phase(kube, "both", "Ready")
                assert ready["status"]["attempt"] == 1
                first_id = life.registry.accepting(uid).registration_id  # type: ignore[union-attr]
        # both processes are gone; the workspace (an emptyDir) survives
        async with runtime_server("python", workspace, port=port), lifecycle(env) as life2:
            reasons: set[str] = set()
            with trio.fail_after(20):
                while True:
                    status = (await kube.get(RUNS, "both", NS))["status"]
                    reasons.add(str(status.get("reason")))
                    if status.get("phase") == "Ready" and status.get("attempt") == 2:
                        break
                    await trio.sleep(0.02)
            assert "RegistrationLost" in reasons
            assert life2.stats.adoptions == 0
            entry = life2.registry.accepting(uid)
            assert entry is not None
            assert entry.attempt == 2
            assert entry.registration_id != first_id
            assert await invoke(life2, uid, {"after": "both"}) == {"echo": {"after": "both"}}


@asynccontextmanager
async def base_only_server(work_dir: Path) -> AsyncIterator[int]:
    """The test Runtime Server without FunctionRuntime (tests/runtimed/base_only_server.py)."""
    script = BASE_ONLY_SERVER
    process = await trio.lowlevel.open_process(
        [sys.executable, str(script), "--listen", "127.0.0.1:0", "--work-dir", str(work_dir)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert process.stderr is not None
    try:
        buffer = b""
        with trio.fail_after(20):
            while b"listening" not in buffer:
                chunk = await process.stderr.receive_some(65536)
                assert chunk, buffer
                buffer += chunk
        line = next(x for x in buffer.split(b"\n") if b"listening" in x)
        yield int(json.loads(line)["port"])
    finally:
        process.kill()
        with trio.CancelScope(shield=True):
            await process.wait()


async def test_unimplemented_function_runtime_fails_permanently(tmp_path: Path) -> None:
    async with api() as kube:
        pod = await kube.create(
            PODS,
            {
                "metadata": {"name": "runtime-base-x1", "namespace": NS},
                "spec": {"containers": [{"name": "runtime", "image": "test/base-only-runtime"}]},
            },
        )
        workspace = tmp_path / "ws"
        async with base_only_server(workspace) as port:
            env = Env(kube, pod, workspace, port)
            async with lifecycle(env):
                await create_bound(env, "no-fn", retryPolicy={"maxAttempts": 3})
                failed = await wait_phase(kube, "no-fn", "Failed", "Ready")
                status = failed["status"]
                assert status["reason"] == "FunctionUnimplemented"
                assert status["attempt"] == 1
                assert "permanent" in status["message"]
