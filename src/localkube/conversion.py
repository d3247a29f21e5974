"""Serving one stored kind at several API versions or groups (pure functions).

Most kinds are stored once per ``group/plural`` and served at every version by rewriting
``apiVersion`` (the ``None`` conversion strategy of CRDs). Events are stored once for two
groups, as in kube-apiserver: ``events.k8s.io/v1`` Events are the core ``v1`` Events under
other field names, so an Event written through either API is listed and watched through
both. :data:`EVENT_FIELDS` is the field mapping Kubernetes uses (``regarding`` is
``involvedObject``, ``note`` is ``message``, ``deprecatedCount`` is ``count``, ...).
"""

from __future__ import annotations

from typing import Any

from localkube.resources import ResourceType

EVENT_FIELDS: dict[str, str] = {
    "regarding": "involvedObject",
    "note": "message",
    "deprecatedSource": "source",
    "deprecatedFirstTimestamp": "firstTimestamp",
    "deprecatedLastTimestamp": "lastTimestamp",
    "deprecatedCount": "count",
    "reportingController": "reportingComponent",
}
"""``events.k8s.io/v1`` field -> core ``v1`` Event field."""

_EVENT_FIELDS_BACK = {core: new for new, core in EVENT_FIELDS.items()}


def _rename(obj: dict[str, Any], names: dict[str, str], api_version: str) -> dict[str, Any]:
    result: dict[str, Any] = {"apiVersion": api_version}
    for key, value in obj.items():
        if key != "apiVersion":
            result[names.get(key, key)] = value
    return result


def to_view(rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    """Return a stored object as served at ``rt`` (a shallow copy when anything changes)."""
    if rt.conversion == "events":
        return _rename(obj, _EVENT_FIELDS_BACK, rt.api_version)
    if obj.get("apiVersion") == rt.api_version:
        return obj
    return {**obj, "apiVersion": rt.api_version}


def to_storage(rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    """Return an object received at ``rt`` in its stored form."""
    if rt.conversion == "events":
        return _rename(obj, EVENT_FIELDS, "v1")
    return obj
