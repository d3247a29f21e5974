"""What a Python handler prints, as structured log records with a per-invocation budget.

Seed 002 ("Invocation Semantics"): runtime logs are structured by Run UID and invocation ID,
and what a handler prints never becomes its output. Each printed line is one JSON log record
on the server's stderr carrying ``run_uid``, ``invocation_id`` and ``stream``. Logging runs on
the server's event loop, so it is bounded: at most
:data:`~servers.common.limits.MAX_LOGGED_OUTPUT_BYTES` per invocation (and per registration
for the handler module's import), each line cut to 16 KiB; what does not fit is counted and
reported in one closing record, as the Bash server does for stderr.
"""

from __future__ import annotations

import logging
from typing import Final

from servers.common import limits

log = logging.getLogger("servers.python")

#: at most this much of one printed line goes into one log record (characters).
MAX_LOG_LINE_CHARS: Final = 16 * 1024


class HandlerOutputLog:
    """Logs printed lines of one worker, invocation by invocation, within a byte budget.

    Args:
        run_uid: the Run UID every record carries.
        budget: bytes that may be logged per invocation (default 64 KiB).
    """

    def __init__(self, run_uid: str, *, budget: int = limits.MAX_LOGGED_OUTPUT_BYTES) -> None:
        self._run_uid = run_uid
        self._budget = budget
        self._invocation_id = ""
        self._room = budget
        self._dropped = 0

    def start(self, invocation_id: str) -> None:
        """Begin a new invocation (empty ``invocation_id``: the handler module's import)."""
        self._invocation_id = invocation_id
        self._room = self._budget
        self._dropped = 0

    def write(self, stream: str, payload: bytes) -> None:
        """Log the lines of ``payload`` (UTF-8, invalid bytes replaced) from ``stream``.

        Args:
            stream: ``stdout`` or ``stderr``.
            payload: one chunk of complete lines as the worker sent it.
        """
        if self._room <= 0:
            self._dropped += len(payload)
            return
        fields = {"run_uid": self._run_uid, "invocation_id": self._invocation_id, "stream": stream}
        lines = payload.decode("utf-8", "replace").splitlines() or [""]
        for index, line in enumerate(lines):
            logged = line[:MAX_LOG_LINE_CHARS]
            size = len(logged.encode()) + 1
            if size > self._room:
                self._room = 0
                self._dropped += sum(len(rest.encode()) + 1 for rest in lines[index:])
                return
            self._room -= size
            self._dropped += len(line.encode()) - len(logged.encode())
            log.info(logged, extra=fields)

    def finish(self) -> None:
        """Close the invocation: report how many bytes were not logged, if any."""
        if self._dropped:
            log.info(
                "[%d more bytes of handler output not logged: the limit is %d bytes per"
                " invocation]",
                self._dropped,
                self._budget,
                extra={"run_uid": self._run_uid, "invocation_id": self._invocation_id},
            )
            self._dropped = 0
