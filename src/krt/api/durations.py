"""Kubernetes/Go duration strings (``90s``, ``10m``, ``1h30m``, ``1.5h``, ``250ms``).

``spec.timeout`` and ``spec.retryPolicy.backoff`` use the syntax of Go's
``time.ParseDuration`` (what ``metav1.Duration`` accepts), restricted to non-negative values:
``0`` or a sequence of ``<decimal><unit>`` with unit ``ns``, ``us``/``µs``, ``ms``, ``s``,
``m`` or ``h``. The CRD enforces the same syntax with :data:`krt.api.limits.DURATION_PATTERN`;
this module gives runtimed and the control plane the value in seconds.

Written here rather than taken from a library: the candidates parse ISO 8601 (``PT1H``) or
free text, not Go's syntax, and the grammar is ten lines.
"""

from __future__ import annotations

import re
from typing import Final

from krt.api.errors import DurationError
from krt.api.limits import MAX_DURATION_CHARS, MAX_DURATION_NANOSECONDS, MAX_DURATION_TEXT

_UNIT_NANOSECONDS: Final[dict[str, int]] = {
    "ns": 1,
    "us": 1_000,
    "\u00b5s": 1_000,
    "\u03bcs": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}
_COMPONENT: Final = re.compile(r"([0-9]*)(?:\.([0-9]*))?(ns|us|\u00b5s|\u03bcs|ms|s|m|h)")
#: :data:`~krt.api.limits.MAX_DURATION_NANOSECONDS` in seconds.
MAX_DURATION_SECONDS: Final = MAX_DURATION_NANOSECONDS / 1e9


def parse_duration(
    text: str, *, field: str = "", positive: bool = False, clamp: bool = False
) -> float:
    """Parse a Go/Kubernetes duration string into seconds.

    The value must fit Go's int64 nanoseconds, as ``time.ParseDuration`` requires: at most
    :data:`~krt.api.limits.MAX_DURATION_TEXT` (about 292 years).

    Args:
        text: e.g. ``"90s"``, ``"1h30m"``, ``"0.5s"``, ``"0"``.
        field: dotted field path for error messages (``spec.timeout``).
        positive: also reject a zero duration (``spec.timeout`` must be > 0).
        clamp: for values already stored (read by runtimed and the control plane): a
            duration longer than Go's maximum reads as the maximum instead of raising, so
            an object admitted before the bound existed cannot stop reconciliation.

    Returns:
        The duration in seconds (float; nanosecond inputs keep their precision as far as a
        float does; at most about :data:`MAX_DURATION_SECONDS`).

    Raises:
        DurationError: the syntax is not Go's (signs are rejected too), the string is longer
            than :data:`~krt.api.limits.MAX_DURATION_CHARS`, the value is longer than Go's
            maximum duration (unless ``clamp``), or ``positive`` and it is zero.
    """
    if not isinstance(text, str):
        raise DurationError(field, f"a duration must be a string such as '90s', got {text!r}")
    if len(text) > MAX_DURATION_CHARS:
        raise DurationError(field, f"duration longer than {MAX_DURATION_CHARS} characters")
    seconds, nanoseconds = (0.0, 0) if text == "0" else _parts(text, field)
    if positive and seconds <= 0:
        raise DurationError(field, f"duration must be positive, got {text!r}")
    if nanoseconds > MAX_DURATION_NANOSECONDS:
        if clamp:
            return MAX_DURATION_SECONDS
        raise DurationError(
            field,
            f"duration {text!r} is too long: Go durations are at most "
            f"{MAX_DURATION_TEXT} (about 292 years)",
        )
    return seconds


def _parts(text: str, field: str) -> tuple[float, int]:
    """``text`` in seconds, and in whole nanoseconds as Go counts them (for the bound)."""
    seconds = 0.0
    nanoseconds = 0
    position = 0
    for match in _COMPONENT.finditer(text):
        whole, fraction, unit = match.groups()
        if match.start() != position or not (whole or fraction):
            break
        scale = _UNIT_NANOSECONDS[unit]
        seconds += float(f"{whole or '0'}.{fraction or ''}") * scale / 1e9
        nanoseconds += int(whole or "0") * scale
        if fraction:  # Go drops the part of each fraction below one nanosecond
            nanoseconds += int(fraction) * scale // 10 ** len(fraction)
        position = match.end()
    if position == 0 or position != len(text):
        raise DurationError(
            field,
            f"invalid duration {text!r}: use a Go duration such as '90s', '10m' or '1h30m'",
        )
    return seconds, nanoseconds


def format_duration(seconds: float) -> str:
    """Render seconds as a Go-style duration string that :func:`parse_duration` reads back.

    Args:
        seconds: a non-negative number of seconds.

    Returns:
        ``"0s"``, ``"1h30m"``, ``"2m5s"``, ``"1.5s"``, ``"250ms"``...

    Raises:
        ValueError: ``seconds`` is negative.
    """
    if seconds < 0:
        raise ValueError(f"durations are non-negative, got {seconds}")
    if seconds == 0:
        return "0s"
    if seconds < 1:
        millis = seconds * 1000
        if millis >= 1 and float(millis).is_integer():
            return f"{int(millis)}ms"
        return f"{seconds:.9f}".rstrip("0").rstrip(".") + "s"
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    parts = []
    if hours:
        parts.append(f"{int(hours)}h")
    if minutes:
        parts.append(f"{int(minutes)}m")
    if secs:
        text = f"{secs:.9f}".rstrip("0").rstrip(".")
        parts.append(f"{text}s")
    return "".join(parts)
