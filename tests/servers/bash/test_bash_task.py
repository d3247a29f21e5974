"""One-shot Bash task argv (issue 2, item 4): ``bash -c <arg>`` or ``bash <entrypoint> <args>``."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import trio

from servers.bash.adapter import BashAdapter


def test_one_argument_without_entrypoint_runs_bash_c(adapter: BashAdapter) -> None:
    assert adapter.task_argv(entrypoint="", args=["echo hi"]) == [
        adapter.bash,
        "-c",
        "--",
        "echo hi",
    ]


def test_entrypoint_runs_the_script_with_the_arguments(adapter: BashAdapter) -> None:
    assert adapter.task_argv(entrypoint="run.sh", args=["a", "-b"]) == [
        adapter.bash,
        "--",
        "run.sh",
        "a",
        "-b",
    ]
    assert adapter.task_argv(entrypoint="run.sh", args=[]) == [adapter.bash, "--", "run.sh"]


def test_no_entrypoint_and_no_arguments_is_rejected(adapter: BashAdapter) -> None:
    with pytest.raises(ValueError, match="needs an entrypoint or exactly one argument"):
        adapter.task_argv(entrypoint="", args=[])


def test_several_arguments_without_entrypoint_are_rejected(adapter: BashAdapter) -> None:
    with pytest.raises(ValueError, match="takes exactly one argument .* got 2"):
        adapter.task_argv(entrypoint="", args=["echo", "hi"])


async def test_task_argv_runs_as_documented(adapter: BashAdapter, workdir: Path) -> None:
    """Real bash: the command line runs, options-looking names are not options."""
    (workdir / "-run.sh").write_text('printf "%s|" "$0" "$@"\n')
    script = await trio.run_process(
        adapter.task_argv(entrypoint="-run.sh", args=["a b", "-x", "$(id)"]),
        cwd=workdir,
        capture_stdout=True,
        stdin=subprocess.DEVNULL,
    )
    assert script.stdout == b"-run.sh|a b|-x|$(id)|"
    command = await trio.run_process(
        adapter.task_argv(entrypoint="", args=["echo -n one; echo -n ' two'"]),
        cwd=workdir,
        capture_stdout=True,
        stdin=subprocess.DEVNULL,
    )
    assert command.stdout == b"one two"
    dash = await trio.run_process(
        adapter.task_argv(entrypoint="", args=["-x"]),
        cwd=workdir,
        capture_stderr=True,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    # "-x" was run as a command (not found), not taken as bash's xtrace option
    assert dash.returncode == 127
    assert b"-x: command not found" in dash.stderr
