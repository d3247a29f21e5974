"""The Run-like schema end to end, and the admission cost (printed, not asserted tightly)."""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest

from localkube.crd import CRDValidator
from localkube.crd._rule_cache import RuleResultCache

HANDLER = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\.[A-Za-z_][A-Za-z0-9_]*$"
HANDLER_RULE = "self.matches('" + HANDLER.replace("\\", "\\\\") + "')"

RUN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "required": ["runtime", "mode"],
            "x-kubernetes-validations": [
                {
                    "rule": "!has(oldSelf.cancelRequested) || !oldSelf.cancelRequested"
                    " || (has(self.cancelRequested) && self.cancelRequested)",
                    "message": "cancelRequested can only change from false to true",
                },
            ],
            "properties": {
                "runtime": {
                    "type": "string",
                    "maxLength": 63,
                    "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
                    "x-kubernetes-validations": [
                        {"rule": "self == oldSelf", "message": "spec.runtime is immutable"}
                    ],
                },
                "cancelRequested": {
                    "type": "boolean",
                    "default": False,
                    "x-kubernetes-validations": [
                        {
                            "rule": "!(oldSelf == true && self == false)",
                            "message": "cancelRequested may only change from false to true",
                        }
                    ],
                },
                "mode": {
                    "type": "object",
                    "x-kubernetes-validations": [
                        {
                            "rule": "has(self.task) != has(self.__function__)",
                            "message": "exactly one of task or function must be set",
                        }
                    ],
                    "properties": {
                        "task": {
                            "type": "object",
                            "required": ["entrypoint"],
                            "properties": {
                                "entrypoint": {
                                    "type": "string",
                                    "maxLength": 2048,
                                    "x-kubernetes-validations": [
                                        {
                                            "rule": "!self.contains('..')",
                                            "message": "must not contain '..'",
                                        },
                                        {
                                            "rule": "!self.startsWith('/')",
                                            "message": "must be relative",
                                        },
                                        {"rule": "size(self) <= 2048"},
                                    ],
                                },
                                "args": {
                                    "type": "array",
                                    "maxItems": 64,
                                    "items": {"type": "string"},
                                },
                                "timeoutSeconds": {"type": "integer", "minimum": 1, "default": 300},
                            },
                        },
                        "function": {
                            "type": "object",
                            "properties": {
                                "handler": {
                                    "type": "string",
                                    "x-kubernetes-validations": [
                                        {
                                            "rule": HANDLER_RULE,
                                            "message": "handler must be module.function",
                                        }
                                    ],
                                },
                                "idleTimeoutSeconds": {"type": "integer", "default": 600},
                            },
                        },
                    },
                },
                "env": {
                    "type": "array",
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["name"],
                    "items": {
                        "type": "object",
                        "required": ["name"],
                        "properties": {"name": {"type": "string"}, "value": {"type": "string"}},
                    },
                },
            },
        },
        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    },
}


def run_object(name: str = "r1", entrypoint: str = "main.py") -> dict[str, Any]:
    """A valid task Run."""
    return {
        "apiVersion": "kruntimes.io/v1alpha1",
        "kind": "Run",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "runtime": "python",
            "mode": {"task": {"entrypoint": entrypoint, "args": ["a", "b"]}},
            "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
        },
    }


@pytest.fixture(scope="module")
def validator() -> CRDValidator:
    return CRDValidator(RUN_SCHEMA)


def test_valid_run_is_defaulted(validator: CRDValidator) -> None:
    new, errors = validator.admit(run_object())
    assert errors == []
    assert new["spec"]["cancelRequested"] is False
    assert new["spec"]["mode"]["task"]["timeoutSeconds"] == 300


@pytest.mark.parametrize(
    ("entrypoint", "message"),
    [
        ("../x.py", "must not contain '..'"),
        ("/abs.py", "must be relative"),
    ],
)
def test_entrypoint_rules(validator: CRDValidator, entrypoint: str, message: str) -> None:
    errors = validator.admit(run_object(entrypoint=entrypoint))[1]
    assert [(e.field, e.message) for e in errors] == [
        ("spec.mode.task.entrypoint", f'Invalid value: "string": {message}')
    ]


def test_function_handler_rule(validator: CRDValidator) -> None:
    obj = run_object()
    obj["spec"]["mode"] = {"function": {"handler": "pkg.mod.handle"}}
    assert validator.admit(obj)[1] == []
    obj["spec"]["mode"] = {"function": {"handler": "nodots"}}
    errors = validator.admit(obj)[1]
    assert [(e.field, e.message) for e in errors] == [
        ("spec.mode.function.handler", 'Invalid value: "string": handler must be module.function')
    ]


def test_status_update_keeps_spec_rules(validator: CRDValidator) -> None:
    old, _ = validator.admit(run_object())
    update = copy.deepcopy(old)
    update["status"] = {"phase": "Running"}
    assert validator.admit(update, old)[1] == []
    update["spec"]["runtime"] = "bash"
    errors = validator.admit(update, old)[1]
    assert [(e.field, e.message) for e in errors] == [
        ("spec.runtime", 'Invalid value: "string": spec.runtime is immutable')
    ]


def test_cached_outcomes_respect_path_and_old_value() -> None:
    validator = CRDValidator(RUN_SCHEMA)
    old, _ = validator.admit(run_object())
    cancelled = copy.deepcopy(old)
    cancelled["spec"]["cancelRequested"] = True
    for _ in range(2):  # the second round is answered from the cache
        assert validator.admit(cancelled, old)[1] == []
        errors = validator.admit(old, cancelled)[1]
        assert sorted(e.field for e in errors) == ["spec", "spec.cancelRequested"]


def test_cache_is_bounded() -> None:
    cache = RuleResultCache(max_entries=2)
    for index in range(5):
        cache.put((index, "a", ""), None)
    assert len(cache) == 2
    assert (4, "a", "") in cache
    assert (0, "a", "") not in cache


def test_admission_cost_on_a_run(validator: CRDValidator) -> None:
    """Print the cost of admitting a Run (the API server's budget is 1 ms per write)."""
    rounds = 200
    objects = [run_object(name=f"r{i}", entrypoint=f"main{i}.py") for i in range(rounds)]
    started = time.perf_counter()
    stored = [validator.admit(obj)[0] for obj in objects]
    cold_create = (time.perf_counter() - started) / rounds
    updates = []
    for index, obj in enumerate(stored):
        update = copy.deepcopy(obj)
        update["spec"]["cancelRequested"] = True
        update["spec"]["mode"]["task"]["args"] = [str(index)]
        updates.append(update)
    started = time.perf_counter()
    for update, obj in zip(updates, stored, strict=True):
        validator.admit(update, obj)
    cold_update = (time.perf_counter() - started) / rounds
    status = copy.deepcopy(stored[0])
    status["status"] = {"phase": "Running"}
    started = time.perf_counter()
    for _ in range(rounds):
        validator.admit(status, stored[0])
    warm_update = (time.perf_counter() - started) / rounds
    print(
        f"\nRun admit: create (new spec) {cold_create * 1e3:.3f} ms,"
        f" spec update {cold_update * 1e3:.3f} ms,"
        f" status-style update (spec unchanged, cached rules) {warm_update * 1e3:.3f} ms"
    )
    assert warm_update < cold_update
    assert cold_create < 0.05  # generous: a regression guard, not a benchmark
