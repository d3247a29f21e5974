"""Caches.endpoint_pod_uids: kept per Service between slice changes, never stale after one."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from krt.controlplane.caches import Caches

NS = "demo"


def _slice(name: str, rv: int, *ready_uids: str, service: str = "runtime-python") -> dict[str, Any]:
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": f"uid-{name}",
            "resourceVersion": str(rv),
            "labels": {"kubernetes.io/service-name": service},
        },
        "endpoints": [
            {"conditions": {"ready": True}, "targetRef": {"kind": "Pod", "uid": uid}}
            for uid in ready_uids
        ],
    }


def _caches() -> Caches:
    return Caches(None, (NS,), now=lambda: datetime.now(UTC), resync_seconds=None)  # type: ignore[arg-type]


def test_endpoint_uids_follow_every_slice_change() -> None:
    caches = _caches()
    slices = caches.slices.informers[0]
    assert caches.endpoint_pod_uids(NS, "python") == frozenset()
    slices._on_watch_event("ADDED", _slice("s1", 1, "a", "b"))
    first = caches.endpoint_pod_uids(NS, "python")
    assert first == frozenset({"a", "b"})
    assert caches.endpoint_pod_uids(NS, "python") is first  # unchanged slices: kept answer
    slices._on_watch_event("MODIFIED", _slice("s1", 2, "a"))  # b left the endpoints
    assert caches.endpoint_pod_uids(NS, "python") == frozenset({"a"})
    slices._on_watch_event("ADDED", _slice("s2", 3, "c"))  # a second slice of the Service
    assert caches.endpoint_pod_uids(NS, "python") == frozenset({"a", "c"})
    slices._on_watch_event("ADDED", _slice("other", 4, "z", service="runtime-other"))
    assert caches.endpoint_pod_uids(NS, "python") == frozenset({"a", "c"})
    assert caches.endpoint_pod_uids(NS, "other") == frozenset({"z"})
    slices._on_watch_event("DELETED", _slice("s1", 5, "a"))
    assert caches.endpoint_pod_uids(NS, "python") == frozenset({"c"})
    slices._on_watch_event("DELETED", _slice("s2", 6, "c"))
    assert caches.endpoint_pod_uids(NS, "python") == frozenset()
