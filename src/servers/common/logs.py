"""Structured logs: one JSON object per line on stderr, via the standard logging module.

Records carry their ``extra`` fields (``run_uid``, ``invocation_id``, ``stream``, ...) as
top-level keys, so a log collector can filter one Run's or one invocation's lines
(seed 002, "Invocation Semantics": logs are structured by Run UID and invocation ID).
"""

from __future__ import annotations

import json
import logging
import sys
from typing import IO, Any

_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


class JSONFormatter(logging.Formatter):
    """Formats a record as one JSON line: ts, level, logger, msg and every extra field."""

    def format(self, record: logging.LogRecord) -> str:
        """Return the JSON line for ``record`` (exceptions go under ``exc``)."""
        entry: dict[str, Any] = {
            "ts": round(record.created, 6),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


def configure(*, level: int = logging.INFO, stream: IO[str] | None = None) -> None:
    """Send ``servers.*`` logs to ``stream`` (default stderr) as JSON lines.

    purerpc's own logger goes to the same handler at ERROR and above: it reports every
    client disconnect and server shutdown as a warning, which is noise here. Replaces
    handlers installed by an earlier call, so it is safe to call twice.
    """
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JSONFormatter())
    for name, logger_level in (("servers", level), ("purerpc", max(level, logging.ERROR))):
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler]
        logger.setLevel(logger_level)
        logger.propagate = False
