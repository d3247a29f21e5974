"""The gateway's per-invocation log fields (the JSON line format is :mod:`krt.logs`).

Issue 8, Observability: every line about an invocation carries ``namespace``, ``runtime``,
``run_uid`` and ``invocation_id`` (the invoke handler passes them as ``extra`` through
:class:`InvocationLog`). Tokens are never passed to a logger; the ``authorization`` header is
never logged, and a test scans the output for the token.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any


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
