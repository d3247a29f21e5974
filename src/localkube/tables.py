"""Server-side printing: the ``meta.k8s.io/v1 Table`` kubectl asks for with ``as=Table``.

Columns: NAME, then a CRD version's ``additionalPrinterColumns`` (simple JSONPaths:
dotted fields and ``[n]`` indices), or a few kind-specific columns for built-ins (Pod
READY/STATUS/RESTARTS, Namespace STATUS, Deployment READY), then AGE. Dates render as
ages the way kube-apiserver's ``HumanDuration`` does (``45s``, ``3m``, ``2d5h``).
"""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime
from typing import Any

from localkube.resources import PrinterColumn, ResourceType

log = logging.getLogger("localkube.tables")

_SEGMENT = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def human_duration(seconds: float) -> str:
    """Format an age like kubectl (``5s``, ``12m``, ``3h4m``, ``2d5h``, ``400d``)."""
    s = int(seconds)
    if s < 0:
        return "<invalid>"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        rest = s % 60
        return f"{minutes}m{rest}s" if rest else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h{rest}m" if rest else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    days = hours // 24
    if days < 8:
        rest = hours % 24
        return f"{days}d{rest}h" if rest else f"{days}d"
    if days < 365 * 2:
        return f"{days}d"
    return f"{days // 365}y"


def _age(timestamp: Any, now: datetime) -> str:
    if not isinstance(timestamp, str) or not timestamp:
        return "<unknown>"
    try:
        then = datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return "<unknown>"
    return human_duration((now - then).total_seconds())


def json_path(obj: Any, path: str) -> Any:
    """Evaluate a simple JSONPath (``.status.conditions[0].type``); None when absent."""
    node = obj
    for field, index in _SEGMENT.findall(path.strip().lstrip("$").strip("{}")):
        if field:
            node = node.get(field) if isinstance(node, dict) else None
        else:
            node = node[int(index)] if isinstance(node, list) and int(index) < len(node) else None
        if node is None:
            return None
    return node


def _column_def(
    name: str, type_: str, description: str = "", priority: int = 0, fmt: str = ""
) -> dict[str, Any]:
    return {
        "name": name,
        "type": type_,
        "format": fmt,
        "description": description,
        "priority": priority,
    }


def _pod_cells(obj: dict[str, Any]) -> list[Any]:
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    statuses = status.get("containerStatuses") or []
    ready = sum(1 for c in statuses if c.get("ready"))
    restarts = sum(int(c.get("restartCount", 0)) for c in statuses)
    phase = status.get("phase", "")
    reason = status.get("reason") or phase
    for c in statuses:
        waiting = (c.get("state") or {}).get("waiting")
        if waiting and waiting.get("reason"):
            reason = waiting["reason"]
    if obj.get("metadata", {}).get("deletionTimestamp"):
        reason = "Terminating"
    return [f"{ready}/{len(spec.get('containers') or [])}", reason, restarts]


BUILTIN_COLUMNS: dict[str, list[dict[str, Any]]] = {
    "/pods": [
        _column_def("Ready", "string", "The number of ready containers out of all containers."),
        _column_def("Status", "string", "The aggregate status of the containers in this pod."),
        _column_def(
            "Restarts",
            "string",
            "The number of times the containers in this pod have been restarted.",
        ),
    ],
    "/namespaces": [_column_def("Status", "string", "The status of the namespace")],
    "apps/deployments": [
        _column_def("Ready", "string", "Number of ready replicas out of desired."),
        _column_def("Up-to-date", "integer", "Total number of updated replicas."),
        _column_def("Available", "integer", "Total number of available replicas."),
    ],
    "/configmaps": [_column_def("Data", "string", "Data contains the configuration data.")],
    "/secrets": [
        _column_def("Type", "string", "Used to facilitate programmatic handling of secret data."),
        _column_def("Data", "string", "Data contains the secret data."),
    ],
    "/serviceaccounts": [
        _column_def("Secrets", "string", "Secrets is a list of the secrets in the same namespace."),
    ],
    "rbac.authorization.k8s.io/rolebindings": [
        _column_def("Role", "string", "RoleRef can reference a Role or a ClusterRole."),
    ],
    "rbac.authorization.k8s.io/clusterrolebindings": [
        _column_def("Role", "string", "RoleRef can only reference a ClusterRole."),
    ],
    "coordination.k8s.io/leases": [
        _column_def("Holder", "string", "holderIdentity contains the identity of the holder."),
    ],
}


