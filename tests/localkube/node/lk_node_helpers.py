"""Helpers for the cluster tests in this folder (objects, polling)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import trio

from localkube.controllers.kubeapi import Kube

T = TypeVar("T")


async def eventually(
    probe: Callable[[], Awaitable[T | None]], *, seconds: float = 8.0, what: str = ""
) -> T:
    """Poll ``probe`` every 50 ms until it returns a truthy value (real time; a cluster test
    waits for real processes)."""
    last: Any = None
    with trio.move_on_after(seconds):
        while True:
            last = await probe()
            if last:
                return last
            await trio.sleep(0.05)
    raise AssertionError(f"timed out after {seconds}s waiting for {what or probe}; last: {last!r}")


def echo_container(**extra: Any) -> dict[str, Any]:
    """A ``localkube/tcp-echo`` container on port 7000 of the Pod IP."""
    c: dict[str, Any] = {
        "name": "echo",
        "image": "localkube/tcp-echo",
        "ports": [{"name": "tcp", "containerPort": 7000}],
        "env": [
            {"name": "PORT", "value": "7000"},
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        ],
    }
    c.update(extra)
    return c


def deployment(name: str, replicas: int, container: dict[str, Any], **spec: Any) -> dict[str, Any]:
    """A Deployment of one container, labels ``app=<name>``."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"terminationGracePeriodSeconds": 2, "containers": [container]},
            },
            **spec,
        },
    }


def pod(name: str, container: dict[str, Any], **spec: Any) -> dict[str, Any]:
    """A bare Pod in ``default``."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": name}},
        "spec": {"containers": [container], **spec},
    }


PODS = "/api/v1/namespaces/default/pods"
DEPLOYMENTS = "/apis/apps/v1/namespaces/default/deployments"
SERVICES = "/api/v1/namespaces/default/services"
SLICES = "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices"


async def ready_pods(kube: Kube, app: str, count: int) -> list[dict[str, Any]]:
    """Wait for exactly ``count`` ready, non-terminating Pods labelled ``app``."""

    async def probe() -> list[dict[str, Any]] | None:
        items = (await kube.list(PODS, {"labelSelector": f"app={app}"}))["items"]
        ready = [
            p
            for p in items
            if not p["metadata"].get("deletionTimestamp")
            and any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in (p.get("status") or {}).get("conditions", [])
            )
        ]
        return ready if len(ready) == count and len(items) == count else None

    return await eventually(probe, what=f"{count} ready pods of {app}")
