"""The rule outcome memo: keyed by the fields a rule reads, same answers as no memo."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from localkube.crd import CRDValidator
from localkube.crd import _cel_rules as cel_rules
from localkube.crd._cel_compile import ENVIRONMENT
from localkube.crd._cel_reads import field_reads
from localkube.crd._rule_cache import ValueKeys
from localkube.errors import FieldError

RUN_CRD = Path(__file__).resolve().parents[3] / "charts/kruntimes/crds/runs.kruntimes.io.yaml"


def run_schema() -> dict[str, Any]:
    crd = yaml.safe_load(RUN_CRD.read_text())
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


@pytest.mark.parametrize(
    ("text", "self_reads", "old_reads"),
    [
        ("has(self.a) == has(self.b)", {"a", "b"}, set()),
        ("!has(oldSelf.phase) || self.phase == oldSelf.phase", {"phase"}, {"phase"}),
        ("(self).e > 1 && self.f.g == 'x'", {"e", "f"}, set()),
        ("has(self.task) != has(self.__function__)", {"task", "__function__"}, set()),
        ("self == oldSelf", None, None),
        ("self.all(k, k.matches('x'))", None, set()),
        ("size(self) > 1", None, set()),
        ("self['a'] == 1", None, set()),
        ("self.a.all(self, self.b)", None, set()),  # a macro variable named self: whole
        ("type(self.x) == int", {"x"}, set()),
    ],
)
def test_field_reads(text: str, self_reads: set[str] | None, old_reads: set[str] | None) -> None:
    tree = ENVIRONMENT.compile(text)
    assert field_reads(tree, "self") == (None if self_reads is None else frozenset(self_reads))
    assert field_reads(tree, "oldSelf") == (None if old_reads is None else frozenset(old_reads))


def test_value_keys_tell_types_and_absence_apart() -> None:
    fields = ("x",)
    keys = {
        repr(v): ValueKeys({"x": v} if v is not ... else {}).key(fields)
        for v in ("1", 1, 1.0, True, None, [1], ...)
    }
    assert len(set(keys.values())) == len(keys)
    assert ValueKeys({"x": "a", "y": 1}).key(fields) == ValueKeys({"x": "a", "y": 2}).key(fields)
    assert ValueKeys({"x": "a" * 20_000}).key(fields) is None  # too large: not cached


def errors_of(validator: CRDValidator, obj: Any, old: Any = None) -> list[FieldError]:
    return validator.admit(obj, old)[1]


def uncached(validator: CRDValidator, obj: Any, old: Any = None) -> list[FieldError]:
    new = validator.admit(obj, old)[0]
    return cel_rules.evaluate_rules(new, old, old is not None, validator.root, cache=None)


def count_evaluations(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    evaluated: list[str] = []
    original = cel_rules._outcome

    def counting(rule: Any, activation: dict[str, Any], node: Any) -> Any:
        evaluated.append(rule.rule)
        return original(rule, activation, node)

    monkeypatch.setattr(cel_rules, "_outcome", counting)
    return evaluated


def run(name: str, status: dict[str, Any] | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "kruntimes.io/v1alpha1",
        "kind": "Run",
        "metadata": {"name": name, "namespace": "demo"},
        "spec": {"runtime": "bash", "source": {"inline": "exit 0\n"}, "mode": {"task": {}}},
    }
    if status is not None:
        obj["status"] = status
    return obj


def scheduled(pod: str, when: str) -> dict[str, Any]:
    return {
        "phase": "Scheduled",
        "assignedPod": pod,
        "assignedPodUID": f"uid-{pod}",
        "conditions": [
            {
                "type": "Scheduled",
                "status": "True",
                "reason": "Assigned",
                "lastTransitionTime": when,
            }
        ],
    }


def test_status_rules_are_memoized_by_the_fields_they_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    validator = CRDValidator(run_schema())
    first, _ = validator.admit(run("a"))
    assert errors_of(validator, run("a", scheduled("p1", "2026-01-01T00:00:01Z")), first) == []
    evaluated = count_evaluations(monkeypatch)
    # another Run, another time stamp, the same pod and phase: every outcome is reused
    other, _ = validator.admit(run("b"))
    assert errors_of(validator, run("b", scheduled("p1", "2026-01-01T00:00:02.5Z")), other) == []
    assert evaluated == []
    # a new pod: only the rule reading assignedPod* runs again
    assert errors_of(validator, run("b", scheduled("p2", "2026-01-01T00:00:03Z")), other) == []
    assert evaluated == ["has(self.assignedPod) == has(self.assignedPodUID)"]


def test_memoized_outcomes_equal_fresh_evaluation() -> None:
    validator = CRDValidator(run_schema())
    stored, _ = validator.admit(run("a"))
    done = run("a", {**scheduled("p1", "2026-01-01T00:00:01Z"), "phase": "Succeeded"})
    done_stored, _ = validator.admit(done, stored)
    cases: list[tuple[dict[str, Any], dict[str, Any] | None]] = [
        (run("a", scheduled("p1", "2026-01-01T00:00:01Z")), stored),
        (run("a", {"phase": "Scheduled", "assignedPod": "p1"}), stored),  # UID missing
        (run("a", {**scheduled("p1", "2026-01-01T00:00:09Z"), "phase": "Running"}), done_stored),
        (run("a", {**scheduled("p1", "2026-01-01T00:00:09Z"), "phase": "Succeeded"}), done_stored),
        (run("a", {"outputs": {"good": "1", "bad key": "2"}}), stored),
        (run("a", {"endpoint": {"protocol": "HTTPS", "url": "http://x"}}), stored),
    ]
    for _ in range(2):  # the second round answers from the memo
        for obj, old in cases:
            assert errors_of(validator, copy.deepcopy(obj), old) == uncached(
                CRDValidator(run_schema()), copy.deepcopy(obj), old
            )
    messages = [
        [e.message for e in errors_of(validator, copy.deepcopy(obj), old)] for obj, old in cases
    ]
    assert messages[1] == [
        'Invalid value: "object": status.assignedPod and status.assignedPodUID are set and'
        " cleared together"
    ]
    assert any("terminal" in m for m in messages[2])
    assert messages[3] == []


def test_transition_rules_are_keyed_by_old_self_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    validator = CRDValidator(run_schema())
    stored, _ = validator.admit(run("a"))
    running, _ = validator.admit(run("a", {"phase": "Running"}), stored)
    failed, _ = validator.admit(run("a", {"phase": "Failed"}), stored)
    again = run("a", {"phase": "Running", "message": "retrying"})
    assert errors_of(validator, copy.deepcopy(again), running) == []
    # same self, another oldSelf: the memo must not answer with the first outcome
    errors = errors_of(validator, copy.deepcopy(again), failed)
    assert [e.field for e in errors] == ["status"]


SCHEMA_WITH_MESSAGE: dict[str, Any] = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "x-kubernetes-validations": [
                {"rule": "self.a == 'ok'", "messageExpression": "'a is not ok for ' + self.b"},
                {"rule": "type(self.n) == int", "message": "n must be a number"},
            ],
            "properties": {
                "a": {"type": "string"},
                "b": {"type": "string"},
                "c": {"type": "string"},
                "n": {"x-kubernetes-int-or-string": True},
            },
        }
    },
}


def test_message_expression_fields_are_part_of_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    validator = CRDValidator(SCHEMA_WITH_MESSAGE)
    first = errors_of(validator, {"spec": {"a": "no", "b": "x", "n": 1}})
    second = errors_of(validator, {"spec": {"a": "no", "b": "y", "n": 1}})
    assert [e.message for e in first] == ['Invalid value: "object": a is not ok for x']
    assert [e.message for e in second] == ['Invalid value: "object": a is not ok for y']
    evaluated = count_evaluations(monkeypatch)
    # a field no rule reads changes: both outcomes come from the memo
    assert errors_of(validator, {"spec": {"a": "no", "b": "y", "c": "z", "n": 1}}) == second
    assert evaluated == []
    # "1" and 1 are different values to CEL, and to the memo
    assert [e.message for e in errors_of(validator, {"spec": {"a": "ok", "n": "1"}})] == [
        'Invalid value: "object": n must be a number'
    ]
    assert errors_of(validator, {"spec": {"a": "ok", "n": 1}}) == []


def test_unchanged_subtree_of_the_root_costs_one_lookup(monkeypatch: pytest.MonkeyPatch) -> None:
    validator = CRDValidator(run_schema())
    stored, _ = validator.admit(run("a"))
    assert errors_of(validator, run("a", scheduled("p1", "2026-01-01T00:00:01Z")), stored) == []
    walked: list[str] = []
    original = cel_rules._run_rules

    def recording(walker: Any, value: Any, old: Any, has_old: bool, node: Any, path: str,
                  *, root: bool, unchanged: bool) -> None:  # fmt: skip
        walked.append(path)
        original(walker, value, old, has_old, node, path, root=root, unchanged=unchanged)

    monkeypatch.setattr(cel_rules, "_run_rules", recording)
    assert errors_of(validator, run("a", scheduled("p1", "2026-01-01T00:00:02Z")), stored) == []
    assert walked == ["status"]  # spec (and everything under it) came from the memo


def test_subtree_memo_replays_errors_in_order() -> None:
    validator = CRDValidator(run_schema())
    stored, _ = validator.admit(run("a"))
    changed = run("a")
    changed["spec"]["runtime"] = "python"
    changed["spec"]["source"] = {"inline": "x", "inlinePath": "/abs"}
    expected = uncached(CRDValidator(run_schema()), copy.deepcopy(changed), stored)
    assert [e.field for e in expected] == ["spec", "spec", "spec.source.inlinePath"]
    for _ in range(3):
        assert errors_of(validator, copy.deepcopy(changed), stored) == expected


def test_subtree_memo_gives_up_on_a_subtree_that_always_changes() -> None:
    validator = CRDValidator(run_schema())
    stored, _ = validator.admit(run("a"))
    for second in range(40):
        status = scheduled("p1", f"2026-01-01T00:00:{second:02d}Z")
        assert errors_of(validator, run("a", status), stored) == []
    cache = validator._cache
    root = validator.root
    assert not cache.subtree_worth_trying(id(root.properties["status"]))
    assert cache.subtree_worth_trying(id(root.properties["spec"]))
