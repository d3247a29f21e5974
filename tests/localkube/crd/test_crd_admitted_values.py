"""A validator skips pruning, defaulting and schema checks of values it admitted before.

A status write carries the stored ``spec`` object itself; the validator that admitted it
shares it as is (same answers as walking it again), and nothing else gets that shortcut:
an equal copy, a value another validator admitted, a value from a rejected object.
"""

from __future__ import annotations

import copy
from typing import Any

from localkube.crd import CRDValidator

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "required": ["size"],
            "properties": {
                "size": {"type": "integer", "maximum": 10},
                "mode": {"type": "string", "default": "fast"},
            },
            "x-kubernetes-validations": [{"rule": "self.size != 7", "message": "no sevens"}],
        },
        "status": {
            "type": "object",
            "properties": {"phase": {"type": "string", "enum": ["Pending", "Done"]}},
        },
    },
}


def cr(spec: Any, status: Any = None) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w", "namespace": "ns"},
        "spec": spec,
    }
    if status is not None:
        obj["status"] = status
    return obj


def status_write(stored: dict[str, Any], status: Any) -> dict[str, Any]:
    """What the status subresource hands admission: the stored object, a new status."""
    return {**stored, "metadata": dict(stored["metadata"]), "status": status}


def test_a_status_write_shares_the_admitted_spec_and_answers_as_a_full_walk() -> None:
    validator = CRDValidator(SCHEMA)
    stored, errors = validator.admit(cr({"size": 3, "unknown": 1}))
    assert errors == []
    assert stored["spec"] == {"size": 3, "mode": "fast"}
    written, errors = validator.admit(status_write(stored, {"phase": "Done", "x": 1}), stored)
    assert errors == []
    assert written["spec"] is stored["spec"]  # shared, not pruned and copied again
    assert written["status"] == {"phase": "Done"}  # the new part is still pruned
    fresh, fresh_errors = CRDValidator(SCHEMA).admit(
        copy.deepcopy(status_write(stored, {"phase": "Done", "x": 1})), stored
    )
    assert (fresh, fresh_errors) == (written, errors)


def test_the_new_status_is_still_validated() -> None:
    validator = CRDValidator(SCHEMA)
    stored, _ = validator.admit(cr({"size": 3}))
    _, errors = validator.admit(status_write(stored, {"phase": "Lost"}), stored)
    assert errors[0].field == "status.phase"


def test_an_equal_copy_or_another_validators_value_is_walked_again() -> None:
    """Trust is by identity with a value this validator admitted, never by equality."""
    strict_spec = copy.deepcopy(SCHEMA["properties"]["spec"])
    strict_spec["properties"]["size"]["maximum"] = 2
    strict = CRDValidator({**SCHEMA, "properties": {**SCHEMA["properties"], "spec": strict_spec}})
    lenient = CRDValidator(SCHEMA)
    stored, errors = lenient.admit(cr({"size": 3}))
    assert errors == []
    # the same stored object under a changed schema (the CRD was updated): its unchanged
    # spec ratchets (kube-apiserver 1.30+), a changed one is checked anew
    _, errors = strict.admit(status_write(stored, {"phase": "Done"}), stored)
    assert errors == []
    _, errors = strict.admit(cr({"size": 4}), stored)
    assert [e.field for e in errors] == ["spec.size"]
    # an equal but separate spec: pruned and defaulted again (a fresh copy comes back)
    again, errors = lenient.admit(cr(copy.deepcopy(stored["spec"])))
    assert errors == []
    assert again["spec"] == stored["spec"]
    assert again["spec"] is not stored["spec"]


def test_values_of_a_rejected_object_are_not_remembered() -> None:
    validator = CRDValidator(SCHEMA)
    rejected, errors = validator.admit(cr({"size": 3}, {"phase": "Lost"}))
    assert errors[0].field == "status.phase"
    # its spec passed on its own, but the object did not: no shortcut for it
    _, errors = validator.admit(status_write(rejected, {"phase": "Done"}), rejected)
    assert errors == []
    reused, _ = validator.admit(status_write(rejected, {"phase": "Done"}), rejected)
    assert reused["spec"] is not rejected["spec"]


def test_cel_rules_still_run_on_a_shared_spec() -> None:
    """Only the schema walk is skipped: rules (their own memo) still answer."""
    validator = CRDValidator(SCHEMA)
    stored, errors = validator.admit(cr({"size": 3}))
    assert errors == []
    seven = {**stored, "spec": {**stored["spec"], "size": 7}}  # a stored object, unadmitted spec
    _, errors = validator.admit(seven)
    assert [e.message for e in errors] == ['Invalid value: "object": no sevens']
