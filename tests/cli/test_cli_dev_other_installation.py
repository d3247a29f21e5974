"""`krt dev up` warns when the running dev cluster comes from another installation (its code)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from krt.cli.dev import other_installation


def test_a_cluster_started_by_this_interpreter_is_ours() -> None:
    assert other_installation(os.getpid()) is None


def test_a_cluster_started_by_another_interpreter_is_named(tmp_path: Path) -> None:
    # another "installation": a bin directory of its own whose python is this interpreter
    other_bin = tmp_path / "venv" / "bin"
    other_bin.mkdir(parents=True)
    (other_bin / "python3").symlink_to(os.path.realpath(sys.executable))
    child = subprocess.Popen([str(other_bin / "python3"), "-c", "import time; time.sleep(30)"])
    try:
        # until the child has exec'd, /proc shows the parent's command line
        deadline = time.monotonic() + 10
        while other_installation(child.pid) != str(other_bin) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert other_installation(child.pid) == str(other_bin)
    finally:
        child.kill()
        child.wait()


def test_an_unreadable_process_is_not_reported() -> None:
    assert other_installation(2**22 + 12345) is None  # no such pid
