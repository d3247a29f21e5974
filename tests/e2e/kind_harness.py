"""Drive a kind cluster for the end-to-end tests: preflight, images, charts, port-forward.

Everything here shells out to the tools a user would run (``kind``, ``docker`` through
``images/build.sh``, ``kubectl``, ``helm``) so the tests exercise the documented
installation (docs/install.md, docs/e2e.md), not an in-process shortcut. Where ``helm`` is
not installed, the charts are rendered with Helm's own engine (``helm-python-sdk``, a test
extra) and applied with ``kubectl apply``, which installs the same manifests.

Configuration (environment):

* ``KRT_E2E_CLUSTER``: kind cluster name (default ``krt-e2e``). An existing cluster of that
  name is reused and kept; one the tests create is deleted at the end unless
  ``KRT_E2E_KEEP=1``.
* ``KRT_E2E_IMAGE_TAG``: tag of the images built and loaded (default ``e2e``).
* ``KRT_E2E_SKIP_BUILD=1``: do not build or load images (they are already on the nodes).
* ``KRT_E2E_NODE_IMAGE``: ``kind create cluster --image`` (default: kind's own).
"""

from __future__ import annotations

import base64
import json
import os
import selectors
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trustme
import yaml

REPO = Path(__file__).resolve().parents[2]
CHARTS = REPO / "charts"
KRUNTIMES_CHART = CHARTS / "kruntimes"
RUNTIMES_CHART = CHARTS / "kruntimes-runtimes"
CRD_DIR = KRUNTIMES_CHART / "crds"

SYSTEM_NAMESPACE = "kruntimes-system"
RUNS_NAMESPACE = "default"
KRUNTIMES_RELEASE = "kruntimes"
RUNTIMES_RELEASE = "runtimes"
GATEWAY_SERVICE = "runtime-gateway"
GATEWAY_TLS_SECRET = "runtime-gateway-tls"
GATEWAY_CA_CONFIGMAP = "kruntimes-gateway-ca"
IMAGES = ("runtimed", "controlplane", "gateway", "python-runtime", "bash-runtime")
#: ServiceAccount allowed to ``get`` Runs in RUNS_NAMESPACE (may invoke).
INVOKER_SA = "e2e-invoker"
#: ServiceAccount without any permission on Runs (gets 403 from the gateway).
OUTSIDER_SA = "e2e-outsider"

#: Seconds allowed for one slow step (cluster creation, image build, rollout).
SLOW_STEP_SECONDS = 600.0
#: Seconds allowed for an ordinary command (kubectl get, krt run --wait of a short task).
COMMAND_SECONDS = 180.0


class E2EError(Exception):
    """A command of the harness failed; the message carries its output."""


@dataclass(frozen=True)
class Settings:
    """What the environment asks for (see the module docstring)."""

    cluster: str = "krt-e2e"
    image_tag: str = "e2e"
    skip_build: bool = False
    keep: bool = False
    node_image: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> Settings:
        """Read ``KRT_E2E_*`` variables; unset ones keep their defaults."""
        return cls(
            cluster=env.get("KRT_E2E_CLUSTER") or "krt-e2e",
            image_tag=env.get("KRT_E2E_IMAGE_TAG") or "e2e",
            skip_build=env.get("KRT_E2E_SKIP_BUILD") == "1",
            keep=env.get("KRT_E2E_KEEP") == "1",
            node_image=env.get("KRT_E2E_NODE_IMAGE") or None,
        )


