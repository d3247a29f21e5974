"""Bounds of the Runtime Server contract, in one place (seed 000 "Invoke Contract", seed 002).

Sizes are bytes, durations seconds unless the name says otherwise. The bounds shared with
the gateway and runtimed (invocation input, output, ID, default timeout) are defined once in
:mod:`krt.api.limits` and named here for the servers' code.
"""

from __future__ import annotations

from typing import Final

from krt.api import limits as api_limits

#: stdout and stderr of a task execution are each kept to this many bytes (head plus tail).
TASK_OUTPUT_LIMIT_BYTES: Final = 1024 * 1024
#: of those, this many come from the start of the stream; the other 768 KiB are its end,
#: where a failing task usually says why (runtimed quotes a stderr tail in the Run).
TASK_OUTPUT_HEAD_BYTES: Final = 256 * 1024
#: put between the kept head and tail when task output was cut (a ``str.format`` template:
#: ``dropped``, ``head`` and ``tail`` are byte counts).
TRUNCATION_MARKER: Final = (
    "\n[... {dropped} bytes of output dropped by the Runtime Server"
    " (kept the first {head} and the last {tail} bytes) ...]\n"
)
#: execution IDs and Run UIDs are path components: at most this many bytes.
MAX_ID_BYTES: Final = 128
#: a function handler (``module.function``, ``file.function``) is at most this many bytes.
MAX_HANDLER_BYTES: Final = 1024
#: invocation IDs (seed 000, "Invoke Contract").
MAX_INVOCATION_ID_BYTES: Final = api_limits.MAX_INVOCATION_ID_BYTES
#: timeout_millis == 0 means this bounded default (seed 002, "Invocation Semantics").
DEFAULT_INVOKE_TIMEOUT_SECONDS: Final = api_limits.DEFAULT_INVOKE_TIMEOUT_SECONDS
#: fatal_error and error details carry at most this many bytes of diagnostic text.
MAX_ERROR_TEXT_BYTES: Final = 4096
#: Cancel sends SIGTERM, then SIGKILL after this grace period.
CANCEL_GRACE_SECONDS: Final = 5.0
#: environment bounds for Execute and RegisterFunction.
MAX_ENV_ENTRIES: Final = 512
#: (the Run CRD admits at most ``MAX_ENV_BYTES`` minus what runtimed adds, counted alike:
#: krt.api.limits.MAX_ENV_TOTAL_BYTES.)
MAX_ENV_BYTES: Final = api_limits.RUNTIME_SERVER_MAX_ENV_BYTES
#: (the outputs bounds are the Run outputs' own: krt.api.limits / krt.api.outputs.)
#: invocation input accepted by a Runtime Server (the gateway's request body limit).
MAX_INVOKE_INPUT_BYTES: Final = api_limits.MAX_INVOKE_INPUT_BYTES
#: invocation output a built-in Runtime Server returns; larger is an OutputTooLarge error.
MAX_INVOKE_OUTPUT_BYTES: Final = api_limits.MAX_INVOKE_OUTPUT_BYTES
#: what a handler prints (Python) or writes to stderr (Bash) is logged up to this many bytes
#: per invocation; the rest is counted, not logged, so a chatty handler cannot flood the log
#: or stall the server's event loop.
MAX_LOGGED_OUTPUT_BYTES: Final = 64 * 1024
