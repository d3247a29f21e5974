"""Conditional status writes and Pod-condition patches against localkube."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import WIDGETS, widget

from krt.kube import errors
from krt.kube.client import Kube
from krt.kube.resources import PODS, ResourceRef
from krt.kube.status import merged_status, patch_pod_condition, write_status, write_status_patch


async def test_write_status_then_stale_write_conflicts(kube: Kube, widgets: ResourceRef) -> None:
    cached = await kube.create(WIDGETS, widget("w1"))
    first = await write_status(kube, WIDGETS, cached, {"phase": "Running"})
    assert first["status"] == {"phase": "Running"}
    # a second writer still holding the old cached copy must not overwrite
    with pytest.raises(errors.Conflict):
        await write_status(kube, WIDGETS, cached, {"phase": "Failed"})
    stored = await kube.get(WIDGETS, "w1", "default")
    assert stored["status"] == {"phase": "Running"}
    # re-reading and writing again succeeds
    second = await write_status(kube, WIDGETS, stored, {"phase": "Succeeded"})
    assert second["status"] == {"phase": "Succeeded"}
    assert "status" not in cached  # the caller's (cached) object is never modified


async def test_write_status_skips_noop(kube: Kube, widgets: ResourceRef) -> None:
    created = await kube.create(WIDGETS, widget("w1"))
    stored = await write_status(kube, WIDGETS, created, {"phase": "Running"})
    before = kube.requests
    again = await write_status(kube, WIDGETS, stored, {"phase": "Running"})
    assert kube.requests == before
    assert again == stored
    assert again is not stored


async def test_write_status_refuses_unconditional_write(kube: Kube) -> None:
    obj = {"metadata": {"name": "w", "namespace": "default"}}
    with pytest.raises(ValueError, match="resourceVersion is required"):
        await write_status(kube, WIDGETS, obj, {"phase": "Running"})
    assert kube.requests == 0


def test_merged_status_merges_without_touching_its_inputs() -> None:
    conditions = [{"type": "Scheduled", "status": "True"}]
    endpoint = {"url": "https://gw", "caBundle": "x"}
    target = {"phase": "Pending", "message": "waiting", "conditions": conditions, "e": endpoint}
    patch = {"phase": "Scheduled", "message": None, "e": {"caBundle": None}, "attempt": 1}
    before = (repr(target), repr(patch))
    merged = merged_status(target, patch)
    assert merged == {
        "phase": "Scheduled",
        "conditions": conditions,
        "e": {"url": "https://gw"},
        "attempt": 1,
    }
    assert (repr(target), repr(patch)) == before  # neither input changed
    assert merged["conditions"] is conditions  # unchanged values are shared, not copied
    assert merged_status(None, {"phase": "Running", "gone": None}) == {"phase": "Running"}
    # a mapping in the patch replaces a non-mapping value (RFC 7386)
    assert merged_status({"e": "text"}, {"e": {"a": 1, "b": None}}) == {"e": {"a": 1}}


async def test_write_status_patch_is_a_conditional_write(kube: Kube, widgets: ResourceRef) -> None:
    cached = await kube.create(WIDGETS, widget("w1"))
    first = await write_status_patch(kube, WIDGETS, cached, {"phase": "Running", "attempt": 1})
    assert first["status"] == {"phase": "Running", "attempt": 1}
    second = await write_status_patch(kube, WIDGETS, first, {"attempt": None, "reason": "R"})
    assert second["status"] == {"phase": "Running", "reason": "R"}
    with pytest.raises(errors.Conflict):  # a stale copy never overwrites
        await write_status_patch(kube, WIDGETS, first, {"phase": "Failed"})
    assert first["status"] == {"phase": "Running", "attempt": 1}  # the cached copy is kept
    before = kube.requests
    same = await write_status_patch(kube, WIDGETS, second, {"reason": "R"})
    assert kube.requests == before  # a patch that changes nothing sends nothing
    assert same == second


def _pod(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "containers": [{"name": "c", "image": "example.invalid/none"}],
            "readinessGates": [{"conditionType": "kruntimes.io/RuntimedReady"}],
        },
    }


async def test_pod_condition_patch_keeps_other_writers_conditions(kube: Kube) -> None:
    pod = await kube.create(PODS, _pod("p1"))
    kubelet_condition = {"type": "PodScheduled", "status": "True"}
    pod["status"] = {"phase": "Pending", "conditions": [kubelet_condition]}
    await kube.replace_status(PODS, pod)

    gate = {"type": "kruntimes.io/RuntimedReady", "status": "True", "reason": "Healthy"}
    patched = await patch_pod_condition(kube, "default", "p1", gate)
    by_type = {c["type"]: c for c in patched["status"]["conditions"]}
    assert by_type["PodScheduled"]["status"] == "True"
    assert by_type["kruntimes.io/RuntimedReady"]["reason"] == "Healthy"

    # another writer's change in between is kept; ours replaces only our own condition
    await patch_pod_condition(kube, "default", "p1", {"type": "PodScheduled", "status": "False"})
    await patch_pod_condition(
        kube, "default", "p1", {"type": "kruntimes.io/RuntimedReady", "status": "False"}
    )
    final = await kube.get(PODS, "p1", "default")
    by_type = {c["type"]: c for c in final["status"]["conditions"]}
    assert by_type["PodScheduled"]["status"] == "False"
    assert by_type["kruntimes.io/RuntimedReady"]["status"] == "False"
    assert len(final["status"]["conditions"]) == 2
    assert final["status"]["phase"] == "Pending"


async def test_pod_condition_patch_validates_condition(kube: Kube) -> None:
    with pytest.raises(ValueError, match="condition.type"):
        await patch_pod_condition(kube, "default", "p1", {"status": "True"})
    with pytest.raises(ValueError, match="status must be one of"):
        await patch_pod_condition(kube, "default", "p1", {"type": "X", "status": "yes"})
    assert kube.requests == 0
    with pytest.raises(errors.NotFound):
        await patch_pod_condition(kube, "default", "missing", {"type": "X", "status": "True"})
