"""Control-plane test harness on localkube, shared by the tests and ``bench/schedule.py``.

These tests use a stand-in for runtimed (issue 5 allows one): :class:`HeartbeatDouble` plays the
part runtimed has in the control plane's eyes. For every Runtime Pod that is running it
renews the Pod's heartbeat Lease (:func:`krt.kube.heartbeat.run_heartbeat`, the helper
runtimed will use) and sets the ``kruntimes.io/RuntimedReady`` Pod condition (the readiness
gate). :meth:`HeartbeatDouble.stop` ends one Pod's heartbeat, as a dead runtimed would.

Runtime Pods here run :data:`SLEEPER_IMAGE` for both containers (the Runtime Server and the
injected sidecar via ``daemonImage``): a process that only sleeps; as the sidecar it also
answers the readiness probe on the Pod's own address (``$POD_IP``, unique per Pod), so Pods
never fail on a port another test process holds. :func:`write_image_table` declares it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio
import yaml

from krt.api.constants import RUNTIME_LABEL, RUNTIMED_READY_POD_CONDITION
from krt.controlplane.app import ControlPlane, ControlPlaneConfig, serve_controlplane
from krt.kube.client import Kube
from krt.kube.clock import SystemClock, format_time
from krt.kube.errors import NotFound
from krt.kube.heartbeat import run_heartbeat
from krt.kube.informer import EventType, Informer, InformerEvent
from krt.kube.resources import PODS, RUNS, RUNTIMES, ResourceRef
from krt.kube.status import patch_pod_condition

NS = "demo"
#: A test image that sleeps until SIGTERM (declared by :func:`write_image_table`).
SLEEPER_IMAGE = "krt-test/sleeper"


#: The sleeper's program. As the injected runtimed (``RUNTIMED_HTTP_PORT`` is set) it also
#: answers the readiness probe on ``$POD_IP:$RUNTIMED_HTTP_PORT/healthz``.
_SLEEPER = """
import http.server, os, signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
port = os.environ.get("RUNTIMED_HTTP_PORT")
if not port:
    while True:
        time.sleep(3600)
class Healthz(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/healthz" else 404)
        self.end_headers()
    def log_message(self, *args):
        pass
http.server.HTTPServer((os.environ["POD_IP"], int(port)), Healthz).serve_forever()
"""


def write_image_table(directory: Path) -> Path:
    """Write a localkube image table adding :data:`SLEEPER_IMAGE`; return its path."""
    path = directory / "images.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "images": {
                    SLEEPER_IMAGE: {
                        "entrypoint": ["{python}", "-c", _SLEEPER],
                        "description": "sleeps until SIGTERM; as the runtimed stand-in it "
                        "also answers GET /healthz (control-plane tests)",
                    }
                }
            }
        )
    )
    return path


CRDS = ResourceRef(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", False, "CustomResourceDefinition"
)
CRD_DIR = Path(__file__).resolve().parents[2] / "charts" / "kruntimes" / "crds"


async def install_crds(kube: Kube) -> None:
    """Install the chart's CRDs and wait until Runs and Runtimes are served."""
    for path in sorted(CRD_DIR.glob("*.yaml")):
        await kube.create(CRDS, yaml.safe_load(path.read_text()))
    with trio.fail_after(10):
        while True:
            try:
                await kube.list(RUNS, NS)
                await kube.list(RUNTIMES, NS)
                return
            except NotFound:
                await trio.sleep(0.05)


def runtime_manifest(
    name: str = "python", *, replicas: int = 2, runs: int = 4, namespace: str = NS
) -> dict[str, Any]:
    """A Runtime whose Pods run :data:`SLEEPER_IMAGE` for both containers."""
    return {
        "apiVersion": "kruntimes.io/v1alpha1",
        "kind": "Runtime",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "capacity": {"resources": {"runs": runs}},
            "daemonImage": SLEEPER_IMAGE,
            "template": {"spec": {"containers": [{"name": "runtime", "image": SLEEPER_IMAGE}]}},
        },
    }


