"""Structured logs for every kruntimes process: one JSON object per line, via :mod:`logging`.

Each record becomes one JSON object: a timestamp, ``level``, ``logger``, the message, the
fields passed as ``extra=`` (``run_uid``, ``attempt``, ``invocation_id``, ``stream``, ...) as
top-level keys, and an exception's traceback. Two spellings of the timestamp, message and
exception keys exist, because readers depend on each (:class:`LineFormat`): runtimed (and
the control plane) write :data:`RFC3339_LINES` (``time``, ``message``, ``exception``; read
by ``krt logs``); the gateway and the Runtime Servers write :data:`EPOCH_LINES` (``ts`` in
epoch seconds, ``msg``, ``exc``; read by the examples and the servers' tests). So a log collector (and ``krt logs``, which
reads runtimed's lines) can filter one Run's or one invocation's lines (seed 002,
"Invocation Semantics": logs are structured by Run UID and invocation ID; issue 6: task
output reaches the container log, never ``Run.status``).

The control plane, runtimed, the gateway and the Runtime Servers all call :func:`configure`
once at start-up; they differ only in which loggers they route and which chatty libraries
they quieten.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import IO, Final

__all__ = [
    "EPOCH_LINES",
    "RFC3339_LINES",
    "JsonFormatter",
    "LineFormat",
    "configure",
    "parse_level",
]

_STANDARD: Final = frozenset(
    vars(logging.LogRecord("", 0, "", 0, "", (), None)).keys() | {"message", "asctime", "taskName"}
)


@dataclass(frozen=True, slots=True)
class LineFormat:
    """The keys of a JSON log line that differ between components.

    Attributes:
        time_key: key of the record's creation time.
        message_key: key of the formatted message.
        exception_key: key of a logged exception's traceback.
        rfc3339: time as RFC 3339 UTC text (``2026-05-01T09:00:00.000000Z``) when true,
            else as epoch seconds (a float, microsecond precision).
    """

    time_key: str
    message_key: str
    exception_key: str
    rfc3339: bool


#: runtimed's and the control plane's lines (``krt logs`` reads ``time`` and ``message``).
RFC3339_LINES: Final = LineFormat("time", "message", "exception", rfc3339=True)
#: The gateway's and the Runtime Servers' lines.
EPOCH_LINES: Final = LineFormat("ts", "msg", "exc", rfc3339=False)


class JsonFormatter(logging.Formatter):
    """Formats a record as one JSON line (values JSON cannot hold are rendered with ``str``).

    Args:
        line_format: the key spelling (default :data:`RFC3339_LINES`).
    """

    def __init__(self, line_format: LineFormat = RFC3339_LINES) -> None:
        super().__init__()
        self.line_format = line_format

    def format(self, record: logging.LogRecord) -> str:
        """Return the JSON line for ``record``: time, level, logger, message, extra fields."""
        keys = self.line_format
        created: object = (
            datetime.fromtimestamp(record.created, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            if keys.rfc3339
            else round(record.created, 6)
        )
        data: dict[str, object] = {
            keys.time_key: created,
            "level": record.levelname.lower(),
            "logger": record.name,
            keys.message_key: record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                data[key] = value
        if record.exc_info:
            data[keys.exception_key] = self.formatException(record.exc_info)
        return json.dumps(data, default=str, ensure_ascii=False)


def parse_level(level: int | str) -> int:
    """Return the numeric logging level of ``level`` (``"debug"``, ``"INFO"``, ``20``, ...).

    Raises:
        ValueError: an unknown level name.
    """
    if isinstance(level, int):
        return level
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r}")
    return numeric


def configure(
    *,
    level: int | str = logging.INFO,
    loggers: Sequence[str] = ("",),
    floors: Mapping[str, int] | None = None,
    line_format: LineFormat = RFC3339_LINES,
    stream: IO[str] | None = None,
) -> None:
    """Send the named loggers' records to ``stream`` (default stderr) as JSON lines.

    Every logger in ``loggers`` and ``floors`` gets one shared handler and stops propagating,
    so no line is written twice; calling again replaces the handlers, so it is safe to call
    twice.

    Args:
        level: the level of ``loggers`` (a name such as ``"info"`` or a number).
        loggers: the component's loggers (``""`` is the root logger: everything).
        floors: chatty library loggers and the lowest level each may log at; each is set
            to ``max(level, floor)`` (e.g. ``{"hpack": logging.WARNING}``: hpack logs raw
            headers at DEBUG).
        line_format: the key spelling of the lines.
        stream: where lines go (tests pass a ``StringIO``).

    Raises:
        ValueError: an unknown level name.
    """
    numeric = parse_level(level)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter(line_format))
    levels = {name: numeric for name in loggers}
    for name, floor in (floors or {}).items():
        levels[name] = max(numeric, floor)
    for name, logger_level in levels.items():
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler]
        logger.setLevel(logger_level)
        if name:
            logger.propagate = False
