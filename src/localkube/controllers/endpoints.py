"""Endpoints and EndpointSlice controller: a Service's ready Pods, by port.

Rules (kube-controller-manager's endpoints and endpointslice controllers, simplified):
a Service with a ``selector`` gets an ``Endpoints`` object of the same name and
EndpointSlices labelled ``kubernetes.io/service-name`` (owned by the Service) listing the
Pods in its namespace whose labels match, that have a Pod IP and are not terminal. A Pod is
*ready* when its ``Ready`` condition is True and it is not being deleted; not-ready Pods
go to ``notReadyAddresses`` / ``conditions.ready: false``; a deleting Pod is
``terminating``. ``targetPort`` may name a container port; Pods are grouped by their
resolved port numbers (one subset and one slice per group). Services without selector are
left alone (their endpoints are managed by hand).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import trio

from localkube.controllers.common import is_ready, is_terminating, map_selector_matches
from localkube.controllers.informer import Informer, KeyedQueue, ObjectKey, key_of
from localkube.controllers.kubeapi import ApiStatusError, Kube, collection_path

SERVICE_NAME_LABEL = "kubernetes.io/service-name"
MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"
MANAGED_BY = "endpointslice-controller.k8s.io"

PortSet = tuple[tuple[str, int, str], ...]


def resolve_ports(service: Mapping[str, Any], pod: Mapping[str, Any]) -> PortSet | None:
    """Resolve the Service's ports against one Pod: ``(name, targetPort, protocol)`` each.

    Returns None if a named ``targetPort`` is not a port of any of the Pod's containers.
    """
    named: dict[str, int] = {}
    for c in pod.get("spec", {}).get("containers", []) or []:
        for p in c.get("ports", []) or []:
            if p.get("name"):
                named[p["name"]] = int(p["containerPort"])
    out = []
    for p in service.get("spec", {}).get("ports", []) or []:
        target = p.get("targetPort", p.get("port"))
        if isinstance(target, str) and not target.isdigit():
            if target not in named:
                return None
            number = named[target]
        else:
            number = int(target)
        out.append((str(p.get("name", "") or ""), number, str(p.get("protocol", "TCP"))))
    return tuple(out)


def endpoint_pods(service: Mapping[str, Any], pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pods that back the Service: same namespace, selector match, podIP set, not terminal."""
    ns = service["metadata"].get("namespace")
    selector = service.get("spec", {}).get("selector")
    return [
        p
        for p in pods
        if p["metadata"].get("namespace") == ns
        and map_selector_matches(selector, p["metadata"].get("labels") or {})
        and (p.get("status") or {}).get("podIP")
        and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    ]


def _address(pod: Mapping[str, Any]) -> dict[str, Any]:
    addr: dict[str, Any] = {
        "ip": pod["status"]["podIP"],
        "targetRef": {
            "kind": "Pod",
            "namespace": pod["metadata"]["namespace"],
            "name": pod["metadata"]["name"],
            "uid": pod["metadata"]["uid"],
        },
    }
    if pod.get("spec", {}).get("nodeName"):
        addr["nodeName"] = pod["spec"]["nodeName"]
    return addr


def _pod_ready(pod: Mapping[str, Any]) -> bool:
    return is_ready(pod) and not is_terminating(pod)


def group_pods(
    service: Mapping[str, Any], pods: list[dict[str, Any]]
) -> dict[PortSet, list[dict[str, Any]]]:
    """Group the Service's Pods by resolved port set (sorted by Pod IP within a group)."""
    groups: dict[PortSet, list[dict[str, Any]]] = {}
    for pod in endpoint_pods(service, pods):
        ports = resolve_ports(service, pod)
        if ports is None:
            continue
        groups.setdefault(ports, []).append(pod)
    for members in groups.values():
        members.sort(key=lambda p: (p["status"]["podIP"], p["metadata"]["name"]))
    return groups


