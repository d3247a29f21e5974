"""The same admission cases through localkube's CRDValidator (what `krt dev up` serves).

localkube must compile both CRDs (no unsupported schema or CEL), admit the valid cases,
reject the invalid ones with the same messages, and apply the Runtime defaults.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
from krtapi_crd_cases import INVALID_RUNS, INVALID_RUNTIMES, VALID_RUNS, VALID_RUNTIMES, Case
from krtapi_crd_harness import load_crd_schema, matches

crd = pytest.importorskip("localkube.crd", reason="localkube's CRD validator is not importable")

RUNS = "runs.kruntimes.io.yaml"
RUNTIMES = "runtimes.kruntimes.io.yaml"


@functools.cache
def _validator(filename: str) -> Any:
    return crd.CRDValidator(load_crd_schema(filename))


def _errors(filename: str, case: Case) -> list[str]:
    _, errors = _validator(filename).admit(case.obj, case.old)
    return [f"{e.field}: {e.message}" for e in errors]


@pytest.mark.parametrize("case", VALID_RUNS, ids=lambda c: c.id)
def test_localkube_admits_valid_run(case: Case) -> None:
    assert _errors(RUNS, case) == []


@pytest.mark.parametrize("case", INVALID_RUNS, ids=lambda c: c.id)
def test_localkube_rejects_invalid_run(case: Case) -> None:
    errors = _errors(RUNS, case)
    assert matches(errors, case.expect), errors


@pytest.mark.parametrize("case", VALID_RUNTIMES, ids=lambda c: c.id)
def test_localkube_admits_valid_runtime(case: Case) -> None:
    assert _errors(RUNTIMES, case) == []


@pytest.mark.parametrize("case", INVALID_RUNTIMES, ids=lambda c: c.id)
def test_localkube_rejects_invalid_runtime(case: Case) -> None:
    errors = _errors(RUNTIMES, case)
    assert matches(errors, case.expect), errors


def test_localkube_defaults_runtime_capacity_port_and_replicas() -> None:
    obj = {"spec": {"template": {"spec": {"containers": [{"name": "r", "image": "i"}]}}}}
    admitted, errors = _validator(RUNTIMES).admit(obj, None)
    assert errors == []
    assert admitted["spec"]["capacity"] == {"resources": {"runs": 2}}
    assert admitted["spec"]["port"] == 9091
    assert admitted["spec"]["replicas"] == 1


def test_localkube_keeps_explicit_capacity_without_runs() -> None:
    # The CRD default applies to an absent map only; runs then defaults in the Python
    # arithmetic (krt.api.resources.runtime_capacity).
    obj = {
        "spec": {
            "capacity": {"resources": {"example.com/gpu": 1}},
            "template": {"spec": {"containers": [{"name": "r", "image": "i"}]}},
        }
    }
    admitted, errors = _validator(RUNTIMES).admit(obj, None)
    assert errors == []
    assert admitted["spec"]["capacity"] == {"resources": {"example.com/gpu": 1}}
