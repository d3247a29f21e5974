"""The kind harness itself, checked here without kind or Docker (fast, no cluster).

The end-to-end tests can only run where kind and Docker are; these tests keep their
machinery honest everywhere else: the preflight names what is missing, the skip reason is
printed, the values they install with are real chart values, and the gateway certificate
covers the Service name.
"""

from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from .kind_harness import (
    GATEWAY_TLS_SECRET,
    INVOKER_SA,
    KRUNTIMES_CHART,
    OUTSIDER_SA,
    RUNTIMES_CHART,
    Settings,
    chart_values,
    gateway_tls_secret,
    helm_engine_available,
    invoker_rbac,
    preflight,
    render_chart,
)

HERE = Path(__file__).resolve().parent


class FakeRun:
    """``subprocess.run`` stand-in: answers ``docker info`` and ``kind get clusters``."""

    def __init__(self, *, docker_rc: int = 0, clusters: str = "") -> None:
        self.docker_rc = docker_rc
        self.clusters = clusters
        self.calls: list[list[str]] = []

    def __call__(self, args: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        self.calls.append(args)
        if args[:2] == ["docker", "info"]:
            err = "" if self.docker_rc == 0 else "Cannot connect to the Docker daemon"
            return subprocess.CompletedProcess(args, self.docker_rc, "", err)
        return subprocess.CompletedProcess(args, 0, self.clusters, "")


def which_of(*present: str) -> Any:
    return lambda name: f"/usr/bin/{name}" if name in present else None


def test_preflight_names_missing_kind() -> None:
    reason = preflight(Settings(), which=which_of("kubectl", "docker", "helm"), run=FakeRun())
    assert reason is not None
    assert reason.startswith("kind is not installed")


def test_preflight_names_missing_kubectl() -> None:
    reason = preflight(Settings(), which=which_of("kind", "docker", "helm"), run=FakeRun())
    assert reason is not None
    assert "kubectl is not installed" in reason


def test_preflight_reports_a_docker_client_without_engine() -> None:
    run = FakeRun(docker_rc=1)
    reason = preflight(Settings(), which=which_of("kind", "kubectl", "docker", "helm"), run=run)
    assert reason is not None
    assert "no Docker engine answers" in reason
    assert "Cannot connect to the Docker daemon" in reason


def test_preflight_needs_no_docker_for_an_existing_cluster_without_builds() -> None:
    settings = Settings(cluster="mine", skip_build=True)
    run = FakeRun(docker_rc=1, clusters="other\nmine\n")
    assert preflight(settings, which=which_of("kind", "kubectl", "helm"), run=run) is None


def test_preflight_passes_when_everything_is_there() -> None:
    run = FakeRun()
    assert (
        preflight(Settings(), which=which_of("kind", "kubectl", "docker", "helm"), run=run) is None
    )
    assert ["docker", "info"] in run.calls


def test_settings_from_environment() -> None:
    settings = Settings.from_env(
        {
            "KRT_E2E_CLUSTER": "c1",
            "KRT_E2E_IMAGE_TAG": "t",
            "KRT_E2E_SKIP_BUILD": "1",
            "KRT_E2E_KEEP": "1",
        }
    )
    assert settings == Settings(cluster="c1", image_tag="t", skip_build=True, keep=True)
    assert Settings.from_env({}) == Settings()


def test_e2e_tests_are_skipped_with_the_reason_printed(tmp_path: Path) -> None:
    """Without kind on PATH every e2e test is skipped and pytest prints why (-rs)."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-rs",
            "-p",
            "no:cacheprovider",
            str(HERE / "test_e2e_kind.py"),
        ],
        env={"PATH": str(tmp_path), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=HERE.parents[1],
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "passed" not in result.stdout
    assert "failed" not in result.stdout
    assert "SKIPPED" in result.stdout
    assert "kind is not installed" in result.stdout


def test_gateway_certificate_covers_the_service_names() -> None:
    import trustme

    secret = gateway_tls_secret(trustme.CA())
    assert secret["metadata"]["name"] == GATEWAY_TLS_SECRET
    assert secret["type"] == "kubernetes.io/tls"
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(names.get_values_for_type(x509.DNSName)) == {
        "runtime-gateway.kruntimes-system.svc",
        "runtime-gateway.kruntimes-system.svc.cluster.local",
    }
    assert base64.b64decode(secret["data"]["ca.crt"]).startswith(b"-----BEGIN CERTIFICATE-----")


def test_invoker_role_grants_only_get_on_runs() -> None:
    docs = invoker_rbac()
    role = next(d for d in docs if d["kind"] == "Role")
    assert role["rules"] == [
        {"apiGroups": ["kruntimes.io"], "resources": ["runs"], "verbs": ["get"]}
    ]
    binding = next(d for d in docs if d["kind"] == "RoleBinding")
    assert [s["name"] for s in binding["subjects"]] == [INVOKER_SA]
    assert OUTSIDER_SA in {d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount"}


@pytest.mark.skipif(not helm_engine_available(), reason="helm-python-sdk is not installed")
def test_install_values_are_real_chart_values() -> None:
    """The values the harness installs with take effect: the e2e tag and the TLS Secret."""
    kruntimes_values, runtimes_values = chart_values("e2e")
    docs = render_chart(KRUNTIMES_CHART, kruntimes_values, "kruntimes", "kruntimes-system")
    deployments = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}
    images = [
        c["image"]
        for d in deployments.values()
        for c in d["spec"]["template"]["spec"]["containers"]
    ]
    assert images
    assert all(image.endswith(":e2e") for image in images), images
    gateway = next(d for n, d in deployments.items() if n.endswith("gateway"))
    secrets = [
        v["secret"]["secretName"]
        for v in gateway["spec"]["template"]["spec"].get("volumes", [])
        if "secret" in v
    ]
    assert GATEWAY_TLS_SECRET in secrets
    services = {d["metadata"]["name"] for d in docs if d["kind"] == "Service"}
    assert "runtime-gateway" in services

    runtimes = render_chart(RUNTIMES_CHART, runtimes_values, "runtimes", "default")
    by_name = {d["metadata"]["name"]: d for d in runtimes if d["kind"] == "Runtime"}
    assert {"python", "bash"} <= set(by_name)
    for runtime in by_name.values():
        assert runtime["spec"]["replicas"] == 1
        assert runtime["spec"]["daemonImage"].endswith(":e2e")
        containers = runtime["spec"]["template"]["spec"]["containers"]
        assert all(c["image"].endswith(":e2e") for c in containers)


def test_the_example_inputs_the_e2e_flows_use_exist() -> None:
    """The e2e flows invoke the repository's examples: a rename must fail here, not on kind."""
    from . import test_e2e_kind as flows

    for path in (
        flows.KRM_FILE,
        flows.KRM_INPUT,
        flows.GREET_FILE,
        flows.QUICKSTART_KRM_FILE,
        flows.QUICKSTART_KRM_INPUT,
        flows.QUICKSTART_TASK_FILE,
    ):
        assert path.is_file(), f"{path} is missing"
    assert "def invoke(" in flows.QUICKSTART_KRM_FILE.read_text()
    assert "def set_labels(" in flows.KRM_FILE.read_text()
    assert "hello()" in flows.GREET_FILE.read_text()
