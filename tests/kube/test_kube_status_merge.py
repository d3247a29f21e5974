"""krt.kube.status.merged_status: RFC 7386 merge without copying what the patch leaves unchanged."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from krt.api.patches import apply_merge_patch
from krt.kube.status import merged_status

STATUS: dict[str, Any] = {
    "phase": "Scheduled",
    "assignedPodUID": "pod-1",
    "attempt": 1,
    "conditions": [{"type": "Scheduled", "status": "True", "reason": "Bound"}],
    "retry": {"after": "2026-01-01T00:00:00Z", "attempt": 2},
}

PATCHES: list[dict[str, Any]] = [
    {"phase": "Running", "startTime": "2026-01-01T00:00:01Z"},
    {"conditions": [{"type": "Running", "status": "True"}], "retry": None},
    {"retry": {"after": None, "attempt": 3}},
    {"outputs": {"A": "1"}, "missing": None},
    {},
]


@pytest.mark.parametrize("patch", PATCHES)
def test_same_result_as_apply_merge_patch(patch: dict[str, Any]) -> None:
    assert merged_status(STATUS, patch) == apply_merge_patch(STATUS, patch)


@pytest.mark.parametrize("patch", PATCHES)
def test_inputs_not_modified(patch: dict[str, Any]) -> None:
    target, before, patch_before = (
        copy.deepcopy(STATUS),
        copy.deepcopy(STATUS),
        copy.deepcopy(patch),
    )
    merged_status(target, patch)
    assert target == before
    assert patch == patch_before


def test_none_target_is_empty() -> None:
    assert merged_status(None, {"phase": "Running", "x": None}) == {"phase": "Running"}


def test_unchanged_values_are_shared_not_copied() -> None:
    patch: dict[str, Any] = {"phase": "Running", "outputs": ["k"], "retry": {"attempt": 3}}
    result = merged_status(STATUS, patch)
    assert result is not STATUS
    assert result["conditions"] is STATUS["conditions"]  # untouched: shared
    assert result["outputs"] is patch["outputs"]  # replaced: the patch's own value
    assert result["retry"] is not STATUS["retry"]  # merged path: a new dict
    assert result["retry"] == {"after": "2026-01-01T00:00:00Z", "attempt": 3}
