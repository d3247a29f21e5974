"""Fixtures for the ``krt`` CLI tests.

* ``kube``: a localkube API server (in memory, this test's trio loop) with the kruntimes CRDs
  installed, and a :class:`krt.kube.client.Kube` on it as the admin.
* ``cli``: ``await cli("get", "x", input=None)`` runs ``krt`` through click's CliRunner in a
  worker thread (the command does its own ``trio.run`` there) against that API server, and
  returns the click ``Result`` (``exit_code``, ``stdout``, ``stderr``).

The control plane is not running: tests play it by patching Run status themselves.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from click.testing import CliRunner, Result

from krt.api.crds import run_crd, runtime_crd
from krt.cli.main import krt
from krt.kube.client import Kube, connect
from krt.kube.errors import NotFound
from krt.kube.resources import RUNS, RUNTIMES, ResourceRef
from localkube.apiserver import ApiServerConfig, ApiServerHandle, running_apiserver

CRDS = ResourceRef(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", False, "CustomResourceDefinition"
)
NS = "default"

CliRun = Callable[..., Awaitable[Result]]


@pytest.fixture
async def apiserver() -> AsyncIterator[ApiServerHandle]:
    """A fresh in-memory API server."""
    async with running_apiserver(ApiServerConfig(bookmark_interval=0.5)) as handle:
        yield handle


@pytest.fixture
async def kube(apiserver: ApiServerHandle) -> AsyncIterator[Kube]:
    """An admin client with the Run and Runtime CRDs served."""
    client = await connect(kubeconfig=apiserver.kubeconfig_path)
    async with client:
        await serve_krt_crds(client, runtimes=("python", "bash"))
        yield client


async def serve_krt_crds(client: Kube, *, runtimes: tuple[str, ...]) -> None:
    """Create the Run and Runtime CRDs, wait until both are served, create ``runtimes``."""
    for crd in (run_crd(), runtime_crd()):
        await client.create(CRDS, crd)
    with trio.fail_after(10):
        while True:
            try:
                await client.list(RUNS, NS)
                await client.list(RUNTIMES, NS)
                break
            except NotFound:
                await trio.sleep(0.05)
    for runtime in runtimes:
        await client.create(RUNTIMES, runtime_manifest(runtime))


@asynccontextmanager
async def durable_cluster(
    state_dir: Path, runtime: str
) -> AsyncIterator[tuple[ApiServerHandle, Kube]]:
    """An API server whose state lives in ``state_dir`` (restartable), CRDs and one Runtime."""
    async with running_apiserver(ApiServerConfig(state_dir=state_dir)) as handle:
        async with await connect(kubeconfig=handle.kubeconfig_path) as client:
            await serve_krt_crds(client, runtimes=(runtime,))
            yield handle, client


def invoke_cli(args: list[str], *, env: dict[str, str], input: bytes | str | None = None) -> Result:
    """Run ``krt args`` with CliRunner (blocking; call it in a thread)."""
    runner = CliRunner()
    return runner.invoke(krt, args, env=env, input=input, catch_exceptions=False)


@pytest.fixture
def cli(apiserver: ApiServerHandle, kube: Kube) -> CliRun:
    """``await cli(*args, input=..., env=...)``: ``krt`` against the test API server."""

    async def run(
        *args: str, input: bytes | str | None = None, env: dict[str, str] | None = None
    ) -> Result:
        environment = {"KRT_KUBECONFIG": str(apiserver.kubeconfig_path), "KUBECONFIG": ""}
        environment.update(env or {})
        with trio.fail_after(30):
            return await trio.to_thread.run_sync(
                lambda: invoke_cli(list(args), env=environment, input=input)
            )

    return run


def runtime_manifest(name: str) -> dict[str, Any]:
    """A Runtime (nothing runs it here: there is no control plane)."""
    return {
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": 2,
            "capacity": {"resources": {"runs": 3}},
            "template": {
                "spec": {"containers": [{"name": "runtime", "image": f"kruntimes/{name}-runtime"}]}
            },
        },
    }


def task_manifest(name: str, **spec: Any) -> dict[str, Any]:
    """A minimal task Run in ``NS``."""
    return {
        "metadata": {"name": name, "namespace": NS},
        "spec": {"runtime": "python", "mode": {"task": {"args": ["-c", "print(1)"]}}, **spec},
    }


async def set_status(kube: Kube, name: str, status: dict[str, Any]) -> dict[str, Any]:
    """Patch a Run's status (playing the control plane / runtimed)."""
    return await kube.patch(RUNS, name, NS, {"status": status}, subresource="status")


async def eventually(check: Callable[[], Awaitable[bool]], *, seconds: float = 10.0) -> None:
    """Poll ``check`` (an API read) every 20 ms until it is true; fail after ``seconds``."""
    with trio.fail_after(seconds):
        while not await check():  # noqa: ASYNC110 - polls the API server, no event to wait on
            await trio.sleep(0.02)


def kubeconfig_path(apiserver: ApiServerHandle) -> Path:
    """The admin kubeconfig."""
    return Path(apiserver.kubeconfig_path)
