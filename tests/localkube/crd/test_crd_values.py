"""OpenAPI value validation of custom resources: kube-apiserver's fields, reasons, words."""

from __future__ import annotations

from typing import Any

import pytest

from localkube.crd import CRDValidator
from localkube.errors import FieldError


def spec_schema(**props: Any) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"spec": {"type": "object", "properties": props}},
    }


def admit_spec(props: dict[str, Any], spec: Any) -> list[FieldError]:
    validator = CRDValidator(spec_schema(**props))
    _, errors = validator.admit({"apiVersion": "x.io/v1", "kind": "X", "spec": spec})
    return errors


def only(errors: list[FieldError]) -> FieldError:
    assert len(errors) == 1, errors
    return errors[0]


def test_valid_object_has_no_errors() -> None:
    assert admit_spec({"a": {"type": "string"}}, {"a": "x"}) == []


@pytest.mark.parametrize(
    ("schema", "value", "actual"),
    [
        ({"type": "integer"}, "abc", "string"),
        ({"type": "string"}, 3, "integer"),
        ({"type": "boolean"}, "true", "string"),
        ({"type": "object"}, [1], "array"),
        ({"type": "array", "items": {"type": "string"}}, {"a": 1}, "object"),
        ({"type": "integer"}, 1.5, "number"),
        ({"type": "integer"}, 2**64, "number"),
    ],
)
def test_type_mismatch(schema: dict[str, Any], value: Any, actual: str) -> None:
    error = only(admit_spec({"f": schema}, {"f": value}))
    assert error.field == "spec.f"
    assert error.reason == "FieldValueTypeInvalid"
    assert (
        error.message
        == f'Invalid value: "{actual}": spec.f in body must be of type {schema["type"]}: "{actual}"'
    )


def test_number_accepts_integers() -> None:
    assert admit_spec({"f": {"type": "number"}}, {"f": 3}) == []


def test_required_missing() -> None:
    props = {
        "inner": {
            "type": "object",
            "required": ["name"],
            "properties": {"name": {"type": "string"}},
        }
    }
    error = only(admit_spec(props, {"inner": {}}))
    assert (error.field, error.reason, error.message) == (
        "spec.inner.name",
        "FieldValueRequired",
        "Required value",
    )


def test_null_for_required_non_nullable_is_dropped_then_required() -> None:
    props = {
        "inner": {
            "type": "object",
            "required": ["name"],
            "properties": {"name": {"type": "string"}},
        }
    }
    error = only(admit_spec(props, {"inner": {"name": None}}))
    assert error.field == "spec.inner.name"
    assert error.reason == "FieldValueRequired"


def test_nullable_keeps_null() -> None:
    validator = CRDValidator(spec_schema(n={"type": "string", "nullable": True}))
    obj, errors = validator.admit({"spec": {"n": None}})
    assert errors == []
    assert obj["spec"] == {"n": None}


def test_enum_unsupported_value() -> None:
    error = only(admit_spec({"mode": {"type": "string", "enum": ["a", "b"]}}, {"mode": "x"}))
    assert error.field == "spec.mode"
    assert error.reason == "FieldValueNotSupported"
    assert error.message == 'Unsupported value: "x": supported values: "a", "b"'


def test_enum_of_integers_quotes_json() -> None:
    error = only(admit_spec({"n": {"type": "integer", "enum": [1, 2]}}, {"n": 3}))
    assert error.message == 'Unsupported value: 3: supported values: "1", "2"'


def test_enum_does_not_confuse_bool_and_int() -> None:
    props = {"n": {"x-kubernetes-preserve-unknown-fields": True, "enum": [1]}}
    assert admit_spec(props, {"n": 1}) == []
    error = only(admit_spec(props, {"n": True}))
    assert error.message == 'Unsupported value: true: supported values: "1"'


def test_pattern() -> None:
    error = only(admit_spec({"foo": {"type": "string", "pattern": "^[a-z]+$"}}, {"foo": "abc1"}))
    assert error.field == "spec.foo"
    assert error.reason == "FieldValueInvalid"
    assert error.message == "Invalid value: \"abc1\": spec.foo in body should match '^[a-z]+$'"


def test_pattern_is_a_search_like_go_regexp() -> None:
    assert admit_spec({"foo": {"type": "string", "pattern": "b"}}, {"foo": "abc"}) == []