def desired_subsets(service: Mapping[str, Any], pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``subsets`` of the Service's Endpoints object."""
    subsets = []
    for ports, members in sorted(group_pods(service, pods).items()):
        subset: dict[str, Any] = {}
        ready = [_address(p) for p in members if _pod_ready(p)]
        not_ready = [_address(p) for p in members if not _pod_ready(p)]
        if ready:
            subset["addresses"] = ready
        if not_ready:
            subset["notReadyAddresses"] = not_ready
        subset["ports"] = [
            {**({"name": n} if n else {}), "port": port, "protocol": proto}
            for n, port, proto in ports
        ]
        subsets.append(subset)
    return subsets


def slice_name(service_name: str, ports: PortSet) -> str:
    """Stable EndpointSlice name for a port group: ``<service>-<5 hex chars>``."""
    digest = hashlib.sha1(repr(ports).encode()).hexdigest()[:5]
    return f"{service_name[:57]}-{digest}"


def desired_slices(
    service: Mapping[str, Any], pods: list[dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """EndpointSlices (name -> object) for the Service; one empty slice if no Pod matches."""
    meta = service["metadata"]
    groups = group_pods(service, pods)
    if not groups:
        fallback = tuple(
            (
                str(p.get("name", "") or ""),
                int(p["targetPort"])
                if str(p.get("targetPort", p.get("port"))).isdigit()
                else int(p["port"]),
                str(p.get("protocol", "TCP")),
            )
            for p in service.get("spec", {}).get("ports", []) or []
        )
        groups = {fallback: []}
    out = {}
    for ports, members in groups.items():
        name = slice_name(meta["name"], ports)
        endpoints = []
        for p in members:
            terminating = is_terminating(p)
            ep: dict[str, Any] = {
                "addresses": [p["status"]["podIP"]],
                "conditions": {
                    "ready": _pod_ready(p),
                    "serving": is_ready(p),
                    "terminating": terminating,
                },
                "targetRef": _address(p)["targetRef"],
            }
            if p.get("spec", {}).get("nodeName"):
                ep["nodeName"] = p["spec"]["nodeName"]
            endpoints.append(ep)
        out[name] = {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": name,
                "namespace": meta["namespace"],
                "labels": {
                    **(meta.get("labels") or {}),
                    SERVICE_NAME_LABEL: meta["name"],
                    MANAGED_BY_LABEL: MANAGED_BY,
                },
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Service",
                        "name": meta["name"],
                        "uid": meta["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "addressType": "IPv4",
            "endpoints": endpoints,
            "ports": [{"name": n, "port": port, "protocol": proto} for n, port, proto in ports],
        }
    return out


class EndpointsController:
    """Maintains Endpoints and EndpointSlices from the services, pods, endpoints and
    endpointslices informers."""

    def __init__(
        self,
        kube: Kube,
        *,
        services: Informer,
        pods: Informer,
        endpoints: Informer,
        slices: Informer,
    ) -> None:
        self.kube = kube
        self.services = services
        self.pods = pods
        self.endpoints = endpoints
        self.slices = slices
        self.queue: KeyedQueue[ObjectKey] = KeyedQueue(self.reconcile, name="endpoints")
        services.add_handler(lambda _t, obj: self.queue.add(key_of(obj)))
        pods.add_handler(self._on_pod)
        slices.add_handler(self._on_slice)

    def _on_pod(self, _etype: str, pod: dict[str, Any]) -> None:
        ns = pod["metadata"].get("namespace", "")
        labels = pod["metadata"].get("labels") or {}
        for (sns, sname), svc in list(self.services.cache.items()):
            if sns == ns and map_selector_matches(svc.get("spec", {}).get("selector"), labels):
                self.queue.add((sns, sname))

    def _on_slice(self, etype: str, obj: dict[str, Any]) -> None:
        svc = (obj["metadata"].get("labels") or {}).get(SERVICE_NAME_LABEL)
        if etype == "DELETED" and svc:
            self.queue.add((obj["metadata"].get("namespace", ""), svc))

    async def reconcile(self, key: ObjectKey) -> None:
        """Write the Service's Endpoints and EndpointSlices (or remove them)."""
        ns, name = key
        svc = self.services.cache.get(key)
        ep_path = collection_path("v1", "endpoints", ns)
        slice_path = collection_path("discovery.k8s.io/v1", "endpointslices", ns)
        ours = {
            sname: s
            for (sns, sname), s in self.slices.cache.items()
            if sns == ns
            and (s["metadata"].get("labels") or {}).get(SERVICE_NAME_LABEL) == name
            and (s["metadata"].get("labels") or {}).get(MANAGED_BY_LABEL) == MANAGED_BY
        }
        if svc is None or not svc.get("spec", {}).get("selector"):
            if svc is None and (ns, name) in self.endpoints.cache:
                await self.kube.delete(f"{ep_path}/{name}")
            for sname in ours:
                await self.kube.delete(f"{slice_path}/{sname}")
            return
        pods = self.pods.items()
        subsets = desired_subsets(svc, pods)
        current = self.endpoints.cache.get(key)
        labels = dict(svc["metadata"].get("labels") or {})
        if current is None:
            body = {
                "apiVersion": "v1",
                "kind": "Endpoints",
                "metadata": {"name": name, "namespace": ns, "labels": labels},
                "subsets": subsets,
            }
            try:
                await self.kube.create(ep_path, body)
            except ApiStatusError as exc:
                if exc.code != 409:
                    raise
                self.queue.add(key)
        elif (current.get("subsets") or []) != subsets or (
            current["metadata"].get("labels") or {}
        ) != labels:
            body = dict(current)
            body["subsets"] = subsets
            body["metadata"] = dict(current["metadata"], labels=labels)
            await self.kube.replace(f"{ep_path}/{name}", body)
        wanted = desired_slices(svc, pods)
        for sname, desired in wanted.items():
            existing = ours.get(sname)
            if existing is None:
                try:
                    await self.kube.create(slice_path, desired)
                except ApiStatusError as exc:
                    if exc.code != 409:
                        raise
                    self.queue.add(key)
            elif (
                existing.get("endpoints") or [],
                existing.get("ports") or [],
                existing["metadata"].get("labels") or {},
            ) != (desired["endpoints"], desired["ports"], desired["metadata"]["labels"]):
                body = dict(existing)
                body["endpoints"] = desired["endpoints"]
                body["ports"] = desired["ports"]
                body["metadata"] = dict(existing["metadata"], labels=desired["metadata"]["labels"])
                await self.kube.replace(f"{slice_path}/{sname}", body)
        for sname in set(ours) - set(wanted):
            await self.kube.delete(f"{slice_path}/{sname}")

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the work queue; never returns unless cancelled."""
        await self.queue.run(task_status=task_status)