def preflight(
    settings: Settings, *, which: Any = shutil.which, run: Any = subprocess.run
) -> str | None:
    """Why the end-to-end tests cannot run here, or None when they can.

    Checks, in order: the ``kind`` and ``kubectl`` commands; unless images are not to be
    built, the ``docker`` command and a Docker engine that answers ``docker info``; a Helm
    (the ``helm`` command, or the ``helm-python-sdk`` engine).

    Args:
        settings: the environment's settings.
        which: ``shutil.which`` (injectable for tests).
        run: ``subprocess.run`` (injectable for tests).

    Returns:
        A one-line reason naming what is missing and how to get it, or None.
    """
    if which("kind") is None:
        return "kind is not installed (https://kind.sigs.k8s.io); the e2e tests need a kind cluster"
    if which("kubectl") is None:
        return "kubectl is not installed; the e2e tests drive the cluster with it"
    needs_docker = not settings.skip_build or not _cluster_exists_quietly(settings, run)
    if needs_docker:
        if which("docker") is None:
            return "docker is not installed; kind nodes and the kruntimes images need Docker"
        try:
            info = run(["docker", "info"], capture_output=True, text=True, timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"docker info failed ({exc}); start the Docker engine"
        if info.returncode != 0:
            detail = (info.stderr or info.stdout).strip().splitlines()
            return (
                "no Docker engine answers (docker info: "
                + (detail[-1] if detail else f"exit {info.returncode}")
                + "); start the Docker daemon or point DOCKER_HOST at one"
            )
    if which("helm") is None and not helm_engine_available():
        return "neither the helm command nor helm-python-sdk is available to install the charts"
    return None


def _cluster_exists_quietly(settings: Settings, run: Any) -> bool:
    try:
        out = run(["kind", "get", "clusters"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and settings.cluster in out.stdout.split()


def helm_engine_available() -> bool:
    """True when ``helm_python`` (Helm's engine as a library) imports and loads."""
    try:
        import helm_python  # noqa: F401
    except Exception:  # ImportError, or OSError from its native library
        return False
    return True


def sh(
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    input: str | bytes | None = None,
    timeout: float = COMMAND_SECONDS,
    check: bool = True,
    cwd: Path = REPO,
) -> subprocess.CompletedProcess[str]:
    """Run one command, capturing text output.

    Raises:
        E2EError: with the command and its output, when ``check`` and it exits non-zero,
            or when it outlives ``timeout`` seconds.
    """
    full_env = {**os.environ, **(env or {})}
    data = input.decode() if isinstance(input, bytes) else input
    try:
        result = subprocess.run(
            list(args),
            env=full_env,
            input=data,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            cwd=cwd,
        )
    except subprocess.TimeoutExpired as exc:
        raise E2EError(f"{' '.join(args)}: no answer within {timeout:g} s") from exc
    if check and result.returncode != 0:
        raise E2EError(
            f"{' '.join(args)} exited {result.returncode}\n"
            f"stdout:\n{result.stdout[-4000:]}\nstderr:\n{result.stderr[-4000:]}"
        )
    return result


@dataclass
class KindCluster:
    """A kind cluster the tests use.

    Attributes:
        name: the kind cluster name.
        kubeconfig: a kubeconfig file for it (admin, client certificates).
        created: True when the tests created it (and so may delete it).
        gateway_ca_pem: the CA that signed the gateway certificate (PEM).
    """

    name: str
    kubeconfig: Path
    created: bool
    gateway_ca_pem: bytes = b""

    def env(self, **extra: str) -> dict[str, str]:
        """Environment for ``kubectl``/``krt`` against this cluster (default namespace)."""
        return {"KUBECONFIG": str(self.kubeconfig), "KRT_NAMESPACE": RUNS_NAMESPACE, **extra}

    def kubectl(
        self, *args: str, input: str | None = None, timeout: float = COMMAND_SECONDS
    ) -> str:
        """Run ``kubectl`` against the cluster; return its stdout.

        Raises:
            E2EError: kubectl failed.
        """
        return sh(["kubectl", *args], env=self.env(), input=input, timeout=timeout).stdout

    def apply(self, docs: Sequence[Mapping[str, Any]]) -> None:
        """``kubectl apply`` the manifests (server-side, so large CRDs fit)."""
        text = yaml.safe_dump_all(list(docs), sort_keys=False)
        self.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=text)

    def get_json(self, *args: str) -> dict[str, Any]:
        """``kubectl get ... -o json`` parsed."""
        data = json.loads(self.kubectl("get", *args, "-o", "json"))
        assert isinstance(data, dict)
        return data


def create_or_reuse(settings: Settings, workdir: Path) -> KindCluster:
    """Create the kind cluster, or reuse an existing one of that name.

    Raises:
        E2EError: kind failed.
    """
    kubeconfig = workdir / "kubeconfig"
    existing = sh(["kind", "get", "clusters"]).stdout.split()
    created = settings.cluster not in existing
    if created:
        command = ["kind", "create", "cluster", "--name", settings.cluster, "--wait", "180s"]
        if settings.node_image:
            command += ["--image", settings.node_image]
        sh([*command, "--kubeconfig", str(kubeconfig)], timeout=SLOW_STEP_SECONDS)
    else:
        kubeconfig.write_text(sh(["kind", "get", "kubeconfig", "--name", settings.cluster]).stdout)
    return KindCluster(name=settings.cluster, kubeconfig=kubeconfig, created=created)


def delete_cluster(cluster: KindCluster) -> None:
    """``kind delete cluster`` (errors are ignored: this is cleanup)."""
    sh(["kind", "delete", "cluster", "--name", cluster.name], check=False, timeout=300)


def image_ref(image: str, tag: str) -> str:
    """The reference ``images/build.sh`` builds with ``REGISTRY=kruntimes``."""
    return f"kruntimes/{image}:{tag}"


def build_and_load_images(cluster: KindCluster, tag: str) -> None:
    """Build the five images from images/Dockerfile and load them onto the kind nodes.

    Raises:
        E2EError: the build or ``kind load`` failed.
    """
    sh(
        ["bash", "images/build.sh"],
        env={"REGISTRY": "kruntimes", "TAG": tag},
        timeout=SLOW_STEP_SECONDS * 2,
    )
    sh(
        [
            "kind",
            "load",
            "docker-image",
            "--name",
            cluster.name,
            *(image_ref(i, tag) for i in IMAGES),
        ],
        timeout=SLOW_STEP_SECONDS,
    )


def gateway_tls_secret(ca: trustme.CA) -> dict[str, Any]:
    """The gateway's serving certificate Secret (``gateway.tls.secretName``), with ``ca.crt``.

    The certificate covers ``runtime-gateway.kruntimes-system.svc`` and its
    ``.cluster.local`` form (docs/install.md, TLS for the gateway).
    """
    host = f"{GATEWAY_SERVICE}.{SYSTEM_NAMESPACE}.svc"
    cert = ca.issue_cert(host, f"{host}.cluster.local")
    chain = b"".join(blob.bytes() for blob in cert.cert_chain_pems)

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {"name": GATEWAY_TLS_SECRET, "namespace": SYSTEM_NAMESPACE},
        "data": {
            "tls.crt": b64(chain),
            "tls.key": b64(cert.private_key_pem.bytes()),
            "ca.crt": b64(ca.cert_pem.bytes()),
        },
    }


def gateway_ca_configmap(ca: trustme.CA) -> dict[str, Any]:
    """The ConfigMap ``kruntimes-gateway-ca`` (key ``ca.crt``) in the Runtimes' namespace.

    runtimed mounts it and publishes it as ``status.endpoint.caBundle`` (docs/install.md,
    "Publishing the gateway CA"), so ``krt invoke`` needs no trust-store override.
    """
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": GATEWAY_CA_CONFIGMAP, "namespace": RUNS_NAMESPACE},
        "data": {"ca.crt": ca.cert_pem.bytes().decode()},
    }


