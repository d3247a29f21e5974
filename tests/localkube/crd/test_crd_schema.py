"""CRD schemas localkube refuses: non-structural schemas, unsupported keywords, bad defaults."""

from __future__ import annotations

from typing import Any

import pytest

from localkube.crd import CRDValidator, UnsupportedSchema, structural_errors


def with_spec(spec: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": {"spec": spec}}


def test_structural_schema_has_no_errors() -> None:
    schema = with_spec({"type": "object", "properties": {"a": {"type": "string"}}})
    assert structural_errors(schema) == []
    CRDValidator(schema)


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ({"properties": {"a": {"type": "string"}}}, "properties[spec].type: Required value"),
        (
            {"type": "object", "properties": {"a": {}}},
            "properties[spec].properties[a].type: Required value",
        ),
        (
            {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
            "uniqueItems cannot be set to true",
        ),
        ({"type": "array"}, "items: Required value"),
        ({"type": "object", "$ref": "#/x"}, "$ref: Forbidden"),
        ({"type": "object", "patternProperties": {}}, "patternProperties: Forbidden"),
        (
            {
                "type": "object",
                "properties": {"a": {"type": "string"}},
                "additionalProperties": {"type": "string"},
            },
            "mutual exclusive",
        ),
        ({"type": "string", "anyOf": [{"type": "string"}]}, "anyOf[0].type: Forbidden"),
        ({"type": "string", "allOf": [{"default": "x"}]}, "allOf[0].default: Forbidden"),
        (
            {"type": "object", "x-kubernetes-preserve-unknown-fields": False},
            "must be true or undefined",
        ),
        ({"type": "strange"}, "type: Unsupported value"),
        ({"type": "string", "x-kubernetes-list-type": "set"}, "must only be used if type is array"),
        (
            {
                "type": "array",
                "x-kubernetes-list-type": "map",
                "items": {"type": "object", "properties": {"a": {"type": "string"}}},
            },
            "x-kubernetes-list-map-keys: Required value",
        ),
        (
            {
                "type": "array",
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["b"],
                "items": {"type": "object", "properties": {"a": {"type": "string"}}},
            },
            "entries must all be names of item properties",
        ),
        ({"type": "string", "pattern": "(unclosed"}, "must be a valid regular expression"),
        (
            {"type": "integer", "x-kubernetes-int-or-string": True},
            "must be empty with x-kubernetes-int-or-string",
        ),
    ],
)
def test_non_structural_or_unsupported_schema_rejected(spec: dict[str, Any], fragment: str) -> None:
    schema = with_spec(spec)
    errors = structural_errors(schema)
    assert any(fragment in e for e in errors), errors
    with pytest.raises(UnsupportedSchema, match="openAPIV3Schema") as info:
        CRDValidator(schema)
    assert fragment in str(info.value)


def test_list_map_keys_must_be_scalars() -> None:
    spec = {
        "type": "array",
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["k"],
        "items": {"type": "object", "properties": {"k": {"type": "object"}}},
    }
    errors = structural_errors(with_spec(spec))
    assert any(
        "items.properties[k].type: Invalid value: must be a scalar type" in e for e in errors
    )


def test_root_metadata_only_name_and_generate_name() -> None:
    allowed = {
        "type": "object",
        "properties": {
            "metadata": {
                "type": "object",
                "properties": {"name": {"type": "string", "maxLength": 10}},
            }
        },
    }
    assert structural_errors(allowed) == []
    forbidden = {
        "type": "object",
        "properties": {
            "metadata": {"type": "object", "properties": {"labels": {"type": "object"}}}
        },
    }
    with pytest.raises(
        UnsupportedSchema,
        match=r"must not specify anything other than name and generateName.*labels",
    ):
        CRDValidator(forbidden)


def test_int_or_string_and_preserve_unknown_need_no_type() -> None:
    schema = with_spec(
        {
            "type": "object",
            "properties": {
                "port": {"x-kubernetes-int-or-string": True},
                "blob": {"x-kubernetes-preserve-unknown-fields": True},
            },
        }
    )
    assert structural_errors(schema) == []


def test_every_problem_is_listed() -> None:
    schema = with_spec({"type": "object", "properties": {"a": {}, "b": {}}})
    assert len(structural_errors(schema)) == 2


def test_root_must_be_object() -> None:
    with pytest.raises(UnsupportedSchema, match='must be "object" at the root'):
        CRDValidator({"type": "string"})


def test_invalid_default_rejected() -> None:
    schema = with_spec(
        {"type": "object", "properties": {"n": {"type": "integer", "maximum": 3, "default": 5}}}
    )
    with pytest.raises(UnsupportedSchema, match=r"properties\[n\]\.default"):
        CRDValidator(schema)


def test_default_with_unknown_fields_rejected() -> None:
    schema = with_spec(
        {
            "type": "object",
            "properties": {"o": {"type": "object", "properties": {}, "default": {"x": 1}}},
        }
    )
    with pytest.raises(UnsupportedSchema, match="unknown fields"):
        CRDValidator(schema)


def test_validator_does_not_depend_on_later_schema_changes() -> None:
    schema = with_spec({"type": "object", "properties": {"a": {"type": "string"}}})
    validator = CRDValidator(schema)
    schema["properties"]["spec"]["properties"]["a"]["type"] = "integer"
    assert validator.admit({"spec": {"a": "text"}})[1] == []
