"""RFC 3339 timestamps as the API stores them (``startTime``, ``lastTransitionTime``, ...).

Timestamps are written in UTC with microsecond precision (``2026-11-29T08:00:00.123456Z``).
Kubernetes' own ``metav1.Time`` keeps whole seconds, but the benchmarks derive schedule,
dispatch and completion latencies from these fields, and those latencies are milliseconds;
``date-time`` in the CRD schema accepts the fraction. Parsing accepts either form.

Components never read the wall clock here: callers pass ``now`` (from their one injectable
clock, see DESIGN.md "Concurrency shape"), so every decision built on these is pure.
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime

from krt.api.errors import InvalidObjectError


def format_time(moment: datetime) -> str:
    """Render an aware datetime as the API's RFC 3339 UTC string.

    Args:
        moment: a timezone-aware datetime (any zone; converted to UTC).

    Returns:
        ``YYYY-MM-DDTHH:MM:SS.ffffffZ``.

    Raises:
        ValueError: ``moment`` is naive (a naive time has no defined instant).
    """
    if moment.tzinfo is None:
        raise ValueError("timestamps must be timezone-aware (got a naive datetime)")
    utc = moment.astimezone(UTC)
    if utc.year >= 1000:  # isoformat pads years to 4 digits; strftime's %Y does not
        return utc.replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"
    return utc.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str, *, field: str = "") -> datetime:
    """Parse an RFC 3339 timestamp (``Z`` or numeric offset, optional fraction).

    Args:
        text: the timestamp string as found in an object.
        field: dotted field path used in the error message.

    Returns:
        An aware datetime in UTC.

    Raises:
        InvalidObjectError: ``text`` is not an RFC 3339 timestamp with a zone.
    """
    try:
        return _utc_instant(text)
    except (TypeError, ValueError):
        raise InvalidObjectError(field, f"not an RFC 3339 timestamp: {text!r}") from None
    except _NoZoneError:
        raise InvalidObjectError(field, f"timestamp lacks a time zone: {text!r}") from None


class _NoZoneError(Exception):
    pass


@functools.lru_cache(maxsize=4096)
def _utc_instant(text: str) -> datetime:
    # Objects repeat the same few timestamps in every version (creation, transitions, start),
    # and datetimes are immutable: parse each text once. Failures are not cached.
    parsed = datetime.fromisoformat(text)
    if parsed.tzinfo is None:
        raise _NoZoneError
    return parsed.astimezone(UTC)
