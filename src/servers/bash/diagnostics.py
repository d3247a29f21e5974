"""Diagnostics of a Bash worker: bounded error text, stderr tails and structured stderr logs.

A function's stderr is never output (seed 002, "Invocation Semantics": built-in Bash uses
stderr as structured logs). It is logged one record per line with the Run UID, the
invocation ID and ``stream="stderr"`` as fields, so the JSON log lines of one invocation can be
selected; only its tail is kept, so a chatty function cannot flood the server's log.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
from pathlib import Path
from typing import Final

from servers.common import limits

log = logging.getLogger("servers.bash")

#: how much of the end of a function's stderr is logged per invocation, in bytes.
STDERR_LOG_TAIL_BYTES: Final = limits.MAX_LOGGED_OUTPUT_BYTES
#: how much of the end of stderr goes into an error message, in bytes.
ERROR_TAIL_BYTES: Final = 2048


def bounded(text: str, limit: int = limits.MAX_ERROR_TEXT_BYTES) -> str:
    """Cut ``text`` to at most ``limit`` UTF-8 bytes, keeping the end (the newest detail)."""
    data = text.encode("utf-8", errors="replace")
    if len(data) <= limit:
        return text
    return "..." + data[-(limit - 3) :].decode("utf-8", errors="ignore")


def tail_text(data: bytes, limit: int = ERROR_TAIL_BYTES) -> str:
    """The last ``limit`` bytes of ``data`` as stripped text (invalid UTF-8 replaced)."""
    tail = data[-limit:].decode("utf-8", errors="replace").strip()
    return ("..." + tail) if len(data) > limit else tail


def read_head(path: Path, limit: int) -> tuple[bytes, int]:
    """Return the first ``limit`` bytes of ``path`` and its size in bytes."""
    with path.open("rb") as f:
        size = os.fstat(f.fileno()).st_size
        return f.read(limit), size


def read_tail(path: Path, limit: int) -> tuple[bytes, int]:
    """Return the last ``limit`` bytes of ``path`` and its size; a missing file is empty."""
    try:
        with path.open("rb") as f:
            size = os.fstat(f.fileno()).st_size
            f.seek(max(0, size - limit))
            return f.read(limit), size
    except FileNotFoundError:
        return b"", 0


def status_text(status: int) -> str:
    """``"status 1"``, or ``"status 137 (128 + SIGKILL)"`` for a signal death."""
    if status > 128:
        try:
            return f"status {status} (128 + {signal.Signals(status - 128).name})"
        except ValueError:
            pass
    return f"status {status}"


def log_stderr(data: bytes, size: int, *, run_uid: str, invocation_id: str | None) -> None:
    """Log a stderr tail, one record per line, keyed by run UID and invocation ID.

    Args:
        data: the kept tail of stderr.
        size: the full stderr size in bytes (more than ``len(data)`` when the head was
            dropped; a record says how much).
        run_uid: the Run UID.
        invocation_id: the invocation, or None for output of the handler file's top level.
    """
    if not data:
        return
    fields = {"run_uid": run_uid, "invocation_id": invocation_id, "stream": "stderr"}
    if size > len(data):
        log.info("[%d earlier bytes of stderr not logged]", size - len(data), extra=fields)
    for line in data.decode("utf-8", errors="replace").splitlines():
        log.info("%s", line, extra=fields)


def remove_tree(path: Path) -> None:
    """Delete ``path`` recursively, ignoring errors (a worker's scratch directory)."""
    shutil.rmtree(path, ignore_errors=True)
