"""Structured JSON logs: one object per line on stderr, keyed by Run UID and attempt.

Every record carries ``time``, ``level``, ``logger`` and ``message``; fields passed with
``extra=`` (``run_uid``, ``attempt``, ``run``, ``stream`` for task output, ...) are added
as top-level keys. Task stdout/stderr reach ``kubectl logs`` / ``krt logs`` this way, never
``Run.status`` (issue 6, Outputs).
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Final

__all__ = ["JsonFormatter", "configure_logging"]

_STANDARD: Final = frozenset(
    vars(logging.LogRecord("", 0, "", 0, "", (), None)).keys() | {"message", "asctime", "taskName"}
)


class JsonFormatter(logging.Formatter):
    """Formats a record as one JSON object (non-JSON values are rendered with ``str``)."""

    def format(self, record: logging.LogRecord) -> str:
        """Render ``record``."""
        data: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                data[key] = value
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str, ensure_ascii=False)


def configure_logging(level: str = "info") -> None:
    """Send every log record to stderr as JSON lines at ``level`` (``debug``, ``info``, ...).

    Raises:
        ValueError: unknown level name.
    """
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(numeric)
    for noisy in ("httpx", "httpcore", "hpack", "purerpc", "hypercorn"):
        logging.getLogger(noisy).setLevel(max(numeric, logging.WARNING))
