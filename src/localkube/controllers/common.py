"""Helpers shared by the workload controllers (pure): selectors, owners, readiness, names."""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

#: kube's rand.SafeEncodeString alphabet (no vowels, no confusable digits).
SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def random_suffix(n: int = 5) -> str:
    """Return ``n`` random characters from :data:`SAFE_ALPHABET` (``generateName`` style)."""
    return "".join(secrets.choice(SAFE_ALPHABET) for _ in range(n))


def safe_encode(text: str) -> str:
    """kube's ``rand.SafeEncodeString``: map each byte onto :data:`SAFE_ALPHABET`."""
    return "".join(SAFE_ALPHABET[b % len(SAFE_ALPHABET)] for b in text.encode())


def fnv32a(data: bytes) -> int:
    """32-bit FNV-1a hash."""
    h = 0x811C9DC5
    for b in data:
        h ^= b
        h = (h * 0x01000193) & 0xFFFFFFFF
    return h


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """Whether ``labels`` match a LabelSelector (``matchLabels`` and ``matchExpressions``
    with In, NotIn, Exists, DoesNotExist). An empty or missing selector matches nothing,
    as for workload controllers.

    Raises:
        ValueError: for an unknown operator.
    """
    if not selector:
        return False
    ml = selector.get("matchLabels") or {}
    exprs = selector.get("matchExpressions") or []
    if not ml and not exprs:
        return False
    if any(labels.get(k) != v for k, v in ml.items()):
        return False
    for e in exprs:
        op, key, values = e["operator"], e["key"], e.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            raise ValueError(f"unknown label selector operator {op!r}")
    return True


def map_selector_matches(selector: Mapping[str, str] | None, labels: Mapping[str, str]) -> bool:
    """Whether ``labels`` match a Service-style equality selector (empty matches nothing)."""
    if not selector:
        return False
    return all(labels.get(k) == v for k, v in selector.items())


def controller_of(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """Return the ownerReference with ``controller: true``, if any."""
    for ref in obj.get("metadata", {}).get("ownerReferences", []) or []:
        if ref.get("controller"):
            return dict(ref)
    return None


def owner_reference(owner: Mapping[str, Any], *, api_version: str, kind: str) -> dict[str, Any]:
    """Return a controller ownerReference to ``owner``."""
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def condition(obj: Mapping[str, Any], ctype: str) -> Mapping[str, Any] | None:
    """Return the status condition of type ``ctype``."""
    for c in (obj.get("status") or {}).get("conditions", []) or []:
        if c.get("type") == ctype:
            return dict(c)
    return None


def is_terminating(obj: Mapping[str, Any]) -> bool:
    """Whether the object has a ``deletionTimestamp``."""
    return bool(obj.get("metadata", {}).get("deletionTimestamp"))


def is_active(pod: Mapping[str, Any]) -> bool:
    """A Pod that counts towards replicas: not terminal, not being deleted."""
    phase = (pod.get("status") or {}).get("phase")
    return phase not in ("Succeeded", "Failed") and not is_terminating(pod)


def is_ready(pod: Mapping[str, Any]) -> bool:
    """Whether the Pod's ``Ready`` condition is True."""
    c = condition(pod, "Ready")
    return bool(c and c.get("status") == "True")


def parse_time(value: str | None) -> float | None:
    """Parse ``2026-11-29T08:11:21Z`` to epoch seconds (None if absent or invalid)."""
    if not value:
        return None
    try:
        return datetime.strptime(value[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


def is_available(pod: Mapping[str, Any], min_ready_seconds: int, now: float) -> bool:
    """Ready for at least ``min_ready_seconds`` (measured from the Ready transition)."""
    if not is_ready(pod):
        return False
    if min_ready_seconds <= 0:
        return True
    c = condition(pod, "Ready") or {}
    since = parse_time(c.get("lastTransitionTime"))
    return since is not None and now - since >= min_ready_seconds


def now_rfc3339(now: float) -> str:
    """Format epoch seconds as a Kubernetes timestamp."""
    return datetime.fromtimestamp(int(now), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