def test_max_length_counts_characters_not_bytes() -> None:
    props = {"name": {"type": "string", "maxLength": 3}}
    assert admit_spec(props, {"name": "héé"}) == []
    error = only(admit_spec(props, {"name": "abcd"}))
    assert (error.field, error.reason, error.message) == (
        "spec.name",
        "FieldValueTooLong",
        "Too long: may not be more than 3 bytes",
    )


def test_max_length_one_is_singular() -> None:
    error = only(admit_spec({"c": {"type": "string", "maxLength": 1}}, {"c": "ab"}))
    assert error.message == "Too long: may not be more than 1 byte"


def test_min_length() -> None:
    error = only(admit_spec({"name": {"type": "string", "minLength": 2}}, {"name": "a"}))
    assert error.reason == "FieldValueInvalid"
    assert error.message == 'Invalid value: "a": spec.name in body should be at least 2 chars long'


def test_items_paths_and_max_items() -> None:
    props = {"env": {"type": "array", "maxItems": 2, "items": {"type": "string", "maxLength": 2}}}
    errors = admit_spec(props, {"env": ["ok", "toolong", "x"]})
    assert [(e.field, e.reason) for e in errors] == [
        ("spec.env[1]", "FieldValueTooLong"),
        ("spec.env", "FieldValueTooMany"),
    ]
    assert errors[1].message == "Too many: 3: must have at most 2 items"


def test_min_items() -> None:
    props = {"env": {"type": "array", "minItems": 1, "items": {"type": "string"}}}
    error = only(admit_spec(props, {"env": []}))
    assert error.message == "Invalid value: 0: spec.env in body should have at least 1 items"


def test_nested_item_field_path() -> None:
    props = {
        "env": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name"],
                "properties": {"name": {"type": "string"}},
            },
        }
    }
    error = only(admit_spec(props, {"env": [{"name": "a"}, {"name": "b"}, {}]}))
    assert error.field == "spec.env[2].name"


@pytest.mark.parametrize(
    ("keywords", "value", "message"),
    [
        (
            {"maximum": 10},
            11,
            "Invalid value: 11: spec.n in body should be less than or equal to 10",
        ),
        (
            {"maximum": 10, "exclusiveMaximum": True},
            10,
            "Invalid value: 10: spec.n in body should be less than 10",
        ),
        (
            {"minimum": 1},
            0,
            "Invalid value: 0: spec.n in body should be greater than or equal to 1",
        ),
        (
            {"minimum": 1, "exclusiveMinimum": True},
            1,
            "Invalid value: 1: spec.n in body should be greater than 1",
        ),
        (
            {"minimum": 0.5},
            0,
            "Invalid value: 0: spec.n in body should be greater than or equal to 0.5",
        ),
        ({"multipleOf": 3}, 4, "Invalid value: 4: spec.n in body should be a multiple of 3"),
    ],
)
def test_numeric_bounds(keywords: dict[str, Any], value: int, message: str) -> None:
    error = only(admit_spec({"n": {"type": "number", **keywords}}, {"n": value}))
    assert (error.field, error.reason, error.message) == ("spec.n", "FieldValueInvalid", message)


def test_numeric_bounds_inclusive_edges_pass() -> None:
    assert admit_spec({"n": {"type": "integer", "minimum": 1, "maximum": 10}}, {"n": 10}) == []
    assert admit_spec({"n": {"type": "integer", "minimum": 1, "maximum": 10}}, {"n": 1}) == []


def test_min_and_max_properties() -> None:
    props = {
        "m": {"type": "object", "maxProperties": 1, "additionalProperties": {"type": "string"}}
    }
    error = only(admit_spec(props, {"m": {"a": "1", "b": "2"}}))
    assert (error.reason, error.message) == (
        "FieldValueTooMany",
        "Too many: 2: must have at most 1 item",
    )
    props = {
        "m": {"type": "object", "minProperties": 1, "additionalProperties": {"type": "string"}}
    }
    error = only(admit_spec(props, {"m": {}}))
    assert error.message == "Invalid value: 1: spec.m in body should have at least 1 properties"


def test_additional_properties_schema_validates_values() -> None:
    props = {
        "labels": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 2}}
    }
    error = only(admit_spec(props, {"labels": {"ok": "1", "bad": "123"}}))
    assert error.field == "spec.labels.bad"


