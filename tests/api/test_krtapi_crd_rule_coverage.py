"""Every CEL rule in the CRDs has an admission case that fails without it.

For each ``x-kubernetes-validations`` rule: the invalid cases expecting its message exist,
and with that one rule removed at least one of them is admitted. So no rule is untested and
no rule is dead weight behind another.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from krtapi_crd_cases import INVALID_RUNS, INVALID_RUNTIMES, Case
from krtapi_crd_harness import Admission, load_crd_schema, matches


def _rules(
    node: dict[str, Any], path: tuple[Any, ...] = ()
) -> Iterator[tuple[tuple[Any, ...], int, str]]:
    for index, entry in enumerate(node.get("x-kubernetes-validations", [])):
        yield path, index, entry["message"]
    for name, sub in node.get("properties", {}).items():
        yield from _rules(sub, (*path, "properties", name))
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            yield from _rules(node[key], (*path, key))


def _params() -> list[Any]:
    params = []
    for filename, cases in (
        ("runs.kruntimes.io.yaml", INVALID_RUNS),
        ("runtimes.kruntimes.io.yaml", INVALID_RUNTIMES),
    ):
        for path, index, message in _rules(load_crd_schema(filename)):
            params.append(pytest.param(filename, path, index, message, cases, id=message[:60]))
    return params


@pytest.mark.parametrize(("filename", "path", "index", "message", "cases"), _params())
def test_rule_is_covered_and_needed(
    filename: str, path: tuple[Any, ...], index: int, message: str, cases: list[Case]
) -> None:
    mine = [c for c in cases if all(part in message for part in c.expect.split("&&"))]
    assert mine, f"no invalid case expects {message!r}"
    schema = copy.deepcopy(load_crd_schema(filename))
    node = schema
    for key in path:
        node = node[key]
    del node["x-kubernetes-validations"][index]
    without = Admission(schema)
    assert any(not matches(without.errors(c.obj, c.old), c.expect) for c in mine), (
        f"no case fails only because of {message!r}"
    )
