"""Logical resource arithmetic: defaults (runs 1 per Run, 2 per Pod) and fits()."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from krt.api.errors import ResourceError
from krt.api.resources import (
    add,
    fits,
    free,
    parse_quantity,
    parse_resources,
    run_requests,
    runtime_capacity,
    total_usage,
)


def test_defaults() -> None:
    assert run_requests(None) == {"runs": 1}
    assert run_requests({"gpu": 1}) == {"runs": 1, "gpu": 1}
    assert run_requests({"runs": 3}) == {"runs": 3}
    assert runtime_capacity(None) == {"runs": 2}
    assert runtime_capacity({"gpu": 1}) == {"runs": 2, "gpu": 1}
    assert runtime_capacity({"runs": 8}) == {"runs": 8}


def test_a_run_must_request_at_least_one_run() -> None:
    with pytest.raises(ResourceError) as caught:
        run_requests({"runs": 0})
    assert caught.value.field == "spec.resources.requests.runs"


def test_fits() -> None:
    capacity = runtime_capacity(None)
    assert fits({"runs": 1}, {}, capacity)
    assert fits({"runs": 1}, {"runs": 1}, capacity)
    assert not fits({"runs": 1}, {"runs": 2}, capacity)
    assert not fits({"runs": 3}, {}, capacity)
    assert not fits({"runs": 1, "gpu": 1}, {}, capacity)  # the Pod offers no gpu
    assert fits({"runs": 1, "gpu": 0}, {}, capacity)
    assert fits({"runs": 1, "gpu": 1}, {"gpu": 1}, {"runs": 2, "gpu": 2})
    assert not fits({"runs": 1, "gpu": 2}, {"gpu": 1}, {"runs": 2, "gpu": 2})


def test_usage_and_free() -> None:
    used = total_usage([{"runs": 1}, {"runs": 2, "gpu": 1}])
    assert used == {"runs": 3, "gpu": 1}
    assert add({"a": 1}, {"a": 2, "b": 1}) == {"a": 3, "b": 1}
    assert free({"runs": 8, "gpu": 1}, used) == {"runs": 5, "gpu": 0}
    assert free({"runs": 2}, {"runs": 5}) == {"runs": 0}


@given(
    st.lists(st.integers(min_value=1, max_value=4), max_size=30),
    st.integers(min_value=0, max_value=40),
)
def test_greedy_placement_never_exceeds_capacity(requests: list[int], capacity_runs: int) -> None:
    capacity = runtime_capacity({"runs": capacity_runs})
    placed: list[dict[str, int]] = []
    for runs in requests:
        request = run_requests({"runs": runs})
        if fits(request, total_usage(placed), capacity):
            placed.append(request)
    assert total_usage(placed).get("runs", 0) <= capacity_runs


@pytest.mark.parametrize(
    "value", [True, 1.5, "1k", "500m", "-1", " 2", "2.0", "", "99999999999", None, -1, 2**31]
)
def test_bad_quantities(value: object) -> None:
    with pytest.raises(ResourceError) as caught:
        parse_quantity(value, field="spec.resources.requests.runs")
    assert caught.value.field == "spec.resources.requests.runs"


def test_parse_resources() -> None:
    assert parse_resources(None, field="f") == {}
    assert parse_resources({"runs": 2, "example.com/gpu": 1}, field="f") == {
        "runs": 2,
        "example.com/gpu": 1,
    }
    with pytest.raises(ResourceError, match="invalid resource name 'bad name'"):
        parse_resources({"bad name": 1}, field="f")
    with pytest.raises(ResourceError, match="must be a map"):
        parse_resources([1], field="f")
    with pytest.raises(ResourceError, match="exceed the limit of 16"):
        parse_resources({f"r{i}": 1 for i in range(17)}, field="f")
    with pytest.raises(ResourceError) as caught:
        parse_resources({"runs": "2k"}, field="spec.capacity.resources")
    assert caught.value.field == "spec.capacity.resources.runs"


@pytest.mark.parametrize(("value", "expected"), [("2", 2), ("0", 0), ("0007", 7), (3, 3)])
def test_seed_style_string_quantities(value: object, expected: int) -> None:
    """Seed 000/001 write ``runs: "2"``: decimal strings are the same quantity as the number."""
    assert parse_quantity(value, field="f") == expected
    assert parse_resources({"runs": value}, field="f") == {"runs": expected}