@pytest.mark.parametrize(
    ("fmt", "good", "bad"),
    [
        ("date-time", "2024-02-29T10:00:00Z", "2024-02-30T10:00:00Z"),
        ("date-time", "2024-01-01T10:00:00.123+02:00", "yesterday"),
        ("date", "2024-01-31", "2024-13-01"),
        ("byte", "aGVsbG8=", "not base64!"),
        ("uuid", "123e4567-e89b-12d3-a456-426614174000", "123"),
        ("ipv4", "10.0.0.1", "10.0.0.256"),
        ("ipv6", "::1", "1.2.3.4"),
        ("cidr", "10.0.0.0/8", "10.0.0.0"),
        ("duration", "1h30m", "soon"),
        ("hostname", "a.example.com", "-bad-"),
    ],
)
def test_string_formats(fmt: str, good: str, bad: str) -> None:
    props = {"v": {"type": "string", "format": fmt}}
    assert admit_spec(props, {"v": good}) == []
    error = only(admit_spec(props, {"v": bad}))
    assert error.reason == "FieldValueTypeInvalid"
    assert error.message == f'Invalid value: "{bad}": spec.v in body must be of type {fmt}: "{bad}"'


def test_int32_format_is_not_range_checked_like_kubernetes() -> None:
    assert admit_spec({"n": {"type": "integer", "format": "int32"}}, {"n": 2**40}) == []


def test_int_or_string() -> None:
    props = {"port": {"x-kubernetes-int-or-string": True}}
    assert admit_spec(props, {"port": 80}) == []
    assert admit_spec(props, {"port": "http"}) == []
    error = only(admit_spec(props, {"port": True}))
    assert error.message == (
        'Invalid value: "boolean": spec.port in body must be of type integer,string: "boolean"'
    )


def test_preserve_unknown_fields_accepts_anything() -> None:
    props = {"extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}
    assert admit_spec(props, {"extra": {"a": [1, {"b": None}]}}) == []


def test_list_type_set_duplicates() -> None:
    props = {
        "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}}
    }
    error = only(admit_spec(props, {"tags": ["a", "b", "a"]}))
    assert (error.field, error.reason, error.message) == (
        "spec.tags[2]",
        "FieldValueDuplicate",
        'Duplicate value: "a"',
    )


def test_list_type_map_duplicate_keys() -> None:
    props = {
        "env": {
            "type": "array",
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["name"],
            "items": {
                "type": "object",
                "required": ["name"],
                "properties": {"name": {"type": "string"}, "value": {"type": "string"}},
            },
        }
    }
    errors = admit_spec(props, {"env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]})
    error = only(errors)
    assert (error.field, error.reason, error.message) == (
        "spec.env[1]",
        "FieldValueDuplicate",
        'Duplicate value: {"name":"A"}',
    )


def test_list_type_map_keys_compare_as_json_values() -> None:
    """String keys (the set shortcut) and other keys: "1", 1 and true are all different."""
    props = {
        "ports": {
            "type": "array",
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["name", "port"],
            "items": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "port": {"x-kubernetes-int-or-string": True},
                },
            },
        }
    }
    distinct = [
        {"name": "a", "port": "1"},
        {"name": "a", "port": 1},
        {"name": "a"},
        {"name": "b", "port": "1"},
        {"port": 2},
    ]
    assert admit_spec(props, {"ports": distinct}) == []
    twice = [*distinct, {"name": "a", "port": 1}, {"name": "a", "port": "1"}, {"name": "a"}]
    errors = admit_spec(props, {"ports": twice})
    assert [(e.field, e.message) for e in errors] == [
        ("spec.ports[5]", 'Duplicate value: {"name":"a","port":1}'),
        ("spec.ports[6]", 'Duplicate value: {"name":"a","port":"1"}'),
        ("spec.ports[7]", 'Duplicate value: {"name":"a","port":null}'),
    ]


def test_list_type_atomic_allows_duplicates() -> None:
    props = {
        "l": {"type": "array", "x-kubernetes-list-type": "atomic", "items": {"type": "string"}}
    }
    assert admit_spec(props, {"l": ["a", "a"]}) == []


def test_map_type_is_accepted() -> None:
    props = {
        "sel": {
            "type": "object",
            "x-kubernetes-map-type": "atomic",
            "additionalProperties": {"type": "string"},
        }
    }
    assert admit_spec(props, {"sel": {"a": "b"}}) == []


def test_embedded_resource_needs_api_version_and_kind() -> None:
    props = {
        "template": {
            "type": "object",
            "x-kubernetes-embedded-resource": True,
            "x-kubernetes-preserve-unknown-fields": True,
        }
    }
    errors = admit_spec(props, {"template": {"metadata": {"name": "x"}}})
    assert [(e.field, e.message) for e in errors] == [
        ("spec.template.apiVersion", "Required value: must not be empty"),
        ("spec.template.kind", "Required value: must not be empty"),
    ]
    ok = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}, "spec": {}}
    assert admit_spec(props, {"template": ok}) == []


