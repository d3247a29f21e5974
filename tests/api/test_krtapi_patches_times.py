"""RFC 7386 merge patches and the API's RFC 3339 timestamps."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from krt.api.errors import InvalidObjectError
from krt.api.patches import apply_merge_patch
from krt.api.times import format_time, parse_time


@pytest.mark.parametrize(
    ("target", "patch", "result"),
    [  # the examples of RFC 7386, section 3
        ({"a": "b"}, {"a": "c"}, {"a": "c"}),
        ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
        ({"a": "b"}, {"a": None}, {}),
        ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
        ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
        ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
        ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
        ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
        ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
        ({"a": "foo"}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
        (None, {"a": 1}, {"a": 1}),
    ],
)
def test_rfc7386_examples(target: object, patch: dict[str, object], result: object) -> None:
    assert apply_merge_patch(target, patch) == result  # type: ignore[arg-type]


def test_merge_patch_does_not_alias_inputs() -> None:
    target = {"status": {"conditions": [{"type": "A"}]}}
    patch = {"status": {"outputs": {"k": "v"}}}
    result = apply_merge_patch(target, patch)
    result["status"]["conditions"].append({"type": "B"})
    result["status"]["outputs"]["k"] = "changed"
    assert target == {"status": {"conditions": [{"type": "A"}]}}
    assert patch == {"status": {"outputs": {"k": "v"}}}


def test_time_format_and_parse() -> None:
    moment = datetime(2026, 11, 29, 8, 0, 1, 234567, tzinfo=UTC)
    assert format_time(moment) == "2026-11-29T08:00:01.234567Z"
    assert parse_time(format_time(moment)) == moment
    assert parse_time("2026-11-29T08:00:01Z") == moment.replace(microsecond=0)
    plus_two = datetime(2026, 11, 29, 10, 0, tzinfo=timezone(timedelta(hours=2)))
    assert format_time(plus_two) == "2026-11-29T08:00:00.000000Z"
    assert parse_time("2026-11-29T10:00:00+02:00") == plus_two


def test_time_errors() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        format_time(datetime(2026, 11, 29))  # noqa: DTZ001
    with pytest.raises(InvalidObjectError) as caught:
        parse_time("2026-11-29T08:00:00", field="status.startTime")
    assert caught.value.field == "status.startTime"
    with pytest.raises(InvalidObjectError, match="not an RFC 3339 timestamp"):
        parse_time("yesterday")


def test_time_format_matches_strftime_for_any_year() -> None:
    """The isoformat fast path writes what strftime did (years < 1000 keep strftime's form)."""
    for moment in (
        datetime(2026, 11, 29, 8, 0, 1, 5, tzinfo=UTC),
        datetime(1000, 1, 1, tzinfo=UTC),
        datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        datetime(999, 5, 6, 7, 8, 9, 10, tzinfo=UTC),
        datetime(2026, 1, 1, 0, 30, tzinfo=timezone(timedelta(hours=1))),
    ):
        expected = moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        assert format_time(moment) == expected


def test_parse_time_repeats_are_equal_and_errors_are_not_remembered() -> None:
    first = parse_time("2026-11-29T09:00:00.5+01:00")
    assert parse_time("2026-11-29T09:00:00.5+01:00") == first
    assert first.tzinfo is UTC
    for _ in range(2):  # a failure is raised again, with the field of each call
        with pytest.raises(InvalidObjectError, match="lacks a time zone") as caught:
            parse_time("2026-11-29T08:00:00", field=f"f{_}")
        assert caught.value.field == f"f{_}"
    with pytest.raises(InvalidObjectError, match="not an RFC 3339 timestamp"):
        parse_time(["2026-11-29T08:00:00Z"])  # type: ignore[arg-type]
