"""`krt dev up` start failures are one error, not a traceback (a busy --port, a bad --images)."""

from __future__ import annotations

import errno
import socket
import subprocess
import sys
from pathlib import Path

from krt.cli.dev import _child_error, _startup_cause
from localkube.images import ImageTableError


def test_the_cause_is_found_inside_nested_exception_groups() -> None:
    busy = OSError(errno.EADDRINUSE, "Address already in use")
    group = BaseExceptionGroup("outer", [BaseExceptionGroup("inner", [busy])])
    assert _startup_cause(group) is busy
    table = ImageTableError("bad table")
    assert _startup_cause(ExceptionGroup("g", [table])) is table
    assert _startup_cause(ExceptionGroup("g", [ValueError("other")])) is None


def test_the_child_error_is_taken_whole_from_the_last_error_line() -> None:
    log = "older run\nError: old\nlocalkube stopped\nError: a: b\n  second line\n"
    assert _child_error(log) == "a: b\n  second line"
    assert _child_error("Error: only\n") == "only"
    assert _child_error("no error here\nTraceback ...\n") == ""


def test_a_busy_port_is_one_line_with_a_hint(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = [sys.executable, "-m", "krt.cli.main", "dev", "up", "--detach"]
        argv += ["--state-dir", str(tmp_path / "state"), "--port", str(port), "--no-install"]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert done.stderr.strip() == (
        "Error: cannot start localkube: address already in use (choose another --port, or 0 for any)"
    )
