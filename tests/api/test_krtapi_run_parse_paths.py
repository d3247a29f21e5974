"""Run parsing's cheap common case keeps every error's field path and text (issue 6).

The parsers build an item's path (``spec.env[2].``, ``status.conditions[1]``) only when
something is wrong; these cases pin the messages they gave when the path was always built.
"""

from __future__ import annotations

import copy
from collections import UserDict
from typing import Any

import pytest

from krt.api.errors import InvalidObjectError, ResourceError
from krt.api.run import Run

T = "2026-11-29T08:00:00.000000Z"


def sample() -> dict[str, Any]:
    return {
        "apiVersion": "kruntimes.io/v1alpha1",
        "kind": "Run",
        "metadata": {
            "name": "r",
            "namespace": "ns",
            "creationTimestamp": T,
            "finalizers": ["kruntimes.io/cleanup"],
            "labels": {"a": "b"},
        },
        "spec": {
            "runtime": "bash",
            "mode": {"task": {"args": ["x"]}},
            "env": [{"name": "A", "value": "1"}, {"name": "B"}, {"name": "C", "value": ""}],
            "retryPolicy": {"maxAttempts": 2, "retryableReasons": ["ExecutionLost"]},
        },
        "status": {
            "phase": "Running",
            "startTime": T,
            "outputs": {"K": "v"},
            "conditions": [
                {"type": "Scheduled", "status": "True", "lastTransitionTime": T},
                {"type": "Running", "status": "True", "lastTransitionTime": T},
            ],
        },
    }


def error_of(edit: Any) -> str:
    data = sample()
    edit(data)
    with pytest.raises(InvalidObjectError) as excinfo:
        Run.from_dict(data)
    return str(excinfo.value)


def test_the_sample_parses() -> None:
    run = Run.from_dict(sample())
    assert [(e.name, e.value) for e in run.spec.env] == [("A", "1"), ("B", ""), ("C", "")]
    assert run.spec.effective_retry_policy.retryable_reasons == ("ExecutionLost",)
    assert [c.type for c in run.status.conditions] == ["Scheduled", "Running"]


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        (("spec", "env", 2, "value"), 3, "spec.env[2].value: must be a string, got int"),
        (("spec", "env", 1, "name"), "", "spec.env[1].name: is required"),
        (("spec", "env", 1, "name"), 7, "spec.env[1].name: must be a string, got int"),
        (("spec", "env", 0), "A=1", "spec.env[0]: must be an object"),
        (
            ("status", "conditions", 1, "lastTransitionTime"),
            "yesterday",
            "status.conditions[1].lastTransitionTime: not an RFC 3339 timestamp: 'yesterday'",
        ),
        (
            ("status", "conditions", 1, "status"),
            "Maybe",
            "status.conditions[1].status: must be True, False or Unknown, got 'Maybe'",
        ),
        (("status", "conditions", 1), "Running", "status.conditions[1]: must be an object"),
        (
            ("metadata", "creationTimestamp"),
            "2026-11-29T08:00:00",
            "metadata.creationTimestamp: timestamp lacks a time zone: '2026-11-29T08:00:00'",
        ),
        (("status", "startTime"), 5, "status.startTime: must be a string, got int"),
        (("metadata", "finalizers"), ["a", 1], "metadata.finalizers: must be a list of strings"),
        (("metadata", "finalizers"), "a", "metadata.finalizers: must be a list of strings"),
        (("status", "outputs"), {"K": 1}, "status.outputs: must be a map of strings to strings"),
        (("metadata", "labels"), ["a"], "metadata.labels: must be a map of strings to strings"),
        (
            ("spec", "retryPolicy", "maxAttempts"),
            "2",
            "spec.retryPolicy.maxAttempts: must be an integer, got '2'",
        ),
    ],
)
def test_errors_name_the_item_and_field(path: tuple[Any, ...], value: Any, expected: str) -> None:
    def edit(data: dict[str, Any]) -> None:
        target: Any = data
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = value

    assert error_of(edit) == expected


def test_other_mappings_and_lists_are_still_accepted() -> None:
    data = sample()
    plain = Run.from_dict(copy.deepcopy(data))
    data["metadata"]["labels"] = UserDict(data["metadata"]["labels"])
    data["spec"]["env"][0] = UserDict(data["spec"]["env"][0])
    data["status"]["conditions"][0] = UserDict(data["status"]["conditions"][0])
    assert Run.from_dict(data) == plain


@pytest.mark.parametrize("value", [True, -1, 2**31, "1k", 1.0])
def test_requests_quantities_off_the_common_case_are_still_checked(value: Any) -> None:
    data = sample()
    data["spec"]["resources"] = {"requests": {"runs": value}}
    with pytest.raises(ResourceError, match=r"^spec\.resources\.requests\.runs: must be"):
        Run.from_dict(data)
    data["spec"]["resources"] = {"requests": {"runs": 3}}
    assert Run.from_dict(data).spec.requests == {"runs": 3}
