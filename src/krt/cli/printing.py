"""Output like kubectl's: tables (``NAME PHASE RUNTIME POD ATTEMPT AGE``) and ``-o`` formats.

Pure functions from objects (plain dicts as the API returns them) to text; the commands
only echo the result. ``-o json|yaml`` print the object (several objects as a ``v1 List``,
as kubectl does) without ``metadata.managedFields``; ``-o name`` prints
``run.kruntimes.io/<name>``; ``-o wide`` adds columns to the table. Ages use kubectl's
rounding (``45s``, ``3m12s``, ``25m``, ``5h3m``, ``2d``).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from enum import StrEnum
from typing import Any

import yaml

from krt.api.constants import GROUP, RUN_PLURAL, RUNTIME_PLURAL
from krt.api.errors import InvalidObjectError
from krt.api.times import parse_time

Obj = Mapping[str, Any]


class OutputFormat(StrEnum):
    """Values of ``-o/--output``."""

    TABLE = "table"
    WIDE = "wide"
    JSON = "json"
    YAML = "yaml"
    NAME = "name"


def human_age(seconds: float) -> str:
    """kubectl's short age: ``45s``, ``3m12s``, ``25m``, ``5h3m``, ``20h``, ``3d4h``, ``12d``.

    Args:
        seconds: elapsed seconds (negative values, from clock skew, count as 0).
    """
    total = max(0, int(seconds))
    minutes, hours, days = total // 60, total // 3600, total // 86400
    if total < 120:
        return f"{total}s"
    if minutes < 10:
        return f"{minutes}m{total % 60}s" if total % 60 else f"{minutes}m"
    if hours < 3:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if days < 8:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    if days < 365 * 2:
        return f"{days}d"
    return f"{days // 365}y"


def age(obj: Obj, now: datetime) -> str:
    """The object's age at ``now`` (``<unknown>`` without a creationTimestamp)."""
    stamp = (obj.get("metadata") or {}).get("creationTimestamp")
    if not isinstance(stamp, str):
        return "<unknown>"
    try:
        created = parse_time(stamp)
    except InvalidObjectError:
        return "<unknown>"
    return human_age((now - created).total_seconds())


def render_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns separated by three spaces, like kubectl (no trailing spaces)."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    lines = []
    for row in [list(headers), *rows]:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=True)]
        lines.append("   ".join(cells).rstrip())
    return "\n".join(lines)


def _status(obj: Obj) -> Mapping[str, Any]:
    status = obj.get("status")
    return status if isinstance(status, Mapping) else {}


def _spec(obj: Obj) -> Mapping[str, Any]:
    spec = obj.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def run_mode(obj: Obj) -> str:
    """``task`` or ``function`` (from ``spec.mode``)."""
    mode = _spec(obj).get("mode") or {}
    return "function" if isinstance(mode, Mapping) and "function" in mode else "task"


def run_phase(obj: Obj) -> str:
    """``status.phase``, ``Pending`` when unset."""
    return str(_status(obj).get("phase") or "Pending")


RUN_HEADERS = ("NAME", "PHASE", "RUNTIME", "POD", "ATTEMPT", "AGE")
RUN_WIDE_HEADERS = (*RUN_HEADERS, "MODE", "REASON", "ENDPOINT")


def run_row(obj: Obj, now: datetime, *, wide: bool = False) -> list[str]:
    """One table row of a Run."""
    status = _status(obj)
    row = [
        str((obj.get("metadata") or {}).get("name", "")),
        run_phase(obj),
        str(_spec(obj).get("runtime") or "<none>"),
        str(status.get("assignedPod") or "<none>"),
        str(status.get("attempt") or 0),
        age(obj, now),
    ]
    if wide:
        endpoint = status.get("endpoint") or {}
        row += [
            run_mode(obj),
            str(status.get("reason") or "<none>"),
            str(endpoint.get("url") or "<none>") if isinstance(endpoint, Mapping) else "<none>",
        ]
    return row


RUNTIME_HEADERS = ("NAME", "READY", "CAPACITY", "AVAILABLE", "AGE")
RUNTIME_WIDE_HEADERS = (*RUNTIME_HEADERS, "IMAGES")


def runtime_row(obj: Obj, now: datetime, *, wide: bool = False) -> list[str]:
    """One table row of a Runtime: ``READY`` is ready/desired Pods, ``CAPACITY`` per Pod."""
    spec, status = _spec(obj), _status(obj)
    desired = spec.get("replicas", 1)
    capacity = ((spec.get("capacity") or {}).get("resources") or {}).get("runs", 2)
    available = "Unknown"
    for condition in status.get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == "Available":
            available = str(condition.get("status", "Unknown"))
    row = [
        str((obj.get("metadata") or {}).get("name", "")),
        f"{status.get('readyReplicas') or 0}/{desired}",
        f"{capacity} runs/pod",
        available,
        age(obj, now),
    ]
    if wide:
        containers = ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
        row.append(",".join(str(c.get("image", "?")) for c in containers) or "<none>")
    return row


def _clean(obj: Obj) -> dict[str, Any]:
    data = copy.deepcopy(dict(obj))
    meta = data.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return data


def render_objects(
    objs: Sequence[Obj],
    fmt: OutputFormat,
    *,
    plural: str,
    now: datetime,
    single: bool,
) -> str:
    """Render Runs or Runtimes in ``fmt``.

    Args:
        objs: the objects.
        fmt: the ``-o`` format.
        plural: ``runs`` or ``runtimes`` (chooses the table and the ``-o name`` prefix).
        now: the wall-clock time ages are measured from.
        single: one object was asked for by name (json/yaml print it bare, not as a List).

    Returns:
        The text to print (no trailing newline).

    Raises:
        ValueError: unknown ``plural``.
    """
    if fmt in (OutputFormat.JSON, OutputFormat.YAML):
        data: Any
        if single and len(objs) == 1:
            data = _clean(objs[0])
        else:
            data = {"apiVersion": "v1", "kind": "List", "items": [_clean(o) for o in objs]}
        if fmt is OutputFormat.JSON:
            return json.dumps(data, indent=4, ensure_ascii=False)
        return yaml.safe_dump(data, sort_keys=False, allow_unicode=True).rstrip("\n")
    singular = {RUN_PLURAL: "run", RUNTIME_PLURAL: "runtime"}.get(plural)
    if singular is None:
        raise ValueError(f"unknown resource {plural!r}")
    if fmt is OutputFormat.NAME:
        return "\n".join(f"{singular}.{GROUP}/{o['metadata']['name']}" for o in objs)
    wide = fmt is OutputFormat.WIDE
    row: Callable[..., list[str]] = run_row if plural == RUN_PLURAL else runtime_row
    headers: tuple[str, ...]
    if plural == RUN_PLURAL:
        headers = RUN_WIDE_HEADERS if wide else RUN_HEADERS
    else:
        headers = RUNTIME_WIDE_HEADERS if wide else RUNTIME_HEADERS
    return render_table(headers, [row(o, now, wide=wide) for o in objs])