def chart_values(tag: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Values for (kruntimes, kruntimes-runtimes): the e2e image tag, the gateway Secret.

    One Pod per Runtime: every invocation then lands on the owning runtimed, so the tests do
    not depend on the peer hop, which needs peer mTLS material in the Runtime Pods (without
    it, a request reaching a non-owner is answered 503, docs/security.md).
    """
    images = {"tag": tag, "pullPolicy": "IfNotPresent"}
    kruntimes = {"images": images, "gateway": {"tls": {"secretName": GATEWAY_TLS_SECRET}}}
    runtimes = {"images": images, "python": {"replicas": 1}, "bash": {"replicas": 1}}
    return kruntimes, runtimes


def invoker_rbac() -> list[dict[str, Any]]:
    """ServiceAccounts for the invoke tests: one allowed to ``get`` Runs, one with nothing."""
    meta = {"namespace": RUNS_NAMESPACE}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": INVOKER_SA, **meta}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": OUTSIDER_SA, **meta}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "e2e-run-invoker", **meta},
            "rules": [{"apiGroups": ["kruntimes.io"], "resources": ["runs"], "verbs": ["get"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "e2e-run-invoker", **meta},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "e2e-run-invoker",
            },
            "subjects": [
                {"kind": "ServiceAccount", "name": INVOKER_SA, "namespace": RUNS_NAMESPACE}
            ],
        },
    ]


def _values_file(workdir: Path, name: str, values: Mapping[str, Any]) -> Path:
    path = workdir / name
    path.write_text(yaml.safe_dump(dict(values)))
    return path


def install(cluster: KindCluster, settings: Settings, workdir: Path) -> None:
    """Install both charts as docs/install.md describes, and wait until they serve.

    Namespace, gateway Secret (from a fresh CA), ``helm upgrade --install`` of
    charts/kruntimes (kruntimes-system) and charts/kruntimes-runtimes (default); without
    the helm command, the same charts rendered by Helm's engine and ``kubectl apply``-ed.
    Then waits for the Deployments to be Available and the python and bash Runtimes to be
    Available, and creates the invoke tests' ServiceAccounts.

    Raises:
        E2EError: a step failed or did not finish in time.
    """
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SYSTEM_NAMESPACE}}
    cluster.apply([ns])
    ca = trustme.CA()
    cluster.gateway_ca_pem = ca.cert_pem.bytes()
    cluster.apply([gateway_tls_secret(ca), gateway_ca_configmap(ca)])
    kruntimes_values, runtimes_values = chart_values(settings.image_tag)
    if shutil.which("helm"):
        for release, chart, namespace, values in (
            (KRUNTIMES_RELEASE, KRUNTIMES_CHART, SYSTEM_NAMESPACE, kruntimes_values),
            (RUNTIMES_RELEASE, RUNTIMES_CHART, RUNS_NAMESPACE, runtimes_values),
        ):
            sh(
                [
                    "helm",
                    "upgrade",
                    "--install",
                    release,
                    str(chart),
                    "--namespace",
                    namespace,
                    "--values",
                    str(_values_file(workdir, f"{release}-values.yaml", values)),
                    "--kubeconfig",
                    str(cluster.kubeconfig),
                ],
                timeout=SLOW_STEP_SECONDS,
            )
            if release == KRUNTIMES_RELEASE:
                _wait_for_crds(cluster)
    else:
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_DIR))
        _wait_for_crds(cluster)
        cluster.apply(
            render_chart(KRUNTIMES_CHART, kruntimes_values, KRUNTIMES_RELEASE, SYSTEM_NAMESPACE)
        )
        cluster.apply(
            render_chart(RUNTIMES_CHART, runtimes_values, RUNTIMES_RELEASE, RUNS_NAMESPACE)
        )
    cluster.kubectl(
        "-n",
        SYSTEM_NAMESPACE,
        "wait",
        "--for=condition=Available",
        "deployment",
        "--all",
        "--timeout=300s",
        timeout=SLOW_STEP_SECONDS,
    )
    cluster.kubectl(
        "-n",
        RUNS_NAMESPACE,
        "wait",
        "--for=condition=Available",
        "runtime/python",
        "runtime/bash",
        "--timeout=300s",
        timeout=SLOW_STEP_SECONDS,
    )
    cluster.apply(invoker_rbac())


def _wait_for_crds(cluster: KindCluster) -> None:
    cluster.kubectl(
        "wait",
        "--for=condition=Established",
        "crd/runs.kruntimes.io",
        "crd/runtimes.kruntimes.io",
        "--timeout=60s",
    )


def render_chart(
    chart: Path, values: Mapping[str, Any], release: str, namespace: str
) -> list[dict[str, Any]]:
    """Render a chart with Helm's engine (``helm template``), every manifest parsed."""
    import helm_python

    docs: list[dict[str, Any]] = []
    with helm_python.Chart.load(str(chart)) as loaded:
        rendered = loaded.render(dict(values), name=release, namespace=namespace, is_install=True)
    for path, text in sorted(dict(rendered).items()):
        if path.endswith("NOTES.txt"):
            continue
        for doc in yaml.safe_load_all(text):
            if doc:
                doc.setdefault("metadata", {}).setdefault("namespace", namespace)
                docs.append(doc)
    return docs


class PortForward:
    """``kubectl port-forward svc/runtime-gateway :443``: the gateway on a local port.

    Seed 000: the gateway Service is ClusterIP only; from outside the cluster ``krt invoke``
    reaches it through ``--gateway-url`` (docs/cli.md, From outside the cluster).
    """

    def __init__(self, cluster: KindCluster) -> None:
        self._process = subprocess.Popen(
            [
                "kubectl",
                "-n",
                SYSTEM_NAMESPACE,
                "port-forward",
                f"svc/{GATEWAY_SERVICE}",
                ":443",
                "--address",
                "127.0.0.1",
            ],
            env={**os.environ, **cluster.env()},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.url = f"https://127.0.0.1:{self._wait_for_port()}"

    def _wait_for_port(self, seconds: float = 60.0) -> int:
        """Read ``Forwarding from 127.0.0.1:PORT -> 8443`` from kubectl's output."""
        assert self._process.stdout is not None
        selector = selectors.DefaultSelector()
        selector.register(self._process.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + seconds
        seen: list[str] = []
        while time.monotonic() < deadline:
            if not selector.select(timeout=max(0.0, deadline - time.monotonic())):
                break
            line = self._process.stdout.readline()
            if not line:
                break
            seen.append(line.strip())
            if line.startswith("Forwarding from 127.0.0.1:"):
                return int(line.split(":", 2)[1].split()[0])
        self.close()
        raise E2EError("kubectl port-forward did not start: " + " | ".join(seen))

    def close(self) -> None:
        """Stop kubectl (the process this object started)."""
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
