"""``krt dev up`` on a resumed cluster says per object what it did and keeps Runtime edits."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio

from krt.cli.dev_apply import apply, load_manifests, object_name
from krt.cli.dev_install import KEPT_NOTE, ReadinessTracker, install
from krt.kube.client import Kube, connect
from krt.kube.errors import NotFound
from krt.kube.resources import DEPLOYMENTS, RUNTIMES, SERVICES
from localkube.apiserver import ApiServerHandle

APPLIED = "kruntimes applied ("


@pytest.fixture
async def bare(apiserver: ApiServerHandle) -> AsyncIterator[Kube]:
    """An admin client of a fresh API server: no CRDs, no Runtimes."""
    async with await connect(kubeconfig=apiserver.kubeconfig_path) as client:
        yield client


async def allocate_gateway_cluster_ip(kube: Kube) -> None:
    """Play localkube's Service IP allocator (not running here) for the gateway Service."""
    while True:
        try:
            svc = await kube.get(SERVICES, "runtime-gateway", "kruntimes-system")
        except NotFound:
            await trio.sleep(0.02)
            continue
        if not svc["spec"].get("clusterIP"):
            svc["spec"]["clusterIP"] = "127.0.200.10"
            await kube.replace(SERVICES, svc)
        return


async def install_until_applied(kube: Kube, state_dir: Path) -> list[str]:
    """Run the install until every object is applied (no control plane runs here, so it
    would wait for readiness forever); return its progress lines."""
    lines: list[str] = []
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(allocate_gateway_cluster_ip, kube)

            def progress(line: str) -> None:
                lines.append(line)
                if line.startswith(APPLIED):
                    nursery.cancel_scope.cancel()

            await install(
                kube,
                state_dir=state_dir,
                tracker=ReadinessTracker(pods_dir=None),
                progress=progress,
            )
    return lines


def results(lines: list[str]) -> dict[str, str]:
    """``object name -> what was done`` from the per-object progress lines."""
    out = {}
    for line in lines:
        name, _, rest = line.partition(" ")
        if "/" in name and not line.startswith(APPLIED):
            out[name] = rest
    return out


def test_objects_are_named_as_kubectl_names_them() -> None:
    names = {object_name(doc) for doc in load_manifests("kruntimes")}
    assert "deployment.apps/krt-kruntimes-gateway" in names
    assert "service/runtime-gateway" in names
    assert "serviceaccount/krt-kruntimes-controlplane" in names
    assert any(n.startswith("clusterrole.rbac.authorization.k8s.io/") for n in names)
    assert {object_name(doc) for doc in load_manifests("runtimes")} == {
        "runtime.kruntimes.io/python",
        "runtime.kruntimes.io/bash",
    }
    assert {object_name(doc) for doc in load_manifests("crds")} == {
        "customresourcedefinition.apiextensions.k8s.io/runs.kruntimes.io",
        "customresourcedefinition.apiextensions.k8s.io/runtimes.kruntimes.io",
    }


def runtime_doc(name: str = "bash") -> dict[str, Any]:
    return next(d for d in load_manifests("runtimes") if d["metadata"]["name"] == name)


async def test_apply_without_overwrite_creates_then_keeps_an_edited_object(kube: Kube) -> None:
    await kube.delete(RUNTIMES, "bash", "default")  # the fixture's own Runtime
    with trio.fail_after(10):
        while True:
            try:
                await kube.get(RUNTIMES, "bash", "default")
                await trio.sleep(0.02)
            except NotFound:
                break
    doc = runtime_doc()
    assert await apply(kube, doc, overwrite=False) == "created"
    assert await apply(kube, doc, overwrite=False) == "unchanged"
    edited = await kube.patch(
        RUNTIMES, "bash", "default", {"spec": {"capacity": {"resources": {"runs": 9}}}}
    )
    assert await apply(kube, doc, overwrite=False) == "kept"
    live = await kube.get(RUNTIMES, "bash", "default")
    assert live["spec"]["capacity"]["resources"]["runs"] == 9
    assert live["metadata"]["resourceVersion"] == edited["metadata"]["resourceVersion"]
    assert await apply(kube, doc) == "configured"  # the default: kubectl apply semantics
    live = await kube.get(RUNTIMES, "bash", "default")
    assert live["spec"]["capacity"]["resources"]["runs"] == 4


async def test_a_rerun_reports_every_object_keeps_runtime_edits_and_restores_the_system(
    bare: Kube, tmp_path: Path
) -> None:
    first = results(await install_until_applied(bare, tmp_path))
    manifests = load_manifests("crds") + load_manifests("kruntimes") + load_manifests("runtimes")
    assert {object_name(doc) for doc in manifests} <= set(first)
    assert set(first.values()) == {"created"}
    assert first["secret/runtime-gateway-tls"] == "created"
    assert first["configmap/kruntimes-gateway-ca"] == "created"

    # the user tunes a built-in Runtime and scales the gateway by hand
    await bare.patch(
        RUNTIMES, "bash", "default", {"spec": {"capacity": {"resources": {"runs": 16}}}}
    )
    await bare.patch(
        DEPLOYMENTS, "krt-kruntimes-gateway", "kruntimes-system", {"spec": {"replicas": 3}}
    )

    lines = await install_until_applied(bare, tmp_path)
    second = results(lines)
    assert second["runtime.kruntimes.io/bash"] == "kept" + KEPT_NOTE
    assert second["runtime.kruntimes.io/python"] == "unchanged"
    assert second["deployment.apps/krt-kruntimes-gateway"] == "configured"
    others = {
        name: what
        for name, what in second.items()
        if name not in {"runtime.kruntimes.io/bash", "deployment.apps/krt-kruntimes-gateway"}
    }
    assert set(others.values()) == {"unchanged"}
    unchanged = sum(line.endswith(" unchanged") for line in lines)  # the peer Secret: twice
    summary = lines[-1]
    assert summary == (
        f"kruntimes applied (0 created, 1 configured, {unchanged} unchanged, 1 kept): "
        "waiting for the control plane, gateway, Runtimes"
    )

    bash = await bare.get(RUNTIMES, "bash", "default")
    assert bash["spec"]["capacity"]["resources"]["runs"] == 16
    gateway = await bare.get(DEPLOYMENTS, "krt-kruntimes-gateway", "kruntimes-system")
    assert gateway["spec"]["replicas"] == 1

    # a deleted built-in Runtime comes back with its default
    await bare.delete(RUNTIMES, "python", "default")
    third = results(await install_until_applied(bare, tmp_path))
    assert third["runtime.kruntimes.io/python"] == "created"


def test_up_help_says_what_a_rerun_does_to_the_install() -> None:
    from click.testing import CliRunner

    from krt.cli.main import krt

    result = CliRunner().invoke(krt, ["dev", "up", "--help"])
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    assert "reported as kubectl apply reports it" in text
    assert "The built-in Runtimes python and bash are created only when missing" in text
    assert 'edits to them (kubectl edit runtime bash) are kept ("kept")' in text