def test_one_of_any_of_all_of_not() -> None:
    props = {
        "v": {
            "type": "string",
            "anyOf": [{"pattern": "^a"}, {"pattern": "^b"}],
        }
    }
    assert admit_spec(props, {"v": "abc"}) == []
    errors = admit_spec(props, {"v": "cde"})
    assert errors[0].field == "<nil>"
    assert (
        errors[0].message == 'Invalid value: "": "spec.v" must validate at least one schema (anyOf)'
    )
    assert errors[1].field == "spec.v"

    one = {"v": {"type": "integer", "oneOf": [{"minimum": 0}, {"minimum": 5}]}}
    assert admit_spec(one, {"v": 1}) == []
    errors = admit_spec(one, {"v": 7})
    assert errors[0].message.endswith(
        "must validate one and only one schema (oneOf). Found 2 valid alternatives"
    )

    every = {"v": {"type": "integer", "allOf": [{"minimum": 0}, {"maximum": 5}]}}
    errors = admit_spec(every, {"v": 9})
    assert [e.field for e in errors] == ["spec.v", "<nil>"]
    assert errors[1].message == 'Invalid value: "": "spec.v" must validate all the schemas (allOf)'

    negated = {"v": {"type": "string", "not": {"enum": ["forbidden"]}}}
    assert admit_spec(negated, {"v": "fine"}) == []
    error = only(admit_spec(negated, {"v": "forbidden"}))
    assert error.message == 'Invalid value: "": "spec.v" must not validate the schema (not)'


def test_root_metadata_only_name_checked() -> None:
    schema = {
        "type": "object",
        "properties": {
            "metadata": {
                "type": "object",
                "properties": {"name": {"type": "string", "maxLength": 5}},
            },
        },
    }
    validator = CRDValidator(schema)
    obj, errors = validator.admit(
        {
            "apiVersion": "x.io/v1",
            "kind": "X",
            "metadata": {"name": "toolong", "labels": {"a": "b"}},
        }
    )
    assert [(e.field, e.reason) for e in errors] == [("metadata.name", "FieldValueTooLong")]
    assert obj["metadata"] == {"name": "toolong", "labels": {"a": "b"}}


def test_non_object_body_is_a_type_error_not_an_exception() -> None:
    validator = CRDValidator(spec_schema(a={"type": "string"}))
    _, errors = validator.admit([1, 2])  # type: ignore[arg-type]
    assert errors[0].reason == "FieldValueTypeInvalid"


def test_enum_of_mixed_types_keeps_json_types_apart() -> None:
    schema = {"a": {"x-kubernetes-int-or-string": True, "enum": ["1", 2]}}
    validator = CRDValidator(spec_schema(**schema))
    for good in ("1", 2):
        assert validator.admit({"spec": {"a": good}})[1] == []
    for bad in (1, "2"):
        error = only(validator.admit({"spec": {"a": bad}})[1])
        assert error.reason == "FieldValueNotSupported"


def test_pattern_results_are_memoized_and_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    from localkube.crd import _values

    monkeypatch.setattr(_values, "MAX_PATTERN_RESULTS", 2)
    validator = CRDValidator(spec_schema(a={"type": "string", "pattern": "^[a-z]+$"}))
    node = validator.root.properties["spec"].properties["a"]
    for _ in range(2):  # the second round is answered from the memo, with the same errors
        assert validator.admit({"spec": {"a": "abc"}})[1] == []
        error = only(validator.admit({"spec": {"a": "ABC"}})[1])
        assert error.message == "Invalid value: \"ABC\": spec.a in body should match '^[a-z]+$'"
    assert node.pattern_results == {"abc": True, "ABC": False}
    validator.admit({"spec": {"a": "xyz"}})
    assert node.pattern_results == {"xyz": True}  # full: cleared, then kept
    assert only(validator.admit({"spec": {"a": "x" * 300 + "!"}})[1]).field == "spec.a"
    assert "x" * 300 + "!" not in node.pattern_results  # long values are not kept
