"""The admission walk's shortcuts never change an answer.

* format checks are memoized per schema node (a status write repeats its timestamps): a
  value's answer is its own, whatever was checked before;
* the root's ``apiVersion``/``kind``/``metadata`` are shared with the request, not copied,
  and never changed; everything else is still a pruned copy;
* scalars skip the pruning and defaulting calls: defaults still fill missing and null
  fields at every depth.
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
            "properties": {
                "at": {"type": "string", "format": "date-time"},
                "mode": {"type": "string", "default": "fast"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "inner": {
                    "type": "object",
                    "properties": {"level": {"type": "integer", "default": 3}},
                },
            },
        },
    },
}


def cr(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w", "namespace": "ns", "labels": {"a": "b"}},
        "spec": spec,
    }


def errors_for(validator: CRDValidator, at: str) -> list[str]:
    _, errors = validator.admit(cr({"at": at}))
    return [e.field for e in errors]


def test_format_answers_are_per_value_whatever_was_checked_before() -> None:
    validator = CRDValidator(SCHEMA)
    good, bad = "2026-01-02T03:04:05.123456Z", "2026-13-02T03:04:05Z"
    assert errors_for(validator, good) == []
    assert errors_for(validator, bad) == ["spec.at"]
    assert errors_for(validator, good) == []  # answered from the memo
    assert errors_for(validator, bad) == ["spec.at"]  # so is a rejection
    assert errors_for(validator, "2026-02-30T00:00:00Z") == ["spec.at"]


def test_root_envelope_is_shared_and_unchanged_the_rest_is_a_pruned_copy() -> None:
    validator = CRDValidator(SCHEMA)
    body = cr({"tags": ["x"], "unknown": 1, "inner": {"level": None, "extra": True}})
    before = copy.deepcopy(body)
    admitted, errors = validator.admit(body)
    assert errors == []
    assert body == before  # the request is never changed
    assert admitted["metadata"] is body["metadata"]
    assert admitted["spec"] is not body["spec"]
    assert admitted["spec"]["tags"] is not body["spec"]["tags"]
    assert admitted["spec"] == {"tags": ["x"], "inner": {"level": 3}, "mode": "fast"}


def test_defaults_fill_missing_and_null_fields_at_every_depth() -> None:
    validator = CRDValidator(SCHEMA)
    admitted, errors = validator.admit(cr({"mode": None, "inner": {}}))
    assert errors == []
    assert admitted["spec"] == {"mode": "fast", "inner": {"level": 3}}
