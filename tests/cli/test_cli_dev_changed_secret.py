"""``krt dev up`` says so when it puts back a TLS Secret someone changed.

Found by trying it (a dev cluster, a gateway certificate rotated by hand with ``kubectl create
secret tls ... | kubectl apply -f -``): the gateway reloads the hand-made certificate and every
invoke fails verification against the ``caBundle`` runtimed publishes (the dev gateway CA);
a peer certificate from another CA fails the gateway-to-runtimed mTLS the same way. A re-run
of ``krt dev up`` put its own copy back, said only ``secret/... configured``, and invokes
worked again. It still puts its copy back (the only one the dev cluster trusts), and now
says which Secret, what it did and why.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trustme

from krt.cli.dev_apply import apply, replaced_secret_warning
from krt.cli.dev_certs import TlsPair, foreign_certificate, gateway_tls, peer_tls, tls_secret
from krt.cli.dev_install import _wait_pods_gone
from krt.kube.client import Kube, connect
from krt.kube.resources import ResourceRef
from localkube.apiserver import ApiServerHandle

from .test_cli_dev_apply import install_until_applied, results

SECRETS = ResourceRef("", "v1", "secrets", True, "Secret")
SYSTEM = "kruntimes-system"


@pytest.fixture
async def bare(apiserver: ApiServerHandle) -> AsyncIterator[Kube]:
    """An admin client of a fresh API server: no CRDs, no Runtimes."""
    async with await connect(kubeconfig=apiserver.kubeconfig_path) as client:
        yield client


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def foreign_pair(*hosts: str) -> TlsPair:
    """A leaf for ``hosts`` from a CA of someone else's (a hand rotation)."""
    ca = trustme.CA(organization_name="rotated by hand")
    leaf = ca.issue_cert(*hosts)
    cert = b"".join(blob.bytes() for blob in leaf.cert_chain_pems)
    return TlsPair(cert=cert, key=leaf.private_key_pem.bytes(), ca=ca.cert_pem.bytes())


def warnings_in(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("warning: secret ")]


