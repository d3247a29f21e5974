"""kubectl table columns for the kinds the workload controllers and the node manage.

kube-apiserver prints built-in kinds server-side (``as=Table``). These are the columns of
its printers for ReplicaSets, Services, Endpoints, EndpointSlices and Nodes, plus the
``-o wide`` extras of Pods and Deployments, as pure functions the API server's table code
can use: :data:`EXTRA_COLUMNS` gives the column definitions (after NAME and any columns the
table code already prints, before AGE), :func:`extra_cells` the matching cells. Priority 1
columns are the ones kubectl shows only with ``-o wide``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: storage key -> (name, type, description, priority) per extra column.
EXTRA_COLUMNS: dict[str, list[tuple[str, str, str, int]]] = {
    "/pods": [
        ("IP", "string", "IP address allocated to the pod.", 1),
        ("Node", "string", "Name of the node the pod is assigned to.", 1),
        ("Nominated Node", "string", "Name of the node where the pod is nominated.", 1),
        ("Readiness Gates", "string", "Readiness gates of the pod (ready/total).", 1),
    ],
    "apps/deployments": [
        ("Containers", "string", "Names of each container in the template.", 1),
        ("Images", "string", "Images referenced by each container in the template.", 1),
        ("Selector", "string", "Label selector for pods.", 1),
    ],
    "apps/replicasets": [
        ("Desired", "integer", "Number of desired pods.", 0),
        ("Current", "integer", "Number of actual replicas.", 0),
        ("Ready", "integer", "Number of ready replicas.", 0),
        ("Containers", "string", "Names of each container in the template.", 1),
        ("Images", "string", "Images referenced by each container in the template.", 1),
        ("Selector", "string", "Label selector for pods.", 1),
    ],
    "/services": [
        ("Type", "string", "The type of the service.", 0),
        ("Cluster-IP", "string", "The IP address of the service.", 0),
        ("External-IP", "string", "The external IP address of the service.", 0),
        ("Port(s)", "string", "The ports of the service.", 0),
        ("Selector", "string", "The label selector of the service.", 1),
    ],
    "/endpoints": [("Endpoints", "string", "Endpoints of the service.", 0)],
    "discovery.k8s.io/endpointslices": [
        ("AddressType", "string", "The type of addresses in the slice.", 0),
        ("Ports", "string", "The ports of the slice.", 0),
        ("Endpoints", "string", "The addresses of the slice.", 0),
    ],
    "/nodes": [
        ("Status", "string", "The status of the node.", 0),
        ("Roles", "string", "The roles of the node.", 0),
        ("Version", "string", "Kubelet version.", 0),
        ("Internal-IP", "string", "The internal IP of the node.", 1),
        ("External-IP", "string", "The external IP of the node.", 1),
        ("OS-Image", "string", "OS image of the node.", 1),
        ("Kernel-Version", "string", "Kernel version of the node.", 1),
        ("Container-Runtime", "string", "Container runtime of the node.", 1),
    ],
}


def _list_or_none(values: list[str], limit: int = 3) -> str:
    if not values:
        return "<none>"
    shown = ",".join(values[:limit])
    return shown + (f" + {len(values) - limit} more..." if len(values) > limit else "")


def _selector(sel: Mapping[str, Any] | None) -> str:
    if not sel:
        return "<none>"
    labels = sel.get("matchLabels") if "matchLabels" in sel or "matchExpressions" in sel else sel
    parts = [f"{k}={v}" for k, v in sorted((labels or {}).items())]
    for e in (
        sel.get("matchExpressions") or [] if isinstance(sel.get("matchExpressions"), list) else []
    ):
        op = e.get("operator", "")
        key = e.get("key", "")
        values = ",".join(e.get("values") or [])
        if op == "In":
            parts.append(f"{key} in ({values})")
        elif op == "NotIn":
            parts.append(f"{key} notin ({values})")
        elif op == "Exists":
            parts.append(key)
        elif op == "DoesNotExist":
            parts.append(f"!{key}")
    return ",".join(parts) or "<none>"


def _template_cells(spec: Mapping[str, Any]) -> list[str]:
    containers = ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
    return [
        ",".join(c.get("name", "") for c in containers),
        ",".join(c.get("image", "") for c in containers),
        _selector(spec.get("selector")),
    ]


def _service_ports(spec: Mapping[str, Any]) -> str:
    out = []
    for p in spec.get("ports") or []:
        text = f"{p.get('port')}"
        if p.get("nodePort"):
            text += f":{p['nodePort']}"
        out.append(f"{text}/{p.get('protocol', 'TCP')}")
    return ",".join(out) or "<none>"


def _node_cells(obj: Mapping[str, Any]) -> list[str]:
    status = obj.get("status") or {}
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    state = "Ready" if ready and ready.get("status") == "True" else "NotReady"
    if (obj.get("spec") or {}).get("unschedulable"):
        state += ",SchedulingDisabled"
    labels = (obj.get("metadata") or {}).get("labels") or {}
    roles = sorted(
        k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/") and "/" in k
    )
    addresses = {a.get("type"): a.get("address") for a in status.get("addresses") or []}
    info = status.get("nodeInfo") or {}
    return [
        state,
        ",".join(roles) or "<none>",
        info.get("kubeletVersion", ""),
        addresses.get("InternalIP") or "<none>",
        addresses.get("ExternalIP") or "<none>",
        info.get("osImage", ""),
        info.get("kernelVersion", ""),
        info.get("containerRuntimeVersion", ""),
    ]


def extra_cells(storage_key: str, obj: Mapping[str, Any]) -> list[Any]:
    """Cells for :data:`EXTRA_COLUMNS` ``[storage_key]`` (empty list for other kinds)."""
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    if storage_key == "/pods":
        gates = [g.get("conditionType") for g in spec.get("readinessGates") or []]
        conds = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
        gate_cell = (
            f"{sum(conds.get(g) == 'True' for g in gates)}/{len(gates)}" if gates else "<none>"
        )
        return [
            status.get("podIP") or "<none>",
            spec.get("nodeName") or "<none>",
            status.get("nominatedNodeName") or "<none>",
            gate_cell,
        ]
    if storage_key == "apps/deployments":
        return _template_cells(spec)
    if storage_key == "apps/replicasets":
        return [
            int(spec.get("replicas", 1)),
            int(status.get("replicas", 0) or 0),
            int(status.get("readyReplicas", 0) or 0),
            *_template_cells(spec),
        ]
    if storage_key == "/services":
        ingress = [
            i.get("ip") or i.get("hostname")
            for i in (status.get("loadBalancer") or {}).get("ingress") or []
        ]
        external = [*spec.get("externalIPs", []), *[i for i in ingress if i]]
        return [
            spec.get("type", "ClusterIP"),
            spec.get("clusterIP") or "<none>",
            ",".join(external) or ("<pending>" if spec.get("type") == "LoadBalancer" else "<none>"),
            _service_ports(spec),
            _selector(spec.get("selector")),
        ]
    if storage_key == "/endpoints":
        pairs = [
            f"{a['ip']}:{p['port']}"
            for s in obj.get("subsets") or []
            for a in s.get("addresses") or []
            for p in s.get("ports") or []
        ]
        return [_list_or_none(pairs)]
    if storage_key == "discovery.k8s.io/endpointslices":
        ports = [str(p.get("port")) for p in obj.get("ports") or [] if p.get("port") is not None]
        addrs = [a for e in obj.get("endpoints") or [] for a in e.get("addresses") or []]
        return [obj.get("addressType", ""), ",".join(ports) or "<unset>", _list_or_none(addrs)]
    if storage_key == "/nodes":
        return _node_cells(obj)
    return []
