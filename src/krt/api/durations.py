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
from krt.api.limits import MAX_DURATION_CHARS

_UNIT_SECONDS: Final[dict[str, float]] = {
    "ns": 1e-9,
    "us": 1e-6,
    "\u00b5s": 1e-6,
    "\u03bcs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_COMPONENT: Final = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|\u00b5s|\u03bcs|ms|s|m|h)")


def parse_duration(text: str, *, field: str = "", positive: bool = False) -> float:
    """Parse a Go/Kubernetes duration string into seconds.

    Args:
        text: e.g. ``"90s"``, ``"1h30m"``, ``"0.5s"``, ``"0"``.
        field: dotted field path for error messages (``spec.timeout``).
        positive: also reject a zero duration (``spec.timeout`` must be > 0).

    Returns:
        The duration in seconds (float; nanosecond inputs keep their precision as far as a
        float does).

    Raises:
        DurationError: the syntax is not Go's (signs are rejected too), the string is longer
            than :data:`~krt.api.limits.MAX_DURATION_CHARS`, or ``positive`` and it is zero.
    """
    if not isinstance(text, str):
        raise DurationError(field, f"a duration must be a string such as '90s', got {text!r}")
    if len(text) > MAX_DURATION_CHARS:
        raise DurationError(field, f"duration longer than {MAX_DURATION_CHARS} characters")
    if text == "0":
        seconds = 0.0
    else:
        seconds = 0.0
        position = 0
        for match in _COMPONENT.finditer(text):
            if match.start() != position:
                break
            seconds += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
            position = match.end()
        if position == 0 or position != len(text):
            raise DurationError(
                field,
                f"invalid duration {text!r}: use a Go duration such as '90s', '10m' or '1h30m'",
            )
    if positive and seconds <= 0:
        raise DurationError(field, f"duration must be positive, got {text!r}")
    return seconds


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