async def test_a_rerun_puts_back_a_hand_rotated_secret_and_says_which_and_why(
    bare: Kube, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await install_until_applied(bare, tmp_path)
    assert warnings_in(capsys.readouterr().err) == []

    # kubectl create secret tls runtime-gateway-tls --cert --key | kubectl apply: the new
    # leaf and key, the old ca.crt kept (kubectl's tls Secret has none)
    gateway = await bare.get(SECRETS, "runtime-gateway-tls", SYSTEM)
    mine = foreign_pair("runtime-gateway.kruntimes-system.svc")
    gateway["data"].update({"tls.crt": b64(mine.cert), "tls.key": b64(mine.key)})
    await bare.replace(SECRETS, gateway)
    # and a whole peer Secret of another CA in the Runtimes' namespace
    peer = await bare.get(SECRETS, "kruntimes-peer-tls", "default")
    theirs = foreign_pair("*.default.svc")
    peer["data"] = {
        "tls.crt": b64(theirs.cert),
        "tls.key": b64(theirs.key),
        "ca.crt": b64(theirs.ca),
    }
    await bare.replace(SECRETS, peer)

    second = results(await install_until_applied(bare, tmp_path))
    assert second["secret/runtime-gateway-tls"] == "configured"
    assert second["secret/kruntimes-peer-tls"] == "configured"
    assert warnings_in(capsys.readouterr().err) == [
        "warning: secret kruntimes-system/runtime-gateway-tls was changed since krt dev up made "
        "it (its tls.crt is not signed by the dev CA); replaced with krt dev up's copy: the dev "
        "cluster trusts only the CAs krt dev up generated, so another certificate fails its TLS "
        "checks (Pods using the Secret reload it within about 30 s; for certificates of your "
        "own, install the Helm chart, docs/install.md)",
        "warning: secret default/kruntimes-peer-tls was changed since krt dev up made it (its "
        "tls.crt is not signed by the dev CA); replaced with krt dev up's copy: the dev cluster "
        "trusts only the CAs krt dev up generated, so another certificate fails its TLS checks "
        "(Pods using the Secret reload it within about 30 s; for certificates of your own, "
        "install the Helm chart, docs/install.md)",
    ]
    dev_gateway = (tmp_path / "kruntimes" / "gateway-tls" / "tls.crt").read_bytes()
    live = await bare.get(SECRETS, "runtime-gateway-tls", SYSTEM)
    assert base64.b64decode(live["data"]["tls.crt"]) == dev_gateway
    live_peer = await bare.get(SECRETS, "kruntimes-peer-tls", "default")
    assert (
        foreign_certificate(live_peer, tls_secret("x", "default", peer_tls(tmp_path, ["default"])))
        == ""
    )

    third = results(await install_until_applied(bare, tmp_path))  # nothing to put back
    assert third["secret/runtime-gateway-tls"] == "unchanged"
    assert warnings_in(capsys.readouterr().err) == []


async def test_apply_tells_warn_and_replaces(bare: Kube, tmp_path: Path) -> None:
    await bare.create(
        ResourceRef("", "v1", "namespaces", False, "Namespace"), {"metadata": {"name": SYSTEM}}
    )
    desired = tls_secret("runtime-gateway-tls", SYSTEM, gateway_tls(tmp_path, ["a.example"]))
    lines: list[str] = []
    assert await apply(bare, desired, warn=lines.append) == "created"
    live = await bare.get(SECRETS, "runtime-gateway-tls", SYSTEM)
    live["data"]["tls.key"] = b64(foreign_pair("a.example").key)  # a key that is not the leaf's
    await bare.replace(SECRETS, live)
    assert await apply(bare, desired, warn=lines.append) == "configured"
    assert len(lines) == 1
    assert lines[0].startswith(
        "warning: secret kruntimes-system/runtime-gateway-tls was changed since krt dev up "
        "made it (its tls.key is not the key of its tls.crt); replaced with krt dev up's copy"
    )
    assert (await bare.get(SECRETS, "runtime-gateway-tls", SYSTEM))["data"] == desired["data"]


def secret_with(pair: TlsPair, **data: str) -> dict[str, Any]:
    secret = tls_secret("s", "ns", pair)
    secret["data"].update(data)
    return secret


def test_a_leaf_re_issued_from_the_dev_ca_is_routine_not_a_hand_change(tmp_path: Path) -> None:
    old = gateway_tls(tmp_path, ["runtime-gateway.kruntimes-system.svc", "127.0.200.1"])
    new = gateway_tls(tmp_path, ["runtime-gateway.kruntimes-system.svc", "127.0.200.2"])
    assert old.cert != new.cert  # the ClusterIP changed: a new leaf, the same CA
    desired, live = tls_secret("s", "ns", new), tls_secret("s", "ns", old)
    assert foreign_certificate(live, desired) == ""
    assert replaced_secret_warning(desired, live) == ""


def test_what_makes_a_secret_not_krt_dev_ups(tmp_path: Path) -> None:
    dev = gateway_tls(tmp_path, ["a.example"])
    desired = tls_secret("s", "ns", dev)
    other = foreign_pair("a.example")
    cases = {
        "its tls.crt is not signed by the dev CA": secret_with(
            dev, **{"tls.crt": b64(other.cert), "tls.key": b64(other.key)}
        ),
        "its tls.key is not the key of its tls.crt": secret_with(
            dev, **{"tls.key": b64(other.key)}
        ),
        "its ca.crt is not the dev CA": secret_with(dev, **{"ca.crt": b64(other.ca)}),
        "it has no tls.crt or no tls.key": secret_with(dev, **{"tls.key": ""}),
        "its tls.crt is not a PEM certificate": secret_with(dev, **{"tls.crt": b64(b"junk")}),
        "its data is not base64": secret_with(dev, **{"tls.crt": "%%%"}),
    }
    for why, live in cases.items():
        assert foreign_certificate(live, desired) == why
        assert f"({why}); replaced with krt dev up's copy" in replaced_secret_warning(desired, live)


def test_only_krt_dev_ups_tls_secrets_get_the_warning(tmp_path: Path) -> None:
    dev = gateway_tls(tmp_path, ["a.example"])
    live = secret_with(dev, **{"tls.crt": b64(foreign_pair("a.example").cert)})
    unlabelled = tls_secret("s", "ns", dev)
    del unlabelled["metadata"]["labels"]["kruntimes.io/dev"]
    opaque = {**tls_secret("s", "ns", dev), "type": "Opaque"}
    config = {"kind": "ConfigMap", "metadata": {"name": "c", "namespace": "ns"}, "data": {}}
    for desired in (unlabelled, opaque, config):
        assert replaced_secret_warning(desired, live) == ""


def test_up_help_says_a_hand_changed_tls_secret_is_put_back() -> None:
    from click.testing import CliRunner

    from krt.cli.main import krt

    result = CliRunner().invoke(krt, ["dev", "up", "--help"])
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    assert "one changed by hand is put back, with a warning line" in text


async def test_the_install_waits_until_restarted_gateway_pods_are_gone(bare: Kube) -> None:
    # T3 F6: "Ready" came while the gateway Pod deleted for a put-back Secret still existed,
    # so the readiness check counted it and the first invoke hit a gateway going away
    pods = ResourceRef("", "v1", "pods", True, "Pod")
    pod = {
        "metadata": {"name": "gw-old", "namespace": "default", "finalizers": ["test/hold"]},
        "spec": {"containers": [{"name": "gateway", "image": "kruntimes/gateway"}]},
    }
    await bare.create(pods, pod)
    await bare.delete(pods, "gw-old", "default")  # held by the finalizer: still there
    gone = trio.Event()

    async def wait() -> None:
        await _wait_pods_gone(bare, "default", ["gw-old"])
        gone.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait)
        await trio.sleep(1.2)  # a few of its polls
        assert not gone.is_set()
        await bare.patch(pods, "gw-old", "default", {"metadata": {"finalizers": None}})
        with trio.fail_after(5):
            await gone.wait()