def _builtin_cells(rt: ResourceType, obj: dict[str, Any]) -> list[Any]:
    status = obj.get("status") or {}
    if rt.storage_key == "/pods":
        return _pod_cells(obj)
    if rt.storage_key == "/namespaces":
        return [status.get("phase", "Active")]
    if rt.storage_key == "apps/deployments":
        desired = (obj.get("spec") or {}).get("replicas", 1)
        return [
            f"{status.get('readyReplicas', 0)}/{desired}",
            status.get("updatedReplicas", 0),
            status.get("availableReplicas", 0),
        ]
    key = rt.storage_key
    if key == "/configmaps":
        return [len(obj.get("data") or {}) + len(obj.get("binaryData") or {})]
    if key == "/secrets":
        return [obj.get("type", "Opaque"), len(obj.get("data") or {})]
    if key == "/serviceaccounts":
        return [len(obj.get("secrets") or [])]
    if key.startswith("rbac.authorization.k8s.io/") and key.endswith("rolebindings"):
        ref = obj.get("roleRef") or {}
        return [f"{ref.get('kind', '')}/{ref.get('name', '')}"]
    if key == "coordination.k8s.io/leases":
        return [(obj.get("spec") or {}).get("holderIdentity", "")]
    return []


def _cell(column: PrinterColumn, obj: dict[str, Any], now: datetime) -> Any:
    value = json_path(obj, column.json_path)
    if value is None:
        return None
    if column.type == "date":
        return _age(value, now)
    if column.type == "integer" and isinstance(value, (int, float)):
        return int(value)
    if column.type == "number" and isinstance(value, (int, float)):
        return value
    if column.type == "boolean" and isinstance(value, bool):
        return value
    if isinstance(value, (dict, list)):
        import json

        return json.dumps(value, separators=(",", ":"))
    return str(value) if not isinstance(value, bool) else str(value).lower()


def _extras(storage_key: str) -> list[tuple[str, str, str, int]]:
    try:
        from localkube.controllers.columns import EXTRA_COLUMNS
    except ImportError:  # pragma: no cover - the controllers package is optional here
        return []
    return list(EXTRA_COLUMNS.get(storage_key, []))


def _extra_cells(storage_key: str, obj: dict[str, Any]) -> list[Any]:
    try:
        from localkube.controllers.columns import extra_cells
    except ImportError:  # pragma: no cover
        return []
    try:
        return list(extra_cells(storage_key, obj))
    except Exception:  # a malformed object must not break a listing or a watch
        log.warning("cannot print columns of a %s object", storage_key, exc_info=True)
        return ["<unknown>"] * len(_extras(storage_key))


def _after_age(storage_key: str, name: str, priority: int) -> bool:
    # kube-apiserver prints wide columns after AGE, and a Node's VERSION too
    return priority > 0 or (storage_key == "/nodes" and name == "Version")


EVENT_KEYS = frozenset({"/events", "events.k8s.io/events"})

_EVENT_COLUMNS = [
    _column_def("Last Seen", "string", "Time since the event was last seen."),
    _column_def("Type", "string", "Type of this event (Normal, Warning)."),
    _column_def("Reason", "string", "Short, machine understandable reason for the event."),
    _column_def("Object", "string", "The object this event is about."),
    _column_def("Message", "string", "A human-readable description of the event."),
    _column_def("Name", "string", "Name of the event.", 1, "name"),
]


