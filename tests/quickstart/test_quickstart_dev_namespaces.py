"""krt dev: a Runtime in a namespace other than ``default`` gets its runtimed TLS wiring.

Without the gateway CA ConfigMap and the peer TLS Secret in its namespace, runtimed serves
plaintext and publishes no caBundle, so its function Runs are Ready but the gateway cannot
reach them (seed 000: gateway-to-runtimed mTLS, certificates issued by the installation).
"""

from __future__ import annotations

import base64
import copy
from pathlib import Path
from typing import Any

import pytest
import trio
from test_quickstart_dev_certs import handshake, sans

from gateway.targets import service_dns_name
from krt.cli.dev_apply import KIND_REFS, apply, load_manifests
from krt.cli.dev_certs import gateway_tls, peer_tls
from krt.cli.dev_namespaces import NamespaceWiring, serve_runtime_namespaces
from krt.kube.client import Kube
from krt.kube.errors import NotFound
from krt.kube.resources import NAMESPACES, PODS, RUNTIMES

SECRETS = KIND_REFS["Secret"]
CONFIGMAPS = KIND_REFS["ConfigMap"]


@pytest.fixture
async def with_crds(kube: Kube) -> Kube:
    for crd in load_manifests("crds"):
        await apply(kube, crd)
    with trio.fail_after(10):
        while True:
            try:
                await kube.list(RUNTIMES, "default")
                return kube
            except NotFound:
                await trio.sleep(0.05)


def installed_state(tmp_path: Path) -> Path:
    """A state directory after krt dev up's install: both dev CAs exist."""
    state = tmp_path / "dev"
    gateway_tls(state, ["runtime-gateway.kruntimes-system.svc"])
    peer_tls(state, ["default"])
    return state


def python_runtime(namespace: str) -> dict[str, Any]:
    runtime = copy.deepcopy(load_manifests("runtimes")[0])
    runtime["metadata"]["namespace"] = namespace
    return runtime


async def make_namespace(kube: Kube, name: str) -> None:
    await kube.create(NAMESPACES, {"metadata": {"name": name}})


async def runtime_pod(kube: Kube, namespace: str, name: str) -> None:
    await kube.create(
        PODS,
        {
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {"kruntimes.io/runtime": "python"},
            },
            "spec": {"containers": [{"name": "c", "image": "localkube/python"}]},
        },
    )


async def secret_files(kube: Kube, namespace: str) -> dict[str, bytes]:
    secret = await kube.get(SECRETS, "kruntimes-peer-tls", namespace)
    return {k: base64.b64decode(v) for k, v in secret["data"].items()}


async def test_a_runtime_in_another_namespace_gets_ca_and_peer_tls_and_fresh_pods(
    with_crds: Kube, tmp_path: Path
) -> None:
    kube = with_crds
    state = installed_state(tmp_path)
    await make_namespace(kube, "team-a")
    await runtime_pod(kube, "team-a", "python-early")  # started before the Secret existed
    lines: list[str] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(
            lambda task_status: serve_runtime_namespaces(
                kube, state_dir=state, progress=lines.append, task_status=task_status
            )
        )
        await kube.create(RUNTIMES, python_runtime("team-a"))
        await kube.create(RUNTIMES, python_runtime("default"))
        with trio.fail_after(10):
            while not any("pod/python-early deleted" in line for line in lines):  # noqa: ASYNC110
                await trio.sleep(0.05)
        nursery.cancel_scope.cancel()
    assert lines == [
        "namespace team-a: configmap/kruntimes-gateway-ca created",
        "namespace team-a: secret/kruntimes-peer-tls created",
        "namespace team-a: pod/python-early deleted",
    ]
    configmap = await kube.get(CONFIGMAPS, "kruntimes-gateway-ca", "team-a")
    gateway_ca = (state / "kruntimes" / "gateway-ca" / "ca.crt").read_text()
    assert configmap["data"] == {"ca.crt": gateway_ca}
    files = await secret_files(kube, "team-a")
    assert files["ca.crt"] == (state / "kruntimes" / "peer-ca" / "ca.crt").read_bytes()
    assert "*.team-a.svc" in sans(files["tls.crt"])
    # the gateway's mTLS dial verifies the Runtime Service's name against the peer CA
    name = service_dns_name("team-a", "python")
    handshake(files["tls.crt"], files["tls.key"], files["ca.crt"], tmp_path, name)
    # the shared leaf the install handed out is unchanged (running Pods keep trusting it)
    assert "*.team-a.svc" not in sans(peer_tls(state, ["default"]).cert)
    with pytest.raises(NotFound):
        await kube.get(PODS, "python-early", "team-a")  # its ReplicaSet makes a wired one
    # the install's own namespace is the install's to wire
    with pytest.raises(NotFound):
        await kube.get(SECRETS, "kruntimes-peer-tls", "default")


async def test_a_namespace_made_again_is_wired_again(with_crds: Kube, tmp_path: Path) -> None:
    kube = with_crds
    state = installed_state(tmp_path)
    await make_namespace(kube, "team-d")
    lines: list[str] = []

    async def wait_for(count: int) -> None:
        with trio.fail_after(10):
            while len(lines) < count:  # noqa: ASYNC110
                await trio.sleep(0.05)

    async with trio.open_nursery() as nursery:
        await nursery.start(
            lambda task_status: serve_runtime_namespaces(
                kube, state_dir=state, progress=lines.append, task_status=task_status
            )
        )
        await kube.create(RUNTIMES, python_runtime("team-d"))
        await wait_for(2)
        # the user removes the Runtime and the Secret (as deleting the namespace would)
        await kube.delete(RUNTIMES, "python", "team-d")
        await kube.delete(SECRETS, "kruntimes-peer-tls", "team-d")
        await trio.sleep(0.3)
        await kube.create(RUNTIMES, python_runtime("team-d"))
        await wait_for(3)
        nursery.cancel_scope.cancel()
    assert lines[2] == "namespace team-d: secret/kruntimes-peer-tls created"
    await kube.get(SECRETS, "kruntimes-peer-tls", "team-d")


async def test_existing_objects_are_kept_and_pods_left_alone(
    with_crds: Kube, tmp_path: Path
) -> None:
    kube = with_crds
    state = installed_state(tmp_path)
    await make_namespace(kube, "team-b")
    own = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "kruntimes-peer-tls", "namespace": "team-b"},
        "data": {"tls.crt": base64.b64encode(b"mine").decode()},
    }
    await kube.create(SECRETS, own)
    await kube.create(
        CONFIGMAPS,
        {"metadata": {"name": "kruntimes-gateway-ca", "namespace": "team-b"}, "data": {"x": "y"}},
    )
    await runtime_pod(kube, "team-b", "python-running")
    wiring = NamespaceWiring(kube, state_dir=state)
    assert await wiring.wire("team-b") == []
    assert (await secret_files(kube, "team-b")) == {"tls.crt": b"mine"}
    await kube.get(PODS, "python-running", "team-b")  # not restarted
    assert "team-b" in wiring.done


async def test_nothing_is_wired_on_a_cluster_krt_dev_did_not_install(
    with_crds: Kube, tmp_path: Path
) -> None:
    kube = with_crds
    await make_namespace(kube, "team-c")
    wiring = NamespaceWiring(kube, state_dir=tmp_path / "bare")
    assert await wiring.wire("team-c") == []
    with pytest.raises(NotFound):
        await kube.get(SECRETS, "kruntimes-peer-tls", "team-c")
    assert not (tmp_path / "bare").exists()
