"""ClusterIP allocation for Services (the API server's allocator, run as a controller).

A Service of type ClusterIP, NodePort or LoadBalancer whose ``spec.clusterIP`` is empty gets
a free address from 127.0.200.0/21 (see :mod:`localkube.node.ipam`; addresses another
process of the machine listens on count as used), written with an update
conditional on the Service's resourceVersion (``clusterIP``, ``clusterIPs``,
``ipFamilies``, ``ipFamilyPolicy``; ``targetPort`` defaults to ``port``). Headless Services
(``clusterIP: None``) and ExternalName Services are left alone.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import trio

from localkube.controllers.informer import Informer, KeyedQueue, ObjectKey, key_of
from localkube.controllers.kubeapi import Kube, collection_path
from localkube.node.ipam import allocate_cluster_ip, listening_addresses


def needs_cluster_ip(svc: Mapping[str, Any]) -> bool:
    """Whether the Service still needs a ClusterIP."""
    spec = svc.get("spec", {})
    return spec.get("type", "ClusterIP") != "ExternalName" and not spec.get("clusterIP")


def with_cluster_ip(svc: Mapping[str, Any], ip: str) -> dict[str, Any]:
    """The Service with ``ip`` assigned and ports' ``targetPort`` defaulted."""
    body = copy.deepcopy(dict(svc))
    spec = body.setdefault("spec", {})
    spec["clusterIP"] = ip
    spec["clusterIPs"] = [ip]
    spec.setdefault("ipFamilies", ["IPv4"])
    spec.setdefault("ipFamilyPolicy", "SingleStack")
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    for p in spec.get("ports", []) or []:
        p.setdefault("protocol", "TCP")
        p.setdefault("targetPort", p.get("port"))
    return body


class ClusterIPController:
    """Assigns ClusterIPs to Services from the services informer."""

    def __init__(self, kube: Kube, services: Informer) -> None:
        self.kube = kube
        self.services = services
        self.queue: KeyedQueue[ObjectKey] = KeyedQueue(self.reconcile, name="clusterip")
        services.add_handler(self._on_service)

    def _on_service(self, etype: str, svc: dict[str, Any]) -> None:
        if etype != "DELETED" and needs_cluster_ip(svc):
            self.queue.add(key_of(svc))

    async def reconcile(self, key: ObjectKey) -> None:
        """Assign a ClusterIP to one Service if it has none."""
        svc = self.services.cache.get(key)
        if svc is None or not needs_cluster_ip(svc):
            return
        used = {s.get("spec", {}).get("clusterIP", "") for s in self.services.items()}
        used |= listening_addresses()  # another dev cluster's Services and Pods
        body = with_cluster_ip(svc, allocate_cluster_ip(used))
        await self.kube.replace(collection_path("v1", "services", key[0]) + f"/{key[1]}", body)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the work queue; never returns unless cancelled."""
        await self.queue.run(task_status=task_status)
