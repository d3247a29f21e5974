"""runtimed's Run watches on a real API server (localkube, in memory) with the real Bash server.

Issue 6: the task lifecycle watches only the Runs assigned to its Pod and the function
lifecycle/ownership cache only the function Runs (the Run CRD's selectable fields), so a
runtimed no longer receives every write of every other Pod's task Runs. These tests pin what
must not change with it: a Run that leaves the filtered watch (reassigned) is let go of, not
written; the function Runs of other Pods still reach the ownership cache's informer; a
cluster whose API server cannot filter gets the single namespace-wide watch.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import trio
import yaml
from runtimed_servers import runtime_server

from krt.api import Run, bind_patch
from krt.api.patches import apply_merge_patch
from krt.kube.backoff import Backoff
from krt.kube.client import Kube, connect
from krt.kube.errors import BadRequest, NotFound, ServerError
from krt.kube.resources import NAMESPACES, PODS, RUNS, ResourceRef
from localkube.apiserver import ApiServerConfig, running_apiserver
from runtimed.daemon import DaemonConfig, DaemonHandle, serve_daemon
from runtimed.identity import PodIdentity
from runtimed.run_informers import (
    FUNCTION_RUNS_SELECTOR,
    assigned_runs_selector,
    field_selectors_supported,
)
from runtimed.sources import Workspace
from runtimed.task_decisions import ExecState
from runtimed.tasks import TaskTimings

NS = "rt"
OTHER_POD_UID = "0b1e6a52-0000-4000-8000-000000000002"
CRDS = ResourceRef(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", False, "CustomResourceDefinition"
)
CRD_DIR = Path(__file__).resolve().parents[2] / "charts" / "kruntimes" / "crds"


def without_selectable_fields(crd: dict[str, Any]) -> dict[str, Any]:
    """The CRD as a cluster older than Kubernetes 1.32 (or an old chart) would serve it."""
    for version in crd["spec"]["versions"]:
        version.pop("selectableFields", None)
    return crd


@asynccontextmanager
async def cluster(
    edit: Callable[[dict[str, Any]], dict[str, Any]] = lambda crd: crd,
) -> AsyncIterator[Kube]:
    async with running_apiserver(ApiServerConfig(bookmark_interval=1.0)) as handle:
        client = await connect(kubeconfig=handle.kubeconfig_path)
        async with client:
            await client.create(NAMESPACES, {"metadata": {"name": NS}})
            for path in sorted(CRD_DIR.glob("*.yaml")):
                await client.create(CRDS, edit(yaml.safe_load(path.read_text())))
            with trio.fail_after(10):
                while True:
                    try:
                        await client.list(RUNS, NS)
                        break
                    except NotFound:
                        await trio.sleep(0.05)
            yield client


@asynccontextmanager
async def daemon(kube: Kube, tmp_path: Path) -> AsyncIterator[tuple[DaemonHandle, dict[str, Any]]]:
    pod = await kube.create(
        PODS,
        {
            "metadata": {"name": "runtime-bash-x1", "namespace": NS},
            "spec": {"containers": [{"name": "runtime", "image": "kruntimes/bash-runtime"}]},
        },
    )
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
        yield handle, pod
        nursery.cancel_scope.cancel()


async def bind(kube: Kube, name: str, spec: dict[str, Any], *, pod_name: str, pod_uid: str) -> Any:
    obj = await kube.create(
        RUNS, {"metadata": {"name": name, "namespace": NS}, "spec": {"runtime": "bash", **spec}}
    )
    patch = bind_patch(
        Run.from_dict(obj), pod_name=pod_name, pod_uid=pod_uid, now=datetime.now(UTC)
    )
    obj["status"] = apply_merge_patch(obj.get("status"), patch)
    return await kube.replace_status(RUNS, obj)


async def wait_until(predicate: Callable[[], Any], within: float = 20) -> None:
    with trio.fail_after(within):
        while not predicate():  # noqa: ASYNC110
            await trio.sleep(0.05)


async def wait_phase(kube: Kube, name: str, *phases: str) -> dict[str, Any]:
    with trio.fail_after(20):
        while True:
            obj = await kube.get(RUNS, name, NS)
            if (obj.get("status") or {}).get("phase") in phases:
                return obj
            await trio.sleep(0.05)


TASK = {"source": {"inline": "exit 0\n"}, "mode": {"task": {}}}
FUNCTION = {
    "source": {"inline": "def handle(x):\n    return x\n"},
    "mode": {"function": {"handler": "main.handle"}},
}


async def test_the_task_watch_holds_only_this_pods_runs(tmp_path: Path) -> None:
    async with cluster() as kube, daemon(kube, tmp_path) as (handle, pod):
        assert handle.assigned is not None
        assert handle.assigned is not handle.informer
        mine = await bind(
            kube, "mine", TASK, pod_name=pod["metadata"]["name"], pod_uid=pod["metadata"]["uid"]
        )
        await bind(kube, "theirs", TASK, pod_name="other", pod_uid=OTHER_POD_UID)
        fn = await bind(kube, "their-fn", FUNCTION, pod_name="other", pod_uid=OTHER_POD_UID)
        assert (await wait_phase(kube, "mine", "Succeeded", "Failed"))["status"]["phase"] == (
            "Succeeded"
        )
        # the function Run of another Pod still reaches the function Runs' informer (the
        # ownership cache's source); no task Run does, and no other Pod's Run reaches the
        # task lifecycle's cache
        await wait_until(lambda: handle.informer.get(NS, "their-fn") is not None)
        assert handle.informer.by_uid(fn["metadata"]["uid"]) is not None
        assert handle.informer.get(NS, "mine") is None
        assert handle.informer.get(NS, "theirs") is None
        assert handle.assigned.get(NS, "theirs") is None
        assert handle.assigned.get(NS, "their-fn") is None
        assert handle.assigned.by_uid(mine["metadata"]["uid"]) is not None
        theirs = await kube.get(RUNS, "theirs", NS)
        assert theirs["status"]["phase"] == "Scheduled"  # never claimed here


async def test_a_run_reassigned_away_is_let_go_of_not_written(tmp_path: Path) -> None:
    """Leaving the filtered watch arrives as DELETED: the lifecycle cancels and forgets its
    execution and drops its local state, exactly as for a Run that is no longer ours; the
    Run itself is not written (its status stays the reassignment's)."""
    async with cluster() as kube, daemon(kube, tmp_path) as (handle, pod):
        obj = await bind(
            kube,
            "moved",
            {"source": {"inline": "sleep 30\n"}, "mode": {"task": {}}},
            pod_name=pod["metadata"]["name"],
            pod_uid=pod["metadata"]["uid"],
        )
        uid = obj["metadata"]["uid"]

        def observed() -> bool:
            local = handle.lifecycle.local(uid)
            return local is not None and (
                local.view.observed or local.view.start.value == "Succeeded"
            )

        await wait_until(observed)
        assert (await handle.server.status(uid)).state.active
        running = await kube.get(RUNS, "moved", NS)
        running["status"] = {
            **running["status"],
            "phase": "Scheduled",
            "assignedPod": "other",
            "assignedPodUID": OTHER_POD_UID,
        }
        moved = await kube.replace_status(RUNS, running)
        await wait_until(lambda: handle.lifecycle.local(uid) is None)
        assert handle.assigned is not None
        assert handle.assigned.get(NS, "moved") is None
        with trio.fail_after(10):
            while (await handle.server.status(uid)).state is not ExecState.NOT_FOUND:  # noqa: ASYNC110
                await trio.sleep(0.05)
        await trio.sleep(0.3)
        after = await kube.get(RUNS, "moved", NS)
        assert after["metadata"]["resourceVersion"] == moved["metadata"]["resourceVersion"]
        assert after["status"]["assignedPodUID"] == OTHER_POD_UID


async def test_without_selectable_fields_one_namespace_watch_serves_both(tmp_path: Path) -> None:
    async with cluster(without_selectable_fields) as kube, daemon(kube, tmp_path) as (handle, pod):
        assert handle.assigned is handle.informer
        await bind(
            kube, "ok", TASK, pod_name=pod["metadata"]["name"], pod_uid=pod["metadata"]["uid"]
        )
        await bind(kube, "theirs", TASK, pod_name="other", pod_uid=OTHER_POD_UID)
        assert (await wait_phase(kube, "ok", "Succeeded", "Failed"))["status"]["phase"] == (
            "Succeeded"
        )
        await wait_until(lambda: handle.informer.get(NS, "theirs") is not None)
        assert (await kube.get(RUNS, "theirs", NS))["status"]["phase"] == "Scheduled"


class ProbeKube:
    """A client whose LIST fails with the given errors first, then answers."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.selectors: list[str] = []

    async def list(
        self,
        ref: ResourceRef,
        namespace: str | None = None,
        label_selector: str = "",
        field_selector: str = "",
        **_: Any,
    ) -> tuple[list[Any], str]:
        self.selectors.append(field_selector)
        if self.errors:
            raise self.errors.pop(0)
        return [], "1"


async def test_the_probe_retries_transient_errors_and_reads_400_as_unsupported(
    autojump_clock: trio.testing.MockClock,
) -> None:
    kube: Any = ProbeKube(ServerError(503, "ServiceUnavailable", "starting"))
    assert await field_selectors_supported(
        kube, NS, "pod-uid", backoff=Backoff(base=0.1, maximum=0.1)
    )
    assert kube.selectors == [f"{assigned_runs_selector('pod-uid')},{FUNCTION_RUNS_SELECTOR}"] * 2
    unsupported: Any = ProbeKube(
        BadRequest(400, "BadRequest", "field label not supported: status.assignedPodUID")
    )
    assert not await field_selectors_supported(unsupported, NS, "pod-uid")
    assert len(unsupported.selectors) == 1


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        (assigned_runs_selector("abc"), "status.assignedPodUID=abc"),
        (FUNCTION_RUNS_SELECTOR, "spec.mode.function.handler!="),
    ],
)
def test_selectors_name_the_crds_selectable_fields(selector: str, expected: str) -> None:
    assert selector == expected
    crd = yaml.safe_load((CRD_DIR / "runs.kruntimes.io.yaml").read_text())
    fields = {f["jsonPath"].lstrip(".") for f in crd["spec"]["versions"][0]["selectableFields"]}
    assert selector.split("=")[0].rstrip("!") in fields
