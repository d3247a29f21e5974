"""Services on a real localkube: ClusterIP, EndpointSlices/Endpoints, the proxy, names."""

from __future__ import annotations

from typing import Any

import trio
from lk_node_helpers import (
    DEPLOYMENTS,
    SERVICES,
    SLICES,
    deployment,
    echo_container,
    eventually,
    ready_pods,
)

from localkube.cluster import ClusterHandle
from localkube.controllers.kubeapi import Kube
from localkube.names import resolve
from localkube.node.ipam import SERVICE_NETWORK
from localkube.node.layout import PodPaths

UNREADY_FILE = "unready"
READY_UNLESS_FILE = {
    "exec": {"command": ["sh", "-c", f'test ! -e "$HOME/{UNREADY_FILE}"']},
    "periodSeconds": 1,
    "failureThreshold": 1,
}


def service(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "selector": {"app": name},
            "ports": [{"name": "echo", "port": 80, "targetPort": "tcp"}],
        },
    }


async def greet(ip: str, port: int) -> str:
    stream = await trio.open_tcp_stream(ip, port)
    async with stream:
        data = b""
        while not data.endswith(b"\n"):
            chunk = await stream.receive_some(100)
            if not chunk:
                break
            data += chunk
        # the proxy copies both ways: an echo round trip through it
        await stream.send_all(b"ping")
        echoed = b""
        while len(echoed) < 4:
            echoed += await stream.receive_some(100)
        assert echoed == b"ping"
        return data.decode().strip()


async def cluster_ip(kube: Kube, name: str) -> str:
    async def probe() -> str | None:
        svc = await kube.get(f"{SERVICES}/{name}")
        return ((svc or {}).get("spec") or {}).get("clusterIP")

    return await eventually(probe, what="clusterIP")


async def test_failing_readiness_removes_endpoint_and_proxy_stops_sending(
    kube: Kube, cluster: ClusterHandle
) -> None:
    await kube.create(
        DEPLOYMENTS, deployment("svc", 2, echo_container(readinessProbe=READY_UNLESS_FILE))
    )
    await kube.create(SERVICES, service("svc"))
    pods = await ready_pods(kube, "svc", 2)
    names = {p["metadata"]["name"] for p in pods}
    ip = await cluster_ip(kube, "svc")
    assert ip in [str(a) for a in SERVICE_NETWORK.hosts()]

    async def both_ready() -> list[dict[str, Any]] | None:
        slices = (await kube.list(SLICES, {"labelSelector": "kubernetes.io/service-name=svc"}))[
            "items"
        ]
        eps = [e for s in slices for e in s["endpoints"] if e["conditions"]["ready"]]
        return slices if len(eps) == 2 else None

    slices = await eventually(both_ready, what="two ready endpoints")
    assert slices[0]["ports"] == [{"name": "echo", "port": 7000, "protocol": "TCP"}]
    assert slices[0]["metadata"]["ownerReferences"][0]["kind"] == "Service"
    endpoints = await kube.get("/api/v1/namespaces/default/endpoints/svc")
    assert endpoints is not None
    assert len(endpoints["subsets"][0]["addresses"]) == 2
    # new connections are balanced over both ready Pods
    seen = [await greet(ip, 80) for _ in range(6)]
    assert set(seen) == names

    # one Pod's readiness probe starts failing
    sick = pods[0]
    paths = PodPaths.for_pod(
        cluster.state_dir, "default", sick["metadata"]["name"], sick["metadata"]["uid"]
    )
    (paths.workspace / UNREADY_FILE).touch()

    async def one_ready() -> dict[str, Any] | None:
        ep = await kube.get("/api/v1/namespaces/default/endpoints/svc")
        subset = ((ep or {}).get("subsets") or [{}])[0]
        ok = len(subset.get("addresses", [])) == 1 and len(subset.get("notReadyAddresses", [])) == 1
        return subset if ok else None

    subset = await eventually(one_ready, what="one endpoint not ready")
    assert subset["notReadyAddresses"][0]["targetRef"]["name"] == sick["metadata"]["name"]

    async def proxy_caught_up() -> bool:
        return await greet(ip, 80) != sick["metadata"]["name"] and all(
            [await greet(ip, 80) != sick["metadata"]["name"] for _ in range(3)]
        )

    await eventually(proxy_caught_up, what="proxy stops sending to the unready Pod")
    seen = [await greet(ip, 80) for _ in range(6)]
    assert sick["metadata"]["name"] not in seen
    assert set(seen) == names - {sick["metadata"]["name"]}


async def test_service_names_resolve_through_the_hosts_file(
    kube: Kube, cluster: ClusterHandle
) -> None:
    await kube.create(SERVICES, service("named"))
    ip = await cluster_ip(kube, "named")

    async def listed() -> str | None:
        return await trio.to_thread.run_sync(
            resolve, "named.default.svc.cluster.local", cluster.hosts_file
        )

    assert await eventually(listed, what="hosts entry") == ip
    assert resolve("named.default.svc", cluster.hosts_file) == ip
    await kube.delete(f"{SERVICES}/named")

    async def removed() -> bool:
        return (
            await trio.to_thread.run_sync(resolve, "named.default.svc", cluster.hosts_file) is None
        )

    await eventually(removed, what="hosts entry removed")