def _event_cells(obj: dict[str, Any], now: datetime) -> list[Any]:
    meta = obj.get("metadata") or {}
    regarding = obj.get("involvedObject") or obj.get("regarding") or {}
    series = obj.get("series") or {}
    seen = (
        obj.get("lastTimestamp")
        or series.get("lastObservedTime")
        or obj.get("eventTime")
        or meta.get("creationTimestamp")
    )
    if isinstance(seen, str) and "." in seen:
        seen = seen.split(".")[0] + "Z"
    kind = str(regarding.get("kind", "")).lower()
    return [
        _age(seen, now),
        obj.get("type", ""),
        obj.get("reason", ""),
        f"{kind}/{regarding.get('name', '')}",
        obj.get("message") or obj.get("note") or "",
        meta.get("name", ""),
    ]


def column_definitions(rt: ResourceType) -> list[dict[str, Any]]:
    """Return a Table's ``columnDefinitions`` for ``rt``.

    Built-in kinds: NAME, the kind's columns (:data:`BUILTIN_COLUMNS` and
    ``localkube.controllers.columns.EXTRA_COLUMNS``), AGE, then the ``-o wide`` ones;
    Events as kubectl shows them (LAST SEEN, TYPE, REASON, OBJECT, MESSAGE).
    """
    if rt.storage_key in EVENT_KEYS:
        return list(_EVENT_COLUMNS)
    columns = [_column_def("Name", "string", "Name must be unique within a namespace.", 0, "name")]
    age = _column_def(
        "Age",
        "date",
        "CreationTimestamp is a timestamp representing the server time when this object was created.",
    )
    if rt.printer_columns:
        columns += [
            _column_def(c.name, c.type, c.description, c.priority, c.format)
            for c in rt.printer_columns
        ]
        if not any(c.name.lower() == "age" for c in rt.printer_columns):
            columns.append(age)
        return columns
    columns += BUILTIN_COLUMNS.get(rt.storage_key, [])
    extras = _extras(rt.storage_key)
    columns += [
        _column_def(n, t, d, p) for n, t, d, p in extras if not _after_age(rt.storage_key, n, p)
    ]
    columns.append(age)
    columns += [
        _column_def(n, t, d, p) for n, t, d, p in extras if _after_age(rt.storage_key, n, p)
    ]
    return columns


def row(
    rt: ResourceType, obj: dict[str, Any], *, now: datetime, include_object: str
) -> dict[str, Any]:
    """Return one Table row for ``obj``, cells in :func:`column_definitions` order.

    Args:
        include_object: ``None``, ``Metadata`` (default: a PartialObjectMetadata) or
            ``Object`` (the whole object).
    """
    meta = obj.get("metadata") or {}
    cells: list[Any] = [meta.get("name", "")]
    age = _age(meta.get("creationTimestamp"), now)
    if rt.storage_key in EVENT_KEYS:
        cells = _event_cells(obj, now)
    elif rt.printer_columns:
        cells += [_cell(c, obj, now) for c in rt.printer_columns]
        if not any(c.name.lower() == "age" for c in rt.printer_columns):
            cells.append(age)
    else:
        cells += _builtin_cells(rt, obj)
        extras = _extras(rt.storage_key)
        values = _extra_cells(rt.storage_key, obj) if extras else []
        pairs = list(zip(extras, values, strict=False))
        cells += [v for (n, _, _, p), v in pairs if not _after_age(rt.storage_key, n, p)]
        cells.append(age)
        cells += [v for (n, _, _, p), v in pairs if _after_age(rt.storage_key, n, p)]
    result: dict[str, Any] = {"cells": cells}
    if include_object == "Object":
        result["object"] = obj
    elif include_object != "None":
        result["object"] = {
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": meta,
        }
    return result


def table(
    rt: ResourceType,
    items: list[dict[str, Any]],
    *,
    list_meta: dict[str, Any],
    now: datetime,
    include_object: str = "Metadata",
    with_columns: bool = True,
) -> dict[str, Any]:
    """Return a ``Table`` of ``items``.

    Args:
        rt: the listed type. items: objects. list_meta: the list's metadata
            (resourceVersion, continue). now: for ages. include_object: see :func:`row`.
        with_columns: include ``columnDefinitions`` (watch events after the first omit them).
    """
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta,
        "columnDefinitions": column_definitions(rt) if with_columns else [],
        "rows": [row(rt, obj, now=now, include_object=include_object) for obj in items],
    }
