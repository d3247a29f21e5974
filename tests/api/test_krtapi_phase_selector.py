"""``status.phase`` is a selectable field of the Run CRD, served by localkube.

As on Pods (``kubectl get pods --field-selector status.phase=Failed``), a client can list
and watch Runs by phase; ``TERMINAL_RUNS_SELECTOR`` matches terminal Runs only, so a watch
with it (bench/task_runs.py) gets one event per Run, when it ends, instead of one per write.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
import yaml

from krt.api.phases import TERMINAL_PHASES, TERMINAL_RUNS_SELECTOR, Phase
from krt.kube.client import Kube, connect
from krt.kube.resources import NAMESPACES, RUNS
from tests.controlplane.harness import CRD_DIR, install_crds

apiserver = pytest.importorskip("localkube.apiserver", reason="localkube is not importable")

NS = "phases"


def test_the_selector_excludes_every_non_terminal_phase_and_no_status() -> None:
    excluded = {part.removeprefix("status.phase!=") for part in TERMINAL_RUNS_SELECTOR.split(",")}
    assert excluded == {""} | {p.value for p in Phase if p not in TERMINAL_PHASES}
    crd = yaml.safe_load((CRD_DIR / "runs.kruntimes.io.yaml").read_text())
    selectable = {f["jsonPath"] for f in crd["spec"]["versions"][0]["selectableFields"]}
    assert ".status.phase" in selectable


@contextlib.asynccontextmanager
async def cluster() -> AsyncIterator[Kube]:
    async with apiserver.running_apiserver(apiserver.ApiServerConfig()) as handle:
        client = await connect(kubeconfig=handle.kubeconfig_path)
        async with client:
            await client.create(NAMESPACES, {"metadata": {"name": NS}})
            await install_crds(client)
            yield client


def _run(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "kruntimes.io/v1alpha1",
        "kind": "Run",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"runtime": "bash", "source": {"inline": "exit 0\n"}, "mode": {"task": {}}},
    }


async def _set_phase(kube: Kube, obj: dict[str, Any], phase: str) -> dict[str, Any]:
    return await kube.replace_status(
        RUNS, {**obj, "status": {**obj.get("status", {}), "phase": phase}}
    )


async def test_runs_are_listed_and_watched_by_phase() -> None:
    async with cluster() as kube:
        fresh = await kube.create(RUNS, _run("fresh"))
        running = await _set_phase(kube, await kube.create(RUNS, _run("running")), "Running")
        failed = await _set_phase(kube, await kube.create(RUNS, _run("failed")), "Failed")

        items, _ = await kube.list(RUNS, NS, field_selector="status.phase=Failed")
        assert [r["metadata"]["name"] for r in items] == ["failed"]
        items, version = await kube.list(RUNS, NS, field_selector=TERMINAL_RUNS_SELECTOR)
        assert [r["metadata"]["name"] for r in items] == ["failed"]

        seen: list[tuple[str, str, str]] = []
        with trio.fail_after(10):
            async with contextlib.aclosing(
                kube.watch(RUNS, NS, version, field_selector=TERMINAL_RUNS_SELECTOR)
            ) as events:
                scheduled = await _set_phase(kube, fresh, "Scheduled")
                await _set_phase(kube, scheduled, "Running")
                await _set_phase(kube, running, "Succeeded")
                await kube.delete(RUNS, "failed", NS)
                async for kind, obj in events:
                    if kind == "BOOKMARK":
                        continue
                    seen.append((kind, obj["metadata"]["name"], obj["status"]["phase"]))
                    if len(seen) == 2:
                        break
        # "fresh" never ended: none of its writes reached the watch
        assert seen == [("ADDED", "running", "Succeeded"), ("DELETED", "failed", "Failed")]
        assert failed["status"]["phase"] == "Failed"
