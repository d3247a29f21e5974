"""Pruning of unknown fields and defaulting, as kube-apiserver applies them to CRs."""

from __future__ import annotations

import copy
from typing import Any

from localkube.crd import CRDValidator

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "properties": {
                "replicas": {"type": "integer", "default": 1},
                "mode": {
                    "type": "object",
                    "default": {},
                    "properties": {
                        "timeoutSeconds": {"type": "integer", "default": 300},
                        "name": {"type": "string"},
                    },
                },
                "env": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "name": {"type": "string"},
                            "value": {"type": "string", "default": ""},
                        },
                    },
                },
                "labels": {
                    "type": "object",
                    "additionalProperties": {
                        "type": "object",
                        "properties": {"v": {"type": "string", "default": "d"}},
                    },
                },
                "free": {
                    "type": "object",
                    "x-kubernetes-preserve-unknown-fields": True,
                    "properties": {
                        "known": {"type": "object", "properties": {"a": {"type": "string"}}}
                    },
                },
                "tolerant": {"type": "string", "nullable": True, "default": "x"},
                "strict": {"type": "string", "default": "y"},
            },
        },
        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    },
}


def admit(obj: dict[str, Any]) -> tuple[dict[str, Any], list[Any]]:
    return CRDValidator(SCHEMA).admit(obj)


def test_unknown_fields_pruned_everywhere_but_envelope() -> None:
    obj = {
        "apiVersion": "x.io/v1",
        "kind": "X",
        "metadata": {"name": "a", "labels": {"k": "v"}, "whatever": 1},
        "spec": {"replicas": 2, "bogus": True, "mode": {"name": "n", "extra": 1}},
        "top": "level",
    }
    new, errors = admit(obj)
    assert errors == []
    assert "top" not in new
    assert "bogus" not in new["spec"]
    assert new["spec"]["mode"] == {"name": "n", "timeoutSeconds": 300}
    assert new["metadata"] == {"name": "a", "labels": {"k": "v"}, "whatever": 1}
    assert (new["apiVersion"], new["kind"]) == ("x.io/v1", "X")


def test_input_is_not_modified() -> None:
    obj = {"spec": {"bogus": 1, "env": [{"name": "a"}]}}
    before = copy.deepcopy(obj)
    new, _ = admit(obj)
    assert obj == before
    assert new is not obj
    assert new["spec"]["env"] is not obj["spec"]["env"]


def test_preserve_unknown_keeps_unknown_but_prunes_inside_known() -> None:
    new, _ = admit({"spec": {"free": {"x": {"y": 1}, "known": {"a": "1", "b": "2"}}}})
    assert new["spec"]["free"] == {"x": {"y": 1}, "known": {"a": "1"}}


def test_status_preserved() -> None:
    new, _ = admit({"status": {"phase": "Running", "conditions": [{"type": "Ready"}]}})
    assert new["status"] == {"phase": "Running", "conditions": [{"type": "Ready"}]}


def test_defaults_for_missing_fields_and_nested_defaults_of_defaults() -> None:
    new, _ = admit({"spec": {}})
    assert new["spec"]["replicas"] == 1
    # the defaulted {} for mode gets its own nested defaults applied
    assert new["spec"]["mode"] == {"timeoutSeconds": 300}
    assert new["spec"]["strict"] == "y"


def test_no_defaults_for_absent_parent() -> None:
    new, _ = admit({})
    assert "spec" not in new


def test_defaults_inside_array_items_and_map_values() -> None:
    new, _ = admit(
        {"spec": {"env": [{"name": "a"}, {"name": "b", "value": "v"}], "labels": {"x": {}}}}
    )
    assert new["spec"]["env"] == [{"name": "a", "value": ""}, {"name": "b", "value": "v"}]
    assert new["spec"]["labels"] == {"x": {"v": "d"}}


def test_existing_values_win_over_defaults() -> None:
    new, _ = admit({"spec": {"replicas": 5, "mode": {"timeoutSeconds": 7}}})
    assert new["spec"]["replicas"] == 5
    assert new["spec"]["mode"]["timeoutSeconds"] == 7


def test_null_gets_default_unless_nullable() -> None:
    new, errors = admit({"spec": {"strict": None, "tolerant": None}})
    assert errors == []
    assert new["spec"]["strict"] == "y"
    assert new["spec"]["tolerant"] is None


def test_null_without_default_is_dropped() -> None:
    new, errors = admit({"spec": {"env": None, "mode": {"name": None}}})
    assert errors == []
    assert "env" not in new["spec"]
    assert "name" not in new["spec"]["mode"]


def test_defaults_are_copies() -> None:
    validator = CRDValidator(SCHEMA)
    first, _ = validator.admit({"spec": {}})
    first["spec"]["mode"]["timeoutSeconds"] = 1
    second, _ = validator.admit({"spec": {}})
    assert second["spec"]["mode"]["timeoutSeconds"] == 300


def test_additional_properties_true_keeps_and_false_prunes() -> None:
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {
                    "open": {"type": "object", "additionalProperties": True},
                    "closed": {"type": "object", "additionalProperties": False},
                },
            }
        },
    }
    new, errors = CRDValidator(schema).admit(
        {"spec": {"open": {"a": {"b": 1}}, "closed": {"a": 1}}}
    )
    assert errors == []
    assert new["spec"] == {"open": {"a": {"b": 1}}, "closed": {}}


def test_embedded_resource_keeps_its_envelope() -> None:
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {
                    "template": {
                        "type": "object",
                        "x-kubernetes-embedded-resource": True,
                        "properties": {
                            "spec": {"type": "object", "properties": {"x": {"type": "string"}}}
                        },
                    }
                },
            }
        },
    }
    template = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"x": "1", "y": 2},
        "junk": 1,
    }
    new, errors = CRDValidator(schema).admit({"spec": {"template": template}})
    assert errors == []
    assert new["spec"]["template"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"x": "1"},
    }
