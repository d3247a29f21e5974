"""Go/Kubernetes duration strings for spec.timeout and retryPolicy.backoff."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from krt.api.durations import format_duration, parse_duration
from krt.api.errors import DurationError
from krt.api.limits import DURATION_PATTERN


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90.0),
        ("10m", 600.0),
        ("1h30m", 5400.0),
        ("1.5h", 5400.0),
        ("2h45m30.5s", 9930.5),
        ("250ms", 0.25),
        ("1.s", 1.0),
        (".5s", 0.5),
        ("100us", 1e-4),
        ("100\u00b5s", 1e-4),
        ("100\u03bcs", 1e-4),
        ("1500ns", 1.5e-6),
        ("0", 0.0),
        ("0s", 0.0),
        ("1m1m", 120.0),
    ],
)
def test_parse(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "text", ["", "10", "1d", "-5s", "+5s", "1h 30m", "PT1H", "s", "1.5", "1hh", ".s", "5 s", "1e3s"]
)
def test_invalid_syntax_is_rejected_with_the_field(text: str) -> None:
    with pytest.raises(DurationError) as caught:
        parse_duration(text, field="spec.timeout")
    assert caught.value.field == "spec.timeout"
    assert "Go duration" in str(caught.value)


def test_positive_rejects_zero() -> None:
    with pytest.raises(DurationError, match="must be positive"):
        parse_duration("0s", field="spec.timeout", positive=True)
    assert parse_duration("1ns", positive=True) > 0


def test_too_long_and_non_string() -> None:
    with pytest.raises(DurationError, match="longer than 64"):
        parse_duration("1s" * 33)
    with pytest.raises(DurationError, match="must be a string"):
        parse_duration(90)  # type: ignore[arg-type]


@given(st.text(alphabet="0123456789.nsumh\u00b5\u03bc -+", max_size=12))
def test_parser_agrees_with_the_crd_pattern(text: str) -> None:
    """The CRD's pattern and the Python parser accept exactly the same strings."""
    accepted_by_crd = re.search(DURATION_PATTERN, text) is not None
    try:
        parse_duration(text)
        parsed = True
    except DurationError:
        parsed = False
    assert parsed is accepted_by_crd


@given(st.integers(min_value=0, max_value=10**7), st.integers(min_value=0, max_value=999))
def test_format_round_trips(whole: int, millis: int) -> None:
    seconds = whole + millis / 1000
    assert parse_duration(format_duration(seconds)) == pytest.approx(seconds, abs=1e-6)


def test_format_examples() -> None:
    assert format_duration(5400) == "1h30m"
    assert format_duration(0) == "0s"
    assert format_duration(0.25) == "250ms"
    assert format_duration(90) == "1m30s"
    with pytest.raises(ValueError, match="non-negative"):
        format_duration(-1)
