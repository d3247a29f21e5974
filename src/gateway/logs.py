"""Structured logs: one JSON object per line, via the standard logging module.

Issue 8, Observability: every line about an invocation carries ``namespace``, ``runtime``,
``run_uid`` and ``invocation_id`` (the invoke handler passes them as ``extra`` through
:class:`InvocationLog`). Tokens are never passed to a logger; the ``authorization`` header is
never logged, and a test scans the output for the token.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping
from typing import IO, Any

_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


class JSONFormatter(logging.Formatter):
    """Formats a record as one JSON line: ts, level, logger, msg and every extra field."""

    def format(self, record: logging.LogRecord) -> str:
        """Return the JSON line for ``record`` (an exception goes under ``exc``)."""
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


class InvocationLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """A logger adapter adding one invocation's identity to every line.

    Args:
        logger: the underlying logger.
        fields: ``namespace``, ``runtime``, ``run_uid``, ``invocation_id``.
    """

    def __init__(self, logger: logging.Logger, fields: Mapping[str, str]) -> None:
        super().__init__(logger, dict(fields))

    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        """Merge the invocation fields under the call's own ``extra``."""
        kwargs["extra"] = {**(self.extra or {}), **kwargs.get("extra", {})}
        return msg, kwargs


def configure(*, level: int = logging.INFO, stream: IO[str] | None = None) -> None:
    """Send ``gateway.*`` logs to ``stream`` (default stderr) as JSON lines.

    hypercorn's error log goes to the same handler at WARNING and above; its access log is
    off (the gateway logs each invocation itself, without the Authorization header).
    Replaces handlers installed by an earlier call, so it is safe to call twice.
    """
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JSONFormatter())
    for name, logger_level in (
        ("gateway", level),
        ("hypercorn.error", max(level, logging.WARNING)),
    ):
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler]
        logger.setLevel(logger_level)
        logger.propagate = False
