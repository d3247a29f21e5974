"""Admission's fused null pruning gives exactly what pruning then full defaulting gives.

``CRDValidator.admit`` prunes with ``drop_nulls`` and then defaults only the subtrees that
hold a default (``SchemaNode.defaulting_below``); the reference below is the two complete
passes kube-apiserver's order describes. Both must agree on every value, nulls included,
for schemas with and without defaults, nullable fields, maps, lists and embedded resources.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from localkube.crd._defaulting import apply_defaults
from localkube.crd._pruning import prune
from localkube.crd._schema import parse_schema

LEAF = {"type": "string"}
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "plain": {
            "type": "object",
            "properties": {
                "a": LEAF,
                "b": {"type": "string", "nullable": True},
                "c": {
                    "type": "object",
                    "properties": {"d": LEAF, "e": {"type": "integer"}},
                },
                "list": {
                    "type": "array",
                    "items": {"type": "object", "properties": {"x": LEAF, "y": LEAF}},
                },
                "map": {"type": "object", "additionalProperties": LEAF},
            },
        },
        "withDefaults": {
            "type": "object",
            "properties": {
                "a": {"type": "string", "default": "A"},
                "b": {"type": "string", "nullable": True, "default": "B"},
                "c": {"type": "object", "properties": {"d": {"type": "integer", "default": 1}}},
                "n": LEAF,
                "list": {"type": "array", "items": {"type": "string", "default": "i"}},
                "map": {
                    "type": "object",
                    "additionalProperties": {
                        "type": "object",
                        "properties": {"v": {"type": "string", "default": "v"}, "w": LEAF},
                    },
                },
            },
        },
        "embedded": {
            "type": "object",
            "x-kubernetes-embedded-resource": True,
            "properties": {
                "apiVersion": LEAF,
                "kind": LEAF,
                "metadata": {"type": "object", "properties": {"name": LEAF, "x": LEAF}},
                "f": LEAF,
            },
        },
        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    },
}
ROOT = parse_schema(SCHEMA)
KEYS = ["a", "b", "c", "d", "e", "n", "x", "y", "v", "w", "f", "list", "map", "metadata", "name"]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from(["", "s"]),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.sampled_from(KEYS), children, max_size=4)
    ),
    max_leaves=12,
)
objects = st.fixed_dictionaries(
    {},
    optional={
        "apiVersion": st.just("g/v1"),
        "kind": st.just("K"),
        "metadata": st.just({"name": "n"}),
        "plain": json_values,
        "withDefaults": json_values,
        "embedded": json_values,
        "free": json_values,
    },
)


def reference(obj: dict[str, Any]) -> Any:
    pruned = prune(obj, ROOT, root=True)
    apply_defaults(pruned, ROOT, root=True)
    return pruned


def fused(obj: dict[str, Any]) -> Any:
    pruned = prune(obj, ROOT, root=True, drop_nulls=True)
    apply_defaults(pruned, ROOT, root=True, nulls_dropped=True)
    return pruned


@settings(max_examples=400, deadline=None)
@given(objects)
def test_fused_null_pruning_equals_prune_then_default(obj: dict[str, Any]) -> None:
    before = copy.deepcopy(obj)
    assert fused(obj) == reference(obj)
    assert obj == before  # the input is never modified


def test_nulls_without_default_are_dropped_nullable_and_defaulted_kept() -> None:
    obj = {
        "plain": {"a": None, "b": None, "c": {"d": None}, "list": [None, {"x": None}]},
        "withDefaults": {"a": None, "b": None, "n": None, "list": [None], "map": {"k": None}},
    }
    expected = {
        "plain": {"b": None, "c": {}, "list": [None, {}]},
        "withDefaults": {"a": "A", "b": None, "list": ["i"], "map": {}},
    }
    assert fused(obj) == expected
    assert reference(obj) == expected


def test_defaulting_below_marks_only_subtrees_with_defaults() -> None:
    assert not ROOT.properties["plain"].defaulting_below
    assert ROOT.properties["withDefaults"].defaulting_below
    assert ROOT.properties["embedded"].defaulting_below  # its envelope is copied verbatim
    assert ROOT.defaulting_below