def run_manifest(
    name: str,
    *,
    runtime: str = "python",
    max_attempts: int | None = None,
    namespace: str = NS,
    function: bool = False,
) -> dict[str, Any]:
    """A task (or function) Run."""
    spec: dict[str, Any] = {
        "runtime": runtime,
        "source": {"inline": "print('hi')\n", "inlinePath": "main.py"},
        "mode": {"function": {"handler": "main.invoke"}}
        if function
        else {"task": {"entrypoint": "main.py"}},
    }
    if max_attempts is not None:
        spec["retryPolicy"] = {"maxAttempts": max_attempts, "backoff": "0s"}
    return {
        "apiVersion": "kruntimes.io/v1alpha1",
        "kind": "Run",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


class HeartbeatDouble:
    """Stands in for runtimed's heartbeat and readiness gate on every running Runtime Pod."""

    def __init__(self, kube: Kube, namespace: str = NS) -> None:
        self._kube = kube
        self._namespace = namespace
        self._scopes: dict[str, trio.CancelScope] = {}
        self._stopped: set[str] = set()
        self._nursery: trio.Nursery | None = None
        self.informer = Informer(kube, PODS, namespace=namespace, label_selector=RUNTIME_LABEL)
        self.informer.add_handler(self._on_pod)

    def _on_pod(self, event: InformerEvent) -> None:
        meta = event.obj.get("metadata") or {}
        uid = str(meta.get("uid", ""))
        if event.type is EventType.DELETED or meta.get("deletionTimestamp"):
            scope = self._scopes.pop(uid, None)
            if scope is not None:
                scope.cancel()
            return
        running = any(
            "running" in (status.get("state") or {})
            for status in (event.obj.get("status") or {}).get("containerStatuses") or []
        )
        if running and uid not in self._scopes and uid not in self._stopped:
            assert self._nursery is not None
            scope = trio.CancelScope()
            self._scopes[uid] = scope
            self._nursery.start_soon(self._beat, str(meta["name"]), uid, scope)

    async def _beat(self, pod_name: str, uid: str, scope: trio.CancelScope) -> None:
        with scope:
            await self._set_gate(pod_name)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._nudge_readiness, pod_name)
                await run_heartbeat(
                    self._kube,
                    namespace=self._namespace,
                    pod_name=pod_name,
                    pod_uid=uid,
                    clock=SystemClock(),
                    period=5.0,
                )

    async def _set_gate(self, pod_name: str) -> None:
        await patch_pod_condition(
            self._kube,
            self._namespace,
            pod_name,
            {
                "type": RUNTIMED_READY_POD_CONDITION,
                "status": "True",
                "reason": "Healthy",
                "lastProbeTime": format_time(SystemClock().now()),
            },
        )

    async def _nudge_readiness(self, pod_name: str) -> None:
        """Re-assert the gate while the node shows the Pod not Ready despite it.

        Works around a localkube node race (reported): the kubelet can keep a stale copy of
        the Pod from its own status write and miss the gate condition set meanwhile, leaving
        ``Ready=False`` with ``ReadinessGatesNotReady`` until the Pod changes again. A new
        ``lastProbeTime`` is such a change.
        """
        while True:
            await trio.sleep(1.0)
            pod = self.informer.get(self._namespace, pod_name)
            conditions = {
                c.get("type"): c.get("status")
                for c in ((pod or {}).get("status") or {}).get("conditions") or []
            }
            if (
                conditions.get("ContainersReady") == "True"
                and conditions.get(RUNTIMED_READY_POD_CONDITION) == "True"
                and conditions.get("Ready") != "True"
            ):
                await self._set_gate(pod_name)

    def stop(self, pod_uid: str) -> None:
        """Stop one Pod's heartbeat for good (its runtimed died)."""
        self._stopped.add(pod_uid)
        scope = self._scopes.pop(pod_uid, None)
        if scope is not None:
            scope.cancel()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Beat for every Runtime Pod until cancelled."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            await nursery.start(self.informer.run)
            task_status.started()


@asynccontextmanager
async def running_controlplane(kube: Kube, **overrides: Any) -> AsyncIterator[ControlPlane]:
    """A control plane on ``kube`` (no leader election unless asked), stopped on exit."""
    settings: dict[str, Any] = {"leader_elect": False, "namespaces": (NS,)}
    settings.update(overrides)
    async with trio.open_nursery() as nursery:
        plane: ControlPlane = await nursery.start(
            serve_controlplane, kube, ControlPlaneConfig(**settings)
        )
        yield plane
        nursery.cancel_scope.cancel()


async def wait_for(predicate: Any, *, seconds: float = 20.0, period: float = 0.05) -> None:
    """Poll ``predicate()`` (sync or async) until true, failing after ``seconds`` (real time)."""
    with trio.fail_after(seconds):
        while True:
            result = predicate()
            if hasattr(result, "__await__"):
                result = await result
            if result:
                return
            await trio.sleep(period)


async def create_runtime(kube: Kube, **kwargs: Any) -> dict[str, Any]:
    """Create a Runtime from :func:`runtime_manifest`."""
    return await kube.create(RUNTIMES, runtime_manifest(**kwargs))
