"""A localkube cluster with the control plane and Runtime Pods running real runtimed and real
Runtime Servers (for the runtimed acceptance tests and ``bench/task_runs.py``).

The Runtime template runs ``kruntimes/bash-runtime`` or ``kruntimes/python-runtime`` listening
on the Pod IP, with ``--work-dir`` the shared workspace as the node lays it out
(``$(KRT_POD_ROOT)/workspace``); the control plane injects the runtimed sidecar (image
``kruntimes/runtimed``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio
import yaml

from krt.controlplane.app import ControlPlaneConfig, serve_controlplane
from krt.kube.client import Kube, connect
from krt.kube.errors import NotFound
from krt.kube.resources import NAMESPACES, PODS, RUNS, RUNTIMES, ResourceRef
from localkube.cluster import ClusterConfig, serve_cluster

NS = "demo"
CRDS = ResourceRef(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", False, "CustomResourceDefinition"
)
CRD_DIR = Path(__file__).resolve().parents[2] / "charts" / "kruntimes" / "crds"
IMAGES = {"bash": "kruntimes/bash-runtime", "python": "kruntimes/python-runtime"}


@dataclass
class Cluster:
    kube: Kube
    state_dir: Path

    def pod_roots(self) -> list[Path]:
        return sorted((self.state_dir / "node" / "pods").glob(f"{NS}_*"))

    def pod_root(self, pod: dict[str, Any]) -> Path:
        """The node's directory of ``pod`` (a Pod object)."""
        uid = pod["metadata"]["uid"]
        (root,) = [r for r in self.pod_roots() if r.name.endswith(uid)]
        return root


def runtime_manifest(
    name: str, *, kind: str, replicas: int = 1, runs: int = 8, image: str | None = None
) -> dict[str, Any]:
    """A Runtime whose Runtime Server is the built-in ``kind`` server (bash or python)."""
    return {
        "apiVersion": "kruntimes.io/v1alpha1",
        "kind": "Runtime",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": replicas,
            "capacity": {"resources": {"runs": runs}},
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "runtime",
                            "image": image or IMAGES[kind],
                            "env": [
                                {
                                    "name": "POD_IP",
                                    "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}},
                                }
                            ],
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


def task_run(name: str, runtime: str, script: str, **spec: Any) -> dict[str, Any]:
    """An inline task Run."""
    return {
        "apiVersion": "kruntimes.io/v1alpha1",
        "kind": "Run",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"runtime": runtime, "source": {"inline": script}, "mode": {"task": {}}, **spec},
    }


async def ready_pods(kube: Kube, runtime: str) -> list[dict[str, Any]]:
    pods, _ = await kube.list(PODS, NS, label_selector=f"kruntimes.io/runtime={runtime}")
    return [
        p
        for p in pods
        if not p["metadata"].get("deletionTimestamp")
        and any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (p.get("status") or {}).get("conditions") or []
        )
    ]


async def wait_runtime_ready(
    kube: Kube, runtime: str, replicas: int, *, within: float = 60
) -> list[dict[str, Any]]:
    with trio.fail_after(within):
        while len(pods := await ready_pods(kube, runtime)) < replicas:  # noqa: ASYNC110 - polling the API
            await trio.sleep(0.1)
    return pods


async def wait_phase(kube: Kube, name: str, *phases: str, within: float = 60) -> dict[str, Any]:
    with trio.fail_after(within):
        while True:
            obj = await kube.get(RUNS, name, NS)
            if (obj.get("status") or {}).get("phase") in phases:
                return obj
            await trio.sleep(0.05)


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def container_pid(pod_root: Path, container: str) -> int:
    """The pid of a running container's process (the node's pid file)."""
    return int(json.loads((pod_root / "run" / f"{container}.pid").read_text())["pid"])


@asynccontextmanager
async def running_cluster(
    state_dir: Path,
    *,
    images: dict[str, Any] | None = None,
    controlplane_process: bool = False,
) -> AsyncIterator[Cluster]:
    """localkube + CRDs + namespace + the control plane (no leader election).

    Args:
        state_dir: the cluster's state directory.
        images: an images overlay (``{name: {"entrypoint": [...]}}``) for test images.
        controlplane_process: run the control plane as its own ``krt-controlplane``
            process (as in production) instead of inside this process.
    """
    images_file = None
    if images:
        state_dir.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240
        images_file = state_dir.parent / "images.yaml"
        images_file.write_text(yaml.safe_dump({"images": images}))
    async with trio.open_nursery() as nursery:
        handle = await nursery.start(
            serve_cluster,
            ClusterConfig(
                state_dir=state_dir,
                images_file=images_file,
                backoff_initial=0.2,
                shutdown_grace=1.0,
            ),
        )
        kube = await connect(kubeconfig=Path(handle.apiserver.kubeconfig_path))
        async with kube:
            await kube.create(NAMESPACES, {"metadata": {"name": NS}})
            for path in sorted(CRD_DIR.glob("*.yaml")):
                await kube.create(CRDS, yaml.safe_load(path.read_text()))
            with trio.fail_after(10):
                while True:
                    try:
                        await kube.list(RUNS, NS)
                        await kube.list(RUNTIMES, NS)
                        break
                    except NotFound:
                        await trio.sleep(0.05)
            if controlplane_process:
                process = await trio.lowlevel.open_process(
                    [
                        str(Path(sys.executable).parent / "krt-controlplane"),
                        "--kubeconfig",
                        str(handle.apiserver.kubeconfig_path),
                        "--namespace",
                        NS,
                        "--no-leader-elect",
                        "--metrics-addr",
                        "0",
                        "--log-level",
                        "warning",
                    ],
                    stdin=subprocess.DEVNULL,
                )
            else:
                process = None
                await nursery.start(
                    serve_controlplane,
                    kube,
                    ControlPlaneConfig(namespaces=[NS], leader_elect=False),
                )
            try:
                yield Cluster(kube=kube, state_dir=state_dir)
            finally:
                if process is not None:
                    process.terminate()
                    with trio.CancelScope(shield=True):
                        await process.wait()
            nursery.cancel_scope.cancel()
