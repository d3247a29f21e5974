"""The one injectable wall clock, and RFC 3339 timestamps as Kubernetes writes them.

Durations and deadlines come from trio (``trio.current_time``, ``trio.sleep``) so that
pytest-trio's ``autojump_clock`` runs timeout tests instantly. Wall-clock *readings* (a Lease's
``renewTime``, an Event's ``lastTimestamp``, a status ``startTime``) go through a :class:`Clock`
passed in by the caller, never ``datetime.now()`` directly, so a test can pin or advance them.

Kubernetes has two timestamp encodings: ``metav1.Time`` (whole seconds,
``2026-11-29T08:00:00Z``) and ``metav1.MicroTime`` (six fraction digits,
``2026-11-29T08:00:00.123456Z``, used by Leases and events.k8s.io). Both are written in UTC.
Parsing accepts either, a ``Z`` or a numeric offset, and any fraction length.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Protocol, runtime_checkable

import trio

__all__ = [
    "Clock",
    "FakeClock",
    "SystemClock",
    "TrioLinkedClock",
    "format_micro_time",
    "format_time",
    "parse_time",
]


@runtime_checkable
class Clock(Protocol):
    """A source of wall-clock readings (timezone-aware UTC datetimes)."""

    def now(self) -> datetime:
        """Return the current wall-clock time, timezone-aware, in UTC."""
        ...


class SystemClock:
    """The real wall clock (``datetime.now(UTC)``)."""

    def now(self) -> datetime:
        """Return the current UTC time."""
        return datetime.now(UTC)


class FakeClock:
    """A wall clock that moves only when told to (for tests).

    Args:
        start: the initial reading; must be timezone-aware. Defaults to 2026-01-01T00:00:00Z.

    Raises:
        ValueError: ``start`` is naive.
    """

    def __init__(self, start: datetime | None = None) -> None:
        moment = start if start is not None else datetime(2026, 1, 1, tzinfo=UTC)
        if moment.tzinfo is None:
            raise ValueError("FakeClock start must be timezone-aware (got a naive datetime)")
        self._now = moment.astimezone(UTC)

    def now(self) -> datetime:
        """Return the current fake reading."""
        return self._now

    def advance(self, seconds: float) -> None:
        """Move the clock forward by ``seconds`` (may be negative to model a clock step back)."""
        self._now += timedelta(seconds=seconds)

    def set(self, moment: datetime) -> None:
        """Jump to ``moment`` (timezone-aware).

        Raises:
            ValueError: ``moment`` is naive.
        """
        if moment.tzinfo is None:
            raise ValueError("FakeClock.set needs a timezone-aware datetime")
        self._now = moment.astimezone(UTC)


class TrioLinkedClock:
    """A wall clock that advances with trio's clock: ``epoch + trio.current_time()``.

    Useful under ``autojump_clock``: virtual time jumps move the wall clock too, so timestamps
    written by code under test stay consistent with the durations it measures.

    Args:
        epoch: the wall-clock reading at trio time 0 (timezone-aware).

    Raises:
        ValueError: ``epoch`` is naive.
    """

    def __init__(self, epoch: datetime | None = None) -> None:
        moment = epoch if epoch is not None else datetime(2026, 1, 1, tzinfo=UTC)
        if moment.tzinfo is None:
            raise ValueError("TrioLinkedClock epoch must be timezone-aware")
        self._epoch = moment.astimezone(UTC)

    def now(self) -> datetime:
        """Return ``epoch`` plus the current trio time (must be called inside ``trio.run``)."""
        return self._epoch + timedelta(seconds=trio.current_time())


def _utc(moment: datetime) -> datetime:
    if moment.tzinfo is None:
        raise ValueError("timestamps must be timezone-aware (got a naive datetime)")
    return moment.astimezone(UTC)


def format_time(moment: datetime) -> str:
    """Render ``moment`` as a ``metav1.Time``: whole seconds, UTC, ``Z`` suffix.

    Raises:
        ValueError: ``moment`` is naive.
    """
    return _utc(moment).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_micro_time(moment: datetime) -> str:
    """Render ``moment`` as a ``metav1.MicroTime``: ``YYYY-MM-DDTHH:MM:SS.ffffffZ`` in UTC.

    Raises:
        ValueError: ``moment`` is naive.
    """
    return _utc(moment).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


_RFC3339 = re.compile(
    r"(?P<date>\d{4}-\d{2}-\d{2})[Tt](?P<time>\d{2}:\d{2}:\d{2})"
    r"(?:\.(?P<fraction>\d+))?(?P<zone>[Zz]|[+-]\d{2}:\d{2})\Z"
)


def parse_time(text: str) -> datetime:
    """Parse an RFC 3339 timestamp into an aware UTC datetime.

    Args:
        text: e.g. ``2026-11-29T08:00:00Z`` or ``2026-11-29T09:00:00.5+01:00``. Fractions
            longer than microseconds are truncated.

    Returns:
        The instant, in UTC.

    Raises:
        ValueError: ``text`` is not an RFC 3339 date-time (the message quotes it).
    """
    match = _RFC3339.match(text) if isinstance(text, str) else None
    if match is None:
        raise ValueError(f"not an RFC 3339 timestamp: {text!r}")
    fraction = (match["fraction"] or "").ljust(6, "0")[:6]
    zone = match["zone"].upper().replace("Z", "+00:00")
    try:
        parsed = datetime.fromisoformat(f"{match['date']}T{match['time']}.{fraction}{zone}")
    except ValueError as exc:
        raise ValueError(f"not an RFC 3339 timestamp: {text!r} ({exc})") from None
    return parsed.astimezone(UTC)
