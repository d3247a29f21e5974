"""Property tests: admission never raises on arbitrary JSON, and its output is stable."""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from localkube.crd import CRDValidator
from localkube.errors import FieldError

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=20,
)
field_names = st.sampled_from(
    ["runtime", "cancelRequested", "mode", "env", "labels", "port", "n", "x", "task"]
)
spec_like = st.dictionaries(field_names, json_values, max_size=6)

SCHEMA: dict[str, Any] = {
    "type": "object",
    "x-kubernetes-validations": [{"rule": "!has(self.spec) || size(self.spec) < 100"}],
    "properties": {
        "spec": {
            "type": "object",
            "x-kubernetes-validations": [
                {"rule": "!has(oldSelf.runtime) || has(self.runtime)", "message": "keep runtime"},
                {"rule": "has(self.mode) ? size(self.mode) > 0 : true"},
            ],
            "properties": {
                "runtime": {
                    "type": "string",
                    "maxLength": 5,
                    "pattern": "^[a-z]*$",
                    "x-kubernetes-validations": [{"rule": "self == oldSelf"}],
                },
                "cancelRequested": {
                    "type": "boolean",
                    "default": False,
                    "x-kubernetes-validations": [{"rule": "!(oldSelf && !self)"}],
                },
                "mode": {
                    "type": "object",
                    "x-kubernetes-validations": [
                        {"rule": "has(self.task) != has(self.__function__)"}
                    ],
                    "properties": {
                        "task": {
                            "type": "object",
                            "properties": {
                                "entrypoint": {
                                    "type": "string",
                                    "x-kubernetes-validations": [
                                        {"rule": "!self.contains('..') && !self.startsWith('/')"}
                                    ],
                                }
                            },
                        },
                        "function": {
                            "type": "object",
                            "default": {},
                            "properties": {"t": {"type": "integer", "default": 3}},
                        },
                    },
                },
                "env": {
                    "type": "array",
                    "maxItems": 3,
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["name"],
                    "items": {
                        "type": "object",
                        "required": ["name"],
                        "properties": {
                            "name": {"type": "string"},
                            "value": {
                                "type": "string",
                                "x-kubernetes-validations": [{"rule": "self == oldSelf"}],
                            },
                        },
                    },
                },
                "labels": {
                    "type": "object",
                    "maxProperties": 3,
                    "additionalProperties": {"type": "string", "enum": ["a", "b"]},
                },
                "port": {
                    "x-kubernetes-int-or-string": True,
                    "x-kubernetes-validations": [
                        {"rule": "type(self) == int ? self > 0 : self != ''"}
                    ],
                },
                "n": {
                    "type": "number",
                    "minimum": 0,
                    "exclusiveMaximum": True,
                    "maximum": 10,
                    "x-kubernetes-validations": [{"rule": "self * 2.0 < 15.0"}],
                },
                "x": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            },
        },
        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    },
}
VALIDATOR = CRDValidator(SCHEMA)


def check_result(obj: Any, result: tuple[dict[str, Any], list[FieldError]]) -> None:
    new, errors = result
    json.dumps(new)  # the admitted object is plain JSON
    assert all(isinstance(e, FieldError) and e.field and e.message for e in errors)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(obj=json_values, old=st.none() | json_values)
def test_admit_never_raises_on_any_json(obj: Any, old: Any) -> None:
    before = copy.deepcopy(obj)
    check_result(obj, VALIDATOR.admit(obj, old))
    assert obj == before


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=spec_like, old_spec=st.none() | spec_like)
def test_admit_never_raises_on_spec_shaped_json(
    spec: dict[str, Any], old_spec: dict[str, Any] | None
) -> None:
    obj = {
        "apiVersion": "kruntimes.io/v1alpha1",
        "kind": "Run",
        "metadata": {"name": "r"},
        "spec": spec,
    }
    old = None if old_spec is None else {**obj, "spec": old_spec}
    before = copy.deepcopy(obj)
    check_result(obj, VALIDATOR.admit(obj, old))
    assert obj == before


@settings(max_examples=100, deadline=None)
@given(spec=spec_like)
def test_admission_is_idempotent_for_valid_objects(spec: dict[str, Any]) -> None:
    obj = {
        "apiVersion": "kruntimes.io/v1alpha1",
        "kind": "Run",
        "metadata": {"name": "r"},
        "spec": spec,
    }
    first, errors = VALIDATOR.admit(obj)
    if errors:
        return
    second, again = VALIDATOR.admit(first)
    assert again == []
    assert second == first


def mostly(typed: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Well-typed values most of the time, arbitrary JSON sometimes."""
    return st.one_of(typed, typed, typed, json_values)


short_text = st.text(max_size=6)
typed_spec = st.fixed_dictionaries(
    {},
    optional={
        "runtime": mostly(short_text),
        "cancelRequested": mostly(st.booleans()),
        "mode": mostly(
            st.fixed_dictionaries(
                {},
                optional={
                    "task": st.fixed_dictionaries({}, optional={"entrypoint": mostly(short_text)}),
                    "function": st.fixed_dictionaries({}, optional={"t": mostly(st.integers())}),
                },
            )
        ),
        "env": mostly(
            st.lists(
                st.fixed_dictionaries(
                    {"name": st.sampled_from(["A", "B", "C"])}, optional={"value": short_text}
                ),
                max_size=4,
            )
        ),
        "labels": mostly(st.dictionaries(short_text, st.sampled_from(["a", "b"]), max_size=4)),
        "port": mostly(st.integers(min_value=-(2**64), max_value=2**64) | short_text),
        "n": mostly(st.floats(allow_nan=False, allow_infinity=False) | st.integers()),
        "x": json_values,
    },
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=typed_spec, old_spec=st.none() | typed_spec)
def test_admit_never_raises_on_mostly_well_typed_specs(
    spec: dict[str, Any], old_spec: dict[str, Any] | None
) -> None:
    obj = {
        "apiVersion": "kruntimes.io/v1alpha1",
        "kind": "Run",
        "metadata": {"name": "r"},
        "spec": spec,
    }
    old = None if old_spec is None else {**obj, "spec": old_spec}
    before = copy.deepcopy(obj)
    check_result(obj, VALIDATOR.admit(obj, old))
    assert obj == before
