"""Transition rules (``oldSelf``): when they run, correlation, optionalOldSelf."""

from __future__ import annotations

from typing import Any

import pytest

from localkube.crd import CRDValidator, UnsupportedSchema

IMMUTABLE = {"rule": "self == oldSelf", "message": "spec.runtime is immutable"}

RUN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "x-kubernetes-validations": [
                {
                    "rule": "!has(oldSelf.timeoutSeconds) || has(self.timeoutSeconds)",
                    "message": "timeoutSeconds cannot be removed",
                },
            ],
            "properties": {
                "runtime": {"type": "string", "x-kubernetes-validations": [IMMUTABLE]},
                "cancelRequested": {
                    "type": "boolean",
                    "x-kubernetes-validations": [
                        {
                            "rule": "!(oldSelf == true && self == false)",
                            "message": "cancelRequested can only change from false to true",
                        }
                    ],
                },
                "timeoutSeconds": {"type": "integer"},
                "env": {
                    "type": "array",
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["name"],
                    "items": {
                        "type": "object",
                        "required": ["name"],
                        "properties": {
                            "name": {"type": "string"},
                            "value": {
                                "type": "string",
                                "x-kubernetes-validations": [
                                    {
                                        "rule": "self == oldSelf",
                                        "message": "env values are immutable",
                                    }
                                ],
                            },
                        },
                    },
                },
                "labels": {
                    "type": "object",
                    "additionalProperties": {
                        "type": "string",
                        "x-kubernetes-validations": [
                            {"rule": "self == oldSelf", "message": "label fixed"}
                        ],
                    },
                },
            },
        }
    },
}


@pytest.fixture(scope="module")
def validator() -> CRDValidator:
    return CRDValidator(RUN_SCHEMA)


def run(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "kruntimes.io/v1alpha1",
        "kind": "Run",
        "metadata": {"name": "r"},
        "spec": spec,
    }


def messages(errors: list[Any]) -> list[tuple[str, str]]:
    return [(e.field, e.message) for e in errors]


def test_transition_rules_skipped_on_create(validator: CRDValidator) -> None:
    assert validator.admit(run({"runtime": "a", "cancelRequested": False}))[1] == []


def test_immutable_field(validator: CRDValidator) -> None:
    old = run({"runtime": "python"})
    assert validator.admit(run({"runtime": "python"}), old)[1] == []
    errors = validator.admit(run({"runtime": "bash"}), old)[1]
    assert messages(errors) == [
        ("spec.runtime", 'Invalid value: "string": spec.runtime is immutable')
    ]


def test_transition_rule_skipped_when_old_value_absent(validator: CRDValidator) -> None:
    # runtime was not set before: self == oldSelf is not evaluated (no old value)
    assert validator.admit(run({"runtime": "bash"}), run({}))[1] == []


def test_cancel_requested_only_false_to_true(validator: CRDValidator) -> None:
    assert validator.admit(run({"cancelRequested": True}), run({"cancelRequested": False}))[1] == []
    assert validator.admit(run({"cancelRequested": True}), run({"cancelRequested": True}))[1] == []
    errors = validator.admit(run({"cancelRequested": False}), run({"cancelRequested": True}))[1]
    assert messages(errors) == [
        (
            "spec.cancelRequested",
            'Invalid value: "boolean": cancelRequested can only change from false to true',
        )
    ]


def test_rule_on_spec_root_with_absent_fields(validator: CRDValidator) -> None:
    assert validator.admit(run({}), run({}))[1] == []
    assert validator.admit(run({"timeoutSeconds": 5}), run({}))[1] == []
    errors = validator.admit(run({}), run({"timeoutSeconds": 5}))[1]
    assert messages(errors) == [
        ("spec", 'Invalid value: "object": timeoutSeconds cannot be removed')
    ]


def test_map_list_items_correlate_by_key(validator: CRDValidator) -> None:
    old = run({"env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]})
    reordered = run(
        {
            "env": [
                {"name": "B", "value": "2"},
                {"name": "A", "value": "1"},
                {"name": "C", "value": "3"},
            ]
        }
    )
    assert validator.admit(reordered, old)[1] == []
    changed = run({"env": [{"name": "B", "value": "2"}, {"name": "A", "value": "9"}]})
    assert messages(validator.admit(changed, old)[1]) == [
        ("spec.env[1].value", 'Invalid value: "string": env values are immutable')
    ]


def test_map_values_correlate_by_key(validator: CRDValidator) -> None:
    old = run({"labels": {"a": "1"}})
    assert validator.admit(run({"labels": {"a": "1", "b": "2"}}), old)[1] == []
    assert messages(validator.admit(run({"labels": {"a": "2"}}), old)[1]) == [
        ("spec.labels[a]", 'Invalid value: "string": label fixed')
    ]


def test_old_self_below_atomic_list_rejected() -> None:
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {
                    "l": {
                        "type": "array",
                        "items": {"type": "string", "x-kubernetes-validations": [IMMUTABLE]},
                    }
                },
            }
        },
    }
    with pytest.raises(UnsupportedSchema, match="uncorrelatable"):
        CRDValidator(schema)


def optional_schema(rule: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {
                    "v": {
                        "type": "string",
                        "x-kubernetes-validations": [
                            {"rule": rule, "optionalOldSelf": True, "message": "bad transition"}
                        ],
                    }
                },
            }
        },
    }


def test_optional_old_self_runs_on_create() -> None:
    validator = CRDValidator(
        optional_schema("oldSelf.hasValue() ? self == oldSelf.value() : self == 'initial'")
    )
    assert validator.admit({"spec": {"v": "initial"}})[1] == []
    assert [e.field for e in validator.admit({"spec": {"v": "other"}})[1]] == ["spec.v"]
    assert validator.admit({"spec": {"v": "x"}}, {"spec": {"v": "x"}})[1] == []
    assert len(validator.admit({"spec": {"v": "y"}}, {"spec": {"v": "x"}})[1]) == 1
    # an update where the old object lacks the value: oldSelf is empty
    assert validator.admit({"spec": {"v": "initial"}}, {"spec": {}})[1] == []


def test_optional_old_self_or_value() -> None:
    validator = CRDValidator(optional_schema("self.size() >= oldSelf.orValue('').size()"))
    assert validator.admit({"spec": {"v": "ab"}})[1] == []
    assert len(validator.admit({"spec": {"v": "a"}}, {"spec": {"v": "abc"}})[1]) == 1


def test_optional_old_self_requires_old_self() -> None:
    with pytest.raises(UnsupportedSchema, match="optionalOldSelf"):
        CRDValidator(optional_schema("self == 'x'"))


def test_message_expression_may_use_old_self_in_transition_rules() -> None:
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {
                    "v": {
                        "type": "string",
                        "x-kubernetes-validations": [
                            {
                                "rule": "self == oldSelf",
                                "messageExpression": "'was ' + oldSelf + ', now ' + self",
                            }
                        ],
                    }
                },
            }
        },
    }
    errors = CRDValidator(schema).admit({"spec": {"v": "b"}}, {"spec": {"v": "a"}})[1]
    assert messages(errors) == [("spec.v", 'Invalid value: "string": was a, now b')]
