"""String leaves are validated on a fast path that must report exactly what the general walk does.

``_validate_child`` checks a string under a plain ``string`` schema without building its
path unless something fails; these tests compare its errors with the general
``_validate`` for every combination of the string keywords and ``enum``, for object
properties, map values and list items.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from localkube.crd import _values
from localkube.crd._schema import parse_schema
from localkube.errors import FieldError

KEYWORDS: dict[str, Any] = {
    "maxLength": 3,
    "minLength": 2,
    "pattern": "^[a-c]+$",
    "format": "date-time",
    "enum": ["ab", "abc", "2024-01-01T00:00:00Z"],
}

string_schemas = st.fixed_dictionaries(
    {"type": st.just("string")},
    optional={k: st.just(v) for k, v in KEYWORDS.items()},
)
strings = st.sampled_from(["", "a", "ab", "abc", "abcd", "xy", "2024-01-01T00:00:00Z"]) | st.text(
    max_size=5
)


def general(value: Any, schema: dict[str, Any], path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    node = parse_schema({"type": "object", "properties": {"leaf": schema}}).properties["leaf"]
    _values._validate(value, node, path, errors)
    return errors


@settings(max_examples=300, deadline=None)
@given(string_schemas, strings | st.integers(0, 2) | st.none())
def test_property_fast_path_matches_general_walk(leaf: dict[str, Any], value: Any) -> None:
    node = parse_schema({"type": "object", "properties": {"s": leaf}})
    errors = _values.validate_value({"s": value}, node, "spec")
    expected = general(value, leaf, "spec.s")
    assert [(e.field, e.reason, e.message) for e in errors] == [
        (e.field, e.reason, e.message) for e in expected
    ]


@settings(max_examples=200, deadline=None)
@given(string_schemas, st.lists(strings, max_size=3), st.dictionaries(strings, strings, max_size=3))
def test_items_and_map_values_match_general_walk(
    leaf: dict[str, Any], items: list[str], values: dict[str, str]
) -> None:
    node = parse_schema(
        {
            "type": "object",
            "properties": {
                "list": {"type": "array", "items": leaf},
                "map": {"type": "object", "additionalProperties": leaf},
            },
        }
    )
    errors = _values.validate_value({"list": items, "map": values}, node, "")
    expected: list[FieldError] = []
    for index, item in enumerate(items):
        expected += general(item, leaf, f"list[{index}]")
    for key, item in values.items():
        expected += general(item, leaf, f"map.{key}")
    assert [(e.field, e.reason, e.message) for e in errors] == [
        (e.field, e.reason, e.message) for e in expected
    ]


def test_plain_string_flags() -> None:
    node = parse_schema(
        {
            "type": "object",
            "properties": {
                "plain": {"type": "string"},
                "checked": {"type": "string", "maxLength": 1},
                "intOrString": {"x-kubernetes-int-or-string": True},
                "junctor": {"type": "string", "anyOf": [{"maxLength": 1}, {"minLength": 3}]},
            },
        }
    )
    props = node.properties
    assert props["plain"].plain_string
    assert not props["plain"].string_checks
    assert props["checked"].plain_string
    assert props["checked"].string_checks
    assert not props["intOrString"].plain_string
    assert not props["junctor"].plain_string
    # a junctor's alternatives still apply on the general path
    errors = _values.validate_value({"junctor": "ab"}, node, "")
    assert any("anyOf" in e.message for e in errors)
