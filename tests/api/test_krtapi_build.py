"""The parsers' positional constructors build the same frozen objects as ``__init__``."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from krt.api._build import builder
from krt.api.conditions import Condition
from krt.api.constants import ConditionStatus
from krt.api.meta import ObjectMeta
from krt.api.run import EnvVar, RetryPolicy, Run, RunSpec, RunStatus, Source, TaskMode

T0 = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)


def test_built_objects_equal_hash_and_stay_frozen_like_init() -> None:
    values = ("Ready", ConditionStatus.TRUE, "Why", "text", T0, 3)
    built = builder(Condition)(*values)
    made = Condition(*values)
    assert type(built) is Condition
    assert built == made
    assert hash(built) == hash(made)
    assert dataclasses.astuple(built) == values
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.reason = "changed"  # type: ignore[misc]


@pytest.mark.parametrize(
    "cls", [Source, RunSpec, RunStatus, Run, ObjectMeta, Condition, EnvVar, TaskMode, RetryPolicy]
)
def test_every_parsed_class_can_be_built_and_checks_arity(cls: type) -> None:
    build = builder(cls)
    count = len(dataclasses.fields(cls))
    with pytest.raises(TypeError, match=f"has {count} fields, got {count - 1} values"):
        build(*range(count - 1))


def test_a_parsed_run_is_what_keyword_construction_gives() -> None:
    data = {
        "metadata": {"name": "r", "namespace": "ns", "uid": "u", "resourceVersion": "7"},
        "spec": {"runtime": "py", "source": {"inline": "x", "inlinePath": "a.py"}},
        "status": {
            "phase": "Running",
            "reason": "R",
            "message": "M",
            "assignedPod": "p",
            "assignedPodUID": "pu",
            "startTime": "2026-11-29T08:00:00Z",
            "attempt": 2,
            "observedGeneration": 4,
            "conditions": [
                {"type": "Running", "status": "True", "reason": "A", "message": "B",
                 "lastTransitionTime": "2026-11-29T08:00:00Z", "observedGeneration": 4}
            ],
        },
    }  # fmt: skip
    expected = Run(
        metadata=ObjectMeta(name="r", namespace="ns", uid="u", resource_version="7"),
        spec=RunSpec(runtime="py", source=Source(inline="x", inline_path="a.py"), mode=TaskMode()),
        status=RunStatus(
            phase=RunStatus.from_dict({"phase": "Running"}).phase,
            reason="R",
            message="M",
            assigned_pod="p",
            assigned_pod_uid="pu",
            start_time=T0,
            attempt=2,
            observed_generation=4,
            conditions=(Condition("Running", ConditionStatus.TRUE, "A", "B", T0, 4),),
        ),
    )
    assert Run.from_dict(data) == expected


def test_only_slotted_dataclasses_without_post_init() -> None:
    @dataclasses.dataclass(frozen=True)
    class Plain:
        a: int

    @dataclasses.dataclass(frozen=True, slots=True)
    class Checked:
        a: int

        def __post_init__(self) -> None:
            pass

    for cls in (Plain, Checked, int):
        with pytest.raises(TypeError, match="not a slotted dataclass"):
            builder(cls)
