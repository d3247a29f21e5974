"""Go/Kubernetes duration strings for spec.timeout and retryPolicy.backoff."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from krt.api.durations import MAX_DURATION_SECONDS, format_duration, parse_duration
from krt.api.errors import DurationError
from krt.api.limits import DURATION_PATTERN, MAX_DURATION_TEXT


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
    except DurationError as exc:
        parsed = False
        if "too long" in str(exc):  # beyond Go's maximum: the CRD's bound rule, not its pattern
            assert accepted_by_crd
            return
    assert parsed is accepted_by_crd


@pytest.mark.parametrize(
    ("text", "nanoseconds"),
    [
        ("2562047h47m16.854775807s", 2**63 - 1),
        ("9223372036854775807ns", 2**63 - 1),
        ("2562047h2836.854775807s", 2**63 - 1),
        ("2562047h47m16.8547758079s", 2**63 - 1),  # the fraction below 1 ns is dropped, as in Go
    ],
)
def test_go_maximum_is_accepted(text: str, nanoseconds: int) -> None:
    assert parse_duration(text, field="spec.timeout") == pytest.approx(nanoseconds / 1e9)
    assert parse_duration(text) == MAX_DURATION_SECONDS


@pytest.mark.parametrize(
    "text",
    ["1000000000h", "2562048h", "2562047h47m17s", "9223372036854775808ns", "2562047h2562047h"],
)
def test_beyond_go_maximum_is_rejected_naming_field_and_limit(text: str) -> None:
    """F1: such values overflowed runtimed's deadline arithmetic; Go rejects them too."""
    with pytest.raises(DurationError) as caught:
        parse_duration(text, field="spec.timeout", positive=True)
    assert caught.value.field == "spec.timeout"
    assert f"at most {MAX_DURATION_TEXT}" in str(caught.value)
    assert str(caught.value).startswith(f"spec.timeout: duration {text!r} is too long")


def test_clamp_reads_a_stored_overlong_value_as_the_maximum() -> None:
    assert parse_duration("1000000000h", clamp=True) == MAX_DURATION_SECONDS
    assert parse_duration("90s", clamp=True) == 90.0
    with pytest.raises(DurationError, match="Go duration"):
        parse_duration("10 minutes", clamp=True)


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
