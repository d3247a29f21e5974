"""PATCH bodies: JSON merge patch, JSON patch and the simplified strategic merge patch."""

from __future__ import annotations

import pytest

from localkube.patching import PatchError, json_patch, merge_patch, strategic_merge_patch


def test_merge_patch_rfc7386() -> None:
    target = {"a": "b", "c": {"d": "e", "f": "g"}, "l": [1, 2]}
    patch = {"a": "z", "c": {"f": None}, "l": [3]}
    assert merge_patch(target, patch) == {"a": "z", "c": {"d": "e"}, "l": [3]}
    assert target["c"] == {"d": "e", "f": "g"}, "the target must not be modified"


def test_json_patch_ops_and_failed_test() -> None:
    doc = {"spec": {"items": ["a"]}}
    out = json_patch(
        doc,
        [
            {"op": "add", "path": "/spec/items/-", "value": "b"},
            {"op": "add", "path": "/spec/x", "value": 1},
            {"op": "test", "path": "/spec/x", "value": 1},
        ],
    )
    assert out == {"spec": {"items": ["a", "b"], "x": 1}}
    assert doc == {"spec": {"items": ["a"]}}
    with pytest.raises(PatchError):
        json_patch(doc, [{"op": "test", "path": "/spec/items/0", "value": "zzz"}])
    with pytest.raises(PatchError):
        json_patch(doc, [{"op": "remove", "path": "/nope"}])
    with pytest.raises(PatchError, match="list of operations"):
        json_patch(doc, {"op": "add"})


def test_strategic_merge_by_name_for_containers_and_env() -> None:
    pod = {
        "spec": {
            "containers": [
                {"name": "a", "image": "x", "env": [{"name": "K", "value": "1"}]},
                {"name": "b", "image": "y"},
            ],
            "tolerations": [{"key": "t1"}],
        }
    }
    patch = {
        "spec": {
            "containers": [
                {"name": "a", "image": "x2", "env": [{"name": "J", "value": "2"}]},
                {"name": "b", "$patch": "delete"},
                {"name": "c", "image": "z"},
            ],
            "tolerations": [{"key": "t2"}],
        }
    }
    out = strategic_merge_patch(pod, patch)
    assert out["spec"]["containers"] == [
        {
            "name": "a",
            "image": "x2",
            "env": [{"name": "K", "value": "1"}, {"name": "J", "value": "2"}],
        },
        {"name": "c", "image": "z"},
    ]
    assert out["spec"]["tolerations"] == [{"key": "t2"}], "lists without a merge key are replaced"


def test_strategic_merge_ports_key_and_finalizer_sets() -> None:
    svc = {"spec": {"ports": [{"port": 80, "name": "http"}]}, "metadata": {"finalizers": ["a"]}}
    out = strategic_merge_patch(
        svc,
        {
            "spec": {"ports": [{"port": 80, "name": "web"}, {"port": 443}]},
            "metadata": {"finalizers": ["b", "a"], "$deleteFromPrimitiveList/finalizers": ["a"]},
        },
    )
    assert out["spec"]["ports"] == [{"port": 80, "name": "web"}, {"port": 443}]
    assert out["metadata"]["finalizers"] == ["b"]


def test_strategic_merge_replace_directive_and_null_delete() -> None:
    out = strategic_merge_patch(
        {"a": {"x": 1, "y": 2}, "b": 1}, {"a": {"$patch": "replace", "z": 3}, "b": None}
    )
    assert out == {"a": {"z": 3}}
    with pytest.raises(PatchError, match="merge key"):
        strategic_merge_patch({"containers": [{"name": "a"}]}, {"containers": [{"image": "x"}]})
    with pytest.raises(PatchError, match="unknown"):
        strategic_merge_patch({}, {"a": {"$patch": "explode"}})
