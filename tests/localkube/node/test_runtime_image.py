"""A kruntimes image on localkube: the Python Runtime Server as a Deployment, called over
gRPC through its Service's ClusterIP (the proxy carries HTTP/2 unchanged)."""

from __future__ import annotations

from typing import Any

import purerpc
import trio
from lk_node_helpers import DEPLOYMENTS, SERVICES, deployment, eventually, ready_pods

from krt.proto.executor.v1 import runtime_grpc, runtime_pb2
from localkube.controllers.kubeapi import Kube


async def test_python_runtime_server_answers_grpc_through_its_service(kube: Kube) -> None:
    container = {
        "name": "runtime",
        "image": "kruntimes/python-runtime:dev",
        "args": ["--listen", "$(POD_IP):9090", "--work-dir", "$(KRT_POD_WORKSPACE)/runs"],
        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
        "ports": [{"name": "grpc", "containerPort": 9090}],
        "readinessProbe": {"tcpSocket": {"port": "grpc"}, "periodSeconds": 1},
    }
    await kube.create(DEPLOYMENTS, deployment("pyrt", 2, container))
    await kube.create(
        SERVICES,
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "pyrt", "namespace": "default"},
            "spec": {
                "selector": {"app": "pyrt"},
                "ports": [{"name": "grpc", "port": 9090, "targetPort": "grpc"}],
            },
        },
    )
    await ready_pods(kube, "pyrt", 2)

    async def cluster_ip() -> str | None:
        svc = await kube.get(f"{SERVICES}/pyrt")
        return ((svc or {}).get("spec") or {}).get("clusterIP")

    ip = await eventually(cluster_ip, what="clusterIP")

    async def healthy() -> Any:
        # Until the proxy has seen the ready endpoints it closes each connection at once, and a
        # purerpc call on a connection closed before any answer waits forever: each attempt is
        # bounded.
        with trio.move_on_after(1.0):
            try:
                async with purerpc.insecure_channel(ip, 9090) as channel:
                    stub = runtime_grpc.RuntimeStub(channel)
                    return await stub.Health(runtime_pb2.HealthRequest())
            except OSError:
                pass
        return None

    reply = await eventually(healthy, seconds=10, what="Health through the Service")
    assert reply.healthy is True
