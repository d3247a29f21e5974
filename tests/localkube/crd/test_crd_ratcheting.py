"""Validation ratcheting: an unchanged value is not validated again on update (finding F2).

kube-apiserver 1.30+ (``CRDValidationRatcheting``) skips schema checks and CEL rules without
``oldSelf`` on values equal to their correlated old value; transition rules still run. So a
status write, which keeps the stored ``spec``, must cost no ``spec`` rule: before the fix a
Run with 120 ``spec.env`` entries paid ~1.4 s of CEL on every status write.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from localkube.crd import CRDValidator
from localkube.crd import _cel_rules as cel_rules
from localkube.crd._schema import SchemaNode

RUN_CRD = Path(__file__).resolve().parents[3] / "charts/kruntimes/crds/runs.kruntimes.io.yaml"

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "properties": {
                "size": {"type": "integer", "maximum": 10},
                "items": {
                    "type": "array",
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["name"],
                    "items": {
                        "type": "object",
                        "required": ["name"],
                        "properties": {"name": {"type": "string"}, "v": {"type": "integer"}},
                        "x-kubernetes-validations": [{"rule": "self.v < 5", "message": "v < 5"}],
                    },
                },
                "fixed": {
                    "type": "string",
                    "x-kubernetes-validations": [
                        {"rule": "self != oldSelf", "message": "must change on update"}
                    ],
                },
            },
            "x-kubernetes-validations": [{"rule": "self.size < 5", "message": "size < 5"}],
        },
        "status": {"type": "object", "properties": {"phase": {"type": "string"}}},
    },
}


def obj(spec: dict[str, Any], status: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w", "namespace": "ns"},
        "spec": spec,
    }
    if status is not None:
        body["status"] = status
    return body


def messages(validator: CRDValidator, new: dict[str, Any], old: dict[str, Any]) -> list[str]:
    return [str(e) for e in validator.admit(new, old)[1]]


def test_unchanged_invalid_spec_is_not_reported_but_a_changed_one_is() -> None:
    # stored under an older, looser schema: both the schema bound and the CEL rule fail now
    stored = obj({"size": 20}, {"phase": "A"})
    validator = CRDValidator(SCHEMA)
    assert messages(validator, obj({"size": 20}, {"phase": "B"}), stored) == []
    assert messages(validator, obj({"size": 21}, {"phase": "B"}), stored) == [
        "spec.size: Invalid value: 21: spec.size in body should be less than or equal to 10",
        'spec: Invalid value: "object": size < 5',
    ]
    assert messages(validator, obj({"size": 7}), stored) == [
        'spec: Invalid value: "object": size < 5'
    ]


def test_list_map_entries_ratchet_one_by_one() -> None:
    stored = obj({"size": 1, "items": [{"name": "a", "v": 9}, {"name": "b", "v": 1}]})
    validator = CRDValidator(SCHEMA)
    changed = obj(
        {"size": 1, "items": [{"name": "b", "v": 2}, {"name": "a", "v": 9}, {"name": "c", "v": 7}]}
    )
    # "a" is unchanged (correlated by name, moved): ratcheted; the new "c" is checked
    assert messages(validator, changed, stored) == ['spec.items[2]: Invalid value: "object": v < 5']
    # a number is not a boolean: changing 1 to true is a change (and a type error)
    flipped = obj({"size": True, "items": [{"name": "a", "v": 9}]})
    assert messages(validator, flipped, obj({"size": 1, "items": [{"name": "a", "v": 9}]}))


def test_transition_rules_still_run_on_unchanged_values() -> None:
    stored = obj({"size": 1, "fixed": "x"})
    assert messages(CRDValidator(SCHEMA), obj({"size": 1, "fixed": "x"}), stored) == [
        'spec.fixed: Invalid value: "string": must change on update'
    ]


def _rules_under(node: SchemaNode) -> set[int]:
    found = {id(rule) for rule in node.rules}
    for child in (*node.properties.values(), node.items, node.additional):
        if isinstance(child, SchemaNode):
            found |= _rules_under(child)
    return found


@pytest.mark.parametrize("shared", [True, False], ids=["stored-spec", "equal-copy"])
def test_a_status_write_evaluates_no_spec_rule_but_transition_rules(
    monkeypatch: pytest.MonkeyPatch, shared: bool
) -> None:
    crd = yaml.safe_load(RUN_CRD.read_text(encoding="utf-8"))
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    env = [{"name": f"V{i}", "value": "v" * 1000} for i in range(120)]
    run = {
        "apiVersion": "kruntimes.io/v1alpha1",
        "kind": "Run",
        "metadata": {"name": "r", "namespace": "default"},
        "spec": {"runtime": "bash", "mode": {"task": {"args": ["true"]}}, "env": env},
    }
    stored, errors = CRDValidator(schema).admit(run)
    assert errors == []
    validator = CRDValidator(schema)  # no memo of earlier outcomes: every rule would run
    spec_rules = _rules_under(validator.root.properties["spec"])
    evaluated: list[Any] = []
    original = cel_rules._outcome

    def counting(rule: Any, activation: dict[str, Any], node: Any) -> Any:
        evaluated.append(rule)
        return original(rule, activation, node)

    monkeypatch.setattr(cel_rules, "_outcome", counting)
    write = {
        **stored,
        "spec": stored["spec"] if shared else copy.deepcopy(stored["spec"]),
        "status": {"phase": "Pending"},
    }
    written, errors = validator.admit(write, stored)
    assert errors == []
    assert written["status"]["phase"] == "Pending"
    spec_evaluated = [rule for rule in evaluated if id(rule) in spec_rules]
    assert spec_evaluated  # the immutability (transition) rules still ran ...
    assert all(rule.is_transition for rule in spec_evaluated)  # ... and nothing else
    # a real change of spec is validated: the env entry rule runs for the changed entry
    evaluated.clear()
    changed = copy.deepcopy(write)
    changed["spec"]["env"][5]["name"] = "1BAD"
    _, errors = validator.admit(changed, stored)
    assert any("C identifier" in str(e) for e in errors), errors
