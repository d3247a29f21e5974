"""Invoke through real runtimed sidecars on localkube: two Runtime Pods, the real Python
Runtime Server, the function lifecycle registering the Run (issue 8 acceptance, runtimed side).

The Pods run the production ``runtimed``. Without peer TLS configured in the control plane the
non-owner answers UNAVAILABLE instead of hopping; with ``--peer-tls-secret`` (here through its
environment variable, as the chart passes it as an argument) the control plane mounts the
Secret into every runtimed, which then serves mutual TLS and hops once to the owner.
"""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

import httpx
import pytest
import trio
from dp_harness import client, invoke, request, write_peer_tls
from runtimed_cluster import NS, running_cluster, runtime_manifest, wait_phase, wait_runtime_ready

from krt.api.naming import RUNTIMED_GRPC_PORT, RUNTIMED_HTTP_PORT
from krt.grpc.client import GrpcStatusError
from krt.kube.resources import RUNS, RUNTIMES, ResourceRef

DAEMON = Path(__file__).resolve().parents[3] / "src" / "runtimed" / "daemon.py"
WIRED = "FunctionLifecycle" in DAEMON.read_text()
WRAPPER = Path(__file__).resolve().with_name("dp_runtimed_entry.py")
IMAGES = None if WIRED else {"kruntimes/runtimed": {"entrypoint": [sys.executable, str(WRAPPER)]}}


SECRETS = ResourceRef("", "v1", "secrets", True, "Secret")

pytestmark = pytest.mark.slow

UNAVAILABLE, PERMISSION_DENIED = 14, 7


async def test_invoke_via_owner_and_non_owner(tmp_path: Path) -> None:
    state = tmp_path / "state"
    async with running_cluster(state, images=IMAGES) as cluster:
        kube = cluster.kube
        token = (state / "pki" / "admin-token").read_text().strip()
        await kube.create(RUNTIMES, runtime_manifest("python", kind="python", replicas=2, runs=2))
        pods = await wait_runtime_ready(kube, "python", 2)
        await kube.create(
            RUNS,
            {
                "apiVersion": "kruntimes.io/v1alpha1",
                "kind": "Run",
                "metadata": {"name": "echo", "namespace": NS},
                "spec": {
                    "runtime": "python",
                    "source": {"inline": "def invoke(request):\n    return {'echo': request}\n"},
                    "mode": {"function": {"handler": "main.invoke"}},
                },
            },
        )
        run = await wait_phase(kube, "echo", "Ready", "Failed")
        assert run["status"]["phase"] == "Ready", run["status"]
        uid = run["metadata"]["uid"]
        owner_uid = run["status"]["assignedPodUID"]
        owner = next(p for p in pods if p["metadata"]["uid"] == owner_uid)
        other = next(p for p in pods if p["metadata"]["uid"] != owner_uid)
        metadata = [("authorization", f"Bearer {token}")]
        with trio.fail_after(30):
            async with client(owner["status"]["podIP"], RUNTIMED_GRPC_PORT) as conn:
                for index in range(20):  # sequential invokes all succeed
                    response = await invoke(
                        conn,
                        request(uid, body=b'{"n":%d}' % index, invocation_id=f"i-{index}"),
                        metadata=metadata,
                    )
                    assert json.loads(response.output) == {"echo": {"n": index}}
                    assert response.invocation_id == f"i-{index}"
                    assert response.registration.registration_id == ""
                with pytest.raises(GrpcStatusError) as denied:
                    await invoke(conn, request(uid), metadata=[("authorization", "Bearer nope")])
                assert denied.value.code == 16
            async with client(other["status"]["podIP"], RUNTIMED_GRPC_PORT) as conn:
                with pytest.raises(GrpcStatusError) as info:
                    await invoke(conn, request(uid), metadata=metadata)
                assert info.value.code == UNAVAILABLE
                assert "peer TLS is not configured" in info.value.message


async def test_non_owner_proxies_one_hop_over_mtls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control plane (its own process, configured by environment) mounts the peer TLS
    Secret into both Pods; the non-owner hops once to the owner over mutual TLS."""
    monkeypatch.setenv("KRT_CONTROLPLANE_PEER_TLS_SECRET", "peer-tls")
    tls = write_peer_tls(tmp_path / "peer-tls")
    state = tmp_path / "state"
    async with running_cluster(state, images=IMAGES, controlplane_process=True) as cluster:
        kube = cluster.kube
        token = (state / "pki" / "admin-token").read_text().strip()
        await kube.create(
            SECRETS,
            {
                "metadata": {"name": "peer-tls", "namespace": NS},
                "type": "kubernetes.io/tls",
                "data": {
                    name: base64.b64encode((tls.directory / name).read_bytes()).decode()
                    for name in ("tls.crt", "tls.key", "ca.crt")
                },
            },
        )
        await kube.create(RUNTIMES, runtime_manifest("python", kind="python", replicas=2, runs=2))
        pods = await wait_runtime_ready(kube, "python", 2)
        await kube.create(
            RUNS,
            {
                "apiVersion": "kruntimes.io/v1alpha1",
                "kind": "Run",
                "metadata": {"name": "hop", "namespace": NS},
                "spec": {
                    "runtime": "python",
                    "source": {"inline": "def invoke(request):\n    return {'echo': request}\n"},
                    "mode": {"function": {"handler": "main.invoke"}},
                },
            },
        )
        run = await wait_phase(kube, "hop", "Ready", "Failed")
        assert run["status"]["phase"] == "Ready", run["status"]
        uid = run["metadata"]["uid"]
        other = next(p for p in pods if p["metadata"]["uid"] != run["status"]["assignedPodUID"])
        metadata = [("authorization", f"Bearer {token}")]
        with trio.fail_after(30):
            address = other["status"]["podIP"]
            async with client(address, RUNTIMED_GRPC_PORT, tls.gateway_context()) as conn:
                for index in range(5):
                    response = await invoke(
                        conn, request(uid, body=b"%d" % index), metadata=metadata
                    )
                    assert json.loads(response.output) == {"echo": index}
                    assert response.registration.registration_id == ""
            async with httpx.AsyncClient() as http:
                scraped = await http.get(f"http://{address}:{RUNTIMED_HTTP_PORT}/metrics")
            assert 'runtimed_proxied_hops_total{direction="out"} 5.0' in scraped.text
            assert 'runtimed_invocations_total{code="OK",route="remote"} 5.0' in scraped.text
