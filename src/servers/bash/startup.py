"""Starting a Bash worker: the registration steps (seed 002, "Built-in Runtime Requirements").

In order, each failure a :class:`RegistrationFailed` with a bounded summary:

1. the handler file must be a regular file beneath the working directory (after symlinks);
2. ``bash -n`` must accept it, so a syntax error is reported before any of it runs;
3. ``driver.sh`` starts in its own session, sources the file once and checks the function
   with ``declare -F`` (see :mod:`servers.bash.worker` for the protocol).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Final

import trio

from servers.bash.diagnostics import bounded, remove_tree, tail_text
from servers.bash.handler import BashHandler
from servers.bash.worker import BashWorker
from servers.common.adapter import RegistrationFailed

#: the fixed worker script (shipped as package data next to this module).
DRIVER_SCRIPT: Final = Path(__file__).with_name("driver.sh")


def locate_script(working_dir: Path, script: Path) -> Path:
    """Resolve the handler file beneath ``working_dir``.

    Args:
        working_dir: the registered working directory.
        script: the handler's ``.sh`` path relative to it.

    Returns:
        The absolute, symlink-free path of the file.

    Raises:
        RegistrationFailed: the file is missing, not a regular file, or resolves (through a
            symlink) outside the working directory.
    """
    root = Path(os.path.realpath(working_dir))
    resolved = Path(os.path.realpath(root / script))
    if not resolved.is_relative_to(root):
        raise RegistrationFailed(f"handler file {script} resolves outside the working directory")
    if not resolved.exists():
        raise RegistrationFailed(f"handler file {script} not found in the working directory")
    if not resolved.is_file():
        raise RegistrationFailed(f"handler file {script} is not a regular file")
    return resolved


async def check_syntax(*, bash: str, script: Path, shown_as: Path, env: Mapping[str, str]) -> None:
    """Run ``bash -n`` on the handler file (parse only: nothing in it runs).

    Args:
        bash: the bash executable.
        script: the resolved handler file.
        shown_as: the name used in the message (relative to the working directory).
        env: the worker's environment.

    Raises:
        RegistrationFailed: bash reported a syntax error (its bounded message included).
        OSError: bash could not be started.
    """
    result = await trio.run_process(
        [bash, "-n", "--", str(script)],
        stdin=subprocess.DEVNULL,
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        env=dict(env),
    )
    if result.returncode != 0:
        detail = tail_text(result.stderr + result.stdout)
        raise RegistrationFailed(bounded(f"syntax error in {shown_as} (bash -n): {detail}"))


async def _spawn_driver(
    *,
    bash: str,
    script: Path,
    function: str,
    scratch: Path,
    working_dir: Path,
    env: Mapping[str, str],
) -> trio.Process:
    """Start ``driver.sh`` in its own session; its stderr goes to ``scratch/worker.log``."""
    log_fd = os.open(scratch / "worker.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        return await trio.lowlevel.open_process(
            [
                bash,
                "--noprofile",
                "--norc",
                str(DRIVER_SCRIPT),
                str(script),
                function,
                str(scratch),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log_fd,
            cwd=working_dir,
            env=dict(env),
            start_new_session=True,
        )
    finally:
        os.close(log_fd)


async def start_bash_worker(
    *,
    bash: str,
    working_dir: Path,
    handler: BashHandler,
    env: Mapping[str, str],
    run_uid: str,
) -> BashWorker:
    """Start a warm worker with ``handler`` sourced and checked (registration).

    Args:
        bash: the bash executable (absolute path).
        working_dir: the registered working directory (exists).
        handler: the parsed ``file.function`` handler.
        env: the worker's complete environment.
        run_uid: for structured logs.

    Returns:
        A ready worker; the caller owns it and must ``aclose`` it.

    Raises:
        RegistrationFailed: missing file, syntax error, failing top level, missing function,
            or bash could not be started.
    """
    try:
        script = await trio.to_thread.run_sync(locate_script, working_dir, Path(handler.script))
        await check_syntax(bash=bash, script=script, shown_as=Path(handler.script), env=env)
        scratch = Path(await trio.to_thread.run_sync(tempfile.mkdtemp, "", "krt-bash-"))
    except OSError as exc:
        raise RegistrationFailed(bounded(f"cannot prepare the bash worker: {exc}")) from None
    try:
        process = await _spawn_driver(
            bash=bash,
            script=script,
            function=handler.function,
            scratch=scratch,
            working_dir=working_dir,
            env=env,
        )
    except BaseException as exc:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(remove_tree, scratch)
        if isinstance(exc, OSError):
            raise RegistrationFailed(bounded(f"could not start bash ({bash}): {exc}")) from None
        raise
    worker = BashWorker(process=process, scratch=scratch, handler=handler, run_uid=run_uid)
    try:
        await worker.handshake()
    except BaseException:
        await worker.aclose()
        raise
    return worker
