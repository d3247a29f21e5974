"""The manifest set `krt dev up` installs is exactly the charts rendered by Helm's engine."""

from __future__ import annotations

from pathlib import Path

import pytest
import render_dev_manifests

from krt.cli.dev_apply import KIND_REFS, load_manifests
from krt.cli.dev_install import (
    GATEWAY_CA_CONFIGMAP,
    GATEWAY_TLS_SECRET,
    PEER_TLS_SECRET,
    RUNTIMES_NAMESPACE,
    SYSTEM_NAMESPACE,
)

try:
    import helm_python  # noqa: F401

    HELM_ERROR: str | None = None
except Exception as exc:  # ImportError, or OSError from the native library
    HELM_ERROR = f"Helm's engine is unavailable (helm-python-sdk: {exc!r}); install '.[test]'"


@pytest.mark.skipif(HELM_ERROR is not None, reason=HELM_ERROR or "")
def test_shipped_manifests_match_a_fresh_render_of_the_charts() -> None:
    stale = render_dev_manifests.drift()
    assert not stale, (
        f"{stale} differ from the charts: run .venv/bin/python "
        "tests/quickstart/render_dev_manifests.py"
    )


@pytest.mark.skipif(HELM_ERROR is not None, reason=HELM_ERROR or "")
def test_drift_check_notices_a_changed_file(tmp_path: Path) -> None:
    for name, text in render_dev_manifests.expected_files().items():
        (tmp_path / name).write_text(text)
    assert render_dev_manifests.drift(tmp_path) == []
    (tmp_path / "runtimes.yaml").write_text((tmp_path / "runtimes.yaml").read_text() + "# x\n")
    assert render_dev_manifests.drift(tmp_path) == ["runtimes.yaml"]
    assert render_dev_manifests.main(["--check"]) == 0


def test_rendering_constants_agree_with_the_installer() -> None:
    assert render_dev_manifests.SYSTEM_NAMESPACE == SYSTEM_NAMESPACE
    assert render_dev_manifests.RUNTIMES_NAMESPACE == RUNTIMES_NAMESPACE
    assert render_dev_manifests.GATEWAY_TLS_SECRET == GATEWAY_TLS_SECRET
    assert render_dev_manifests.PEER_TLS_SECRET == PEER_TLS_SECRET
    assert render_dev_manifests.GATEWAY_CA_CONFIGMAP == GATEWAY_CA_CONFIGMAP


def test_manifest_set_holds_what_the_install_promises() -> None:
    crds = load_manifests("crds")
    assert sorted(d["metadata"]["name"] for d in crds) == [
        "runs.kruntimes.io",
        "runtimes.kruntimes.io",
    ]
    kruntimes = load_manifests("kruntimes")
    kinds = {(d["kind"], d["metadata"]["name"]) for d in kruntimes}
    assert ("Deployment", "krt-kruntimes-controlplane") in kinds
    assert ("Deployment", "krt-kruntimes-gateway") in kinds
    assert ("Service", "runtime-gateway") in kinds
    for doc in kruntimes:
        assert doc["kind"] in KIND_REFS
        if KIND_REFS[doc["kind"]].namespaced:
            assert doc["metadata"]["namespace"] == SYSTEM_NAMESPACE
    (gateway,) = [
        d
        for d in kruntimes
        if d["kind"] == "Deployment" and d["metadata"]["name"] == "krt-kruntimes-gateway"
    ]
    volumes = gateway["spec"]["template"]["spec"]["volumes"]
    assert {
        "name": "tls",
        "secret": {"secretName": GATEWAY_TLS_SECRET, "defaultMode": 0o440},
    } in volumes
    runtimes = load_manifests("runtimes")
    assert sorted(d["metadata"]["name"] for d in runtimes) == ["bash", "python"]
    assert {d["metadata"]["namespace"] for d in runtimes} == {RUNTIMES_NAMESPACE}
    assert all(d["spec"]["replicas"] == 1 for d in runtimes)


def test_dev_install_wires_runtimed_to_the_material_it_creates() -> None:
    """The control plane tells every Runtime Pod's runtimed where the gateway is and mounts
    the gateway CA ConfigMap and peer TLS Secret the installer creates; the gateway talks
    mTLS to runtimed with the same Secret."""
    from krt.controlplane.__main__ import main as controlplane_main
    from krt.controlplane.runtime_resources import RuntimedWiring

    kruntimes = load_manifests("kruntimes")
    deployments = {d["metadata"]["name"]: d for d in kruntimes if d["kind"] == "Deployment"}
    (cp,) = deployments["krt-kruntimes-controlplane"]["spec"]["template"]["spec"]["containers"]
    ctx = controlplane_main.make_context("krt-controlplane", list(cp["args"]))
    wiring = RuntimedWiring(
        gateway_url=ctx.params["gateway_url"],
        gateway_ca_configmap=ctx.params["gateway_ca_configmap"],
        peer_tls_secret=ctx.params["peer_tls_secret"],
    )
    assert wiring == RuntimedWiring(
        gateway_url=f"https://runtime-gateway.{SYSTEM_NAMESPACE}.svc.cluster.local",
        gateway_ca_configmap=GATEWAY_CA_CONFIGMAP,
        peer_tls_secret=PEER_TLS_SECRET,
    )
    gateway = deployments["krt-kruntimes-gateway"]["spec"]["template"]["spec"]
    assert {
        "name": "peer-tls",
        "secret": {"secretName": PEER_TLS_SECRET, "defaultMode": 0o440},
    } in gateway["volumes"]
    assert any(a.startswith("--upstream-ca-file=") for a in gateway["containers"][0]["args"])
