"""One-shot task executions of the base ``Runtime`` service (seed 003, DESIGN "Wire contracts").

Each execution is one process in its own process group (``start_new_session``), so a
timeout or Cancel reaches everything the task started. stdout and stderr are read as they
arrive into :class:`~servers.common.bounded.BoundedBuffer` (1 MiB each: the first 256 KiB
and the last 768 KiB, so a failure at the end stays visible) by one
:class:`~servers.common.child_watch.ChildWatcher` task serving every execution's pipes and
exit; each execution is one trio task that waits for the exit, Cancel or the timeout. The
environment is exactly the request's ``env`` plus a minimal PATH and HOME: the server's own
environment (and its secrets) never leaks into a task.

Executions are keyed by the caller's immutable ID (runtimed uses the Run UID). A finished
execution stays until Forget so runtimed can read its result (seed 003, "Retry").
"""

from __future__ import annotations

import enum
import functools
import logging
import os
import shutil
import signal
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import trio

from servers.common import limits
from servers.common.adapter import FunctionAdapter
from servers.common.bounded import BoundedBuffer
from servers.common.child_watch import ChildWatcher, WatchedChild
from servers.common.errors import (
    already_exists,
    failed_precondition,
    invalid_argument,
    not_found,
)
from servers.common.validation import (
    is_below_text,
    real_path,
    require_directory,
    resolve_working_dir,
    validate_entrypoint,
    validate_env,
    validate_id,
)

log = logging.getLogger("servers.executions")

#: PATH given to tasks and workers unless ``env`` sets one.
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
#: after the process exits, how long its pipes may stay open (held by orphans) before we
#: stop reading them (seconds).
_PIPE_DRAIN_SECONDS = 2.0


def minimal_env(env: Mapping[str, str], *, home: Path) -> dict[str, str]:
    """Return ``env`` plus PATH and HOME defaults, and nothing from the server's environment.

    Args:
        env: validated request environment; its PATH/HOME win over the defaults.
        home: the default HOME (the working directory).
    """
    return {"PATH": DEFAULT_PATH, "HOME": str(home), **env}


def task_env(env: Mapping[str, str], *, home: Path) -> dict[str, str]:
    """The environment of a one-shot task: :func:`minimal_env` plus ``PYTHONUNBUFFERED=1``.

    A task's stdout is a pipe, so Python would block-buffer it and ``krt run --follow``
    would show nothing until the task exits; unbuffered, each line streams as printed
    (a Python program a Bash task starts included). The request's ``env`` wins: setting
    ``PYTHONUNBUFFERED`` to an empty string there restores buffering.

    Args:
        env: validated request environment (``spec.env``).
        home: the default HOME (the working directory).
    """
    return minimal_env({"PYTHONUNBUFFERED": "1", **env}, home=home)


class ExecutionState(enum.IntEnum):
    """Values equal ``executor.v1.ExecutionState``."""

    PENDING = 1
    RUNNING = 2
    SUCCEEDED = 3
    FAILED = 4


@dataclass(frozen=True)
class ExecuteRequest:
    """The fields of executor.v1.ExecuteRequest, as plain Python values."""

    id: str
    args: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    timeout_seconds: int = 0
    working_dir: str = ""
    entrypoint: str = ""
    handler: str = ""


class ExecutionStatus(NamedTuple):
    """A snapshot of one execution (executor.v1.StatusResponse).

    A named tuple: immutable like a frozen dataclass and built in a third of the time
    (``List`` builds one per execution on every poll; issue 6).
    """

    id: str
    state: ExecutionState
    exit_code: int
    stdout: str
    stderr: str
    error_message: str


@dataclass
class _Execution:
    id: str
    argv: list[str]
    cwd: Path
    env: dict[str, str]
    timeout_seconds: int
    state: ExecutionState = ExecutionState.PENDING
    exit_code: int = 0
    error_message: str = ""
    stdout: BoundedBuffer = field(default_factory=BoundedBuffer)
    stderr: BoundedBuffer = field(default_factory=BoundedBuffer)
    #: the server created ``cwd`` (the default ``<work-dir>/<id>``): Forget removes it.
    owns_dir: bool = False
    cancel_requested: trio.Event = field(default_factory=trio.Event)
    finished: trio.Event = field(default_factory=trio.Event)
    #: while the run waits for the process: cancelled by Cancel to stop the wait.
    cancel_scope: trio.CancelScope | None = None

    def snapshot(self) -> ExecutionStatus:
        return ExecutionStatus(
            id=self.id,
            state=self.state,
            exit_code=self.exit_code,
            stdout=self.stdout.text(),
            stderr=self.stderr.text(),
            error_message=self.error_message,
        )

    def summary(self) -> ExecutionStatus:
        """The snapshot without stdout and stderr (a ``List`` entry)."""
        return ExecutionStatus(
            id=self.id,
            state=self.state,
            exit_code=self.exit_code,
            stdout="",
            stderr="",
            error_message=self.error_message,
        )

    @property
    def terminal(self) -> bool:
        return self.state in (ExecutionState.SUCCEEDED, ExecutionState.FAILED)


class ExecutionManager:
    """Runs and tracks task executions.

    Args:
        adapter: builds the task argv for the language.
        work_dir: the server's work dir; working dirs must lie under it.
        nursery: runs the executions and the task watching their processes; it must
            outlive the manager.
        cancel_grace_seconds: SIGTERM-to-SIGKILL grace period for Cancel (seconds).
    """

    def __init__(
        self,
        adapter: FunctionAdapter,
        *,
        work_dir: Path,
        nursery: trio.Nursery,
        cancel_grace_seconds: float = limits.CANCEL_GRACE_SECONDS,
    ) -> None:
        self._adapter = adapter
        self._work_dir = work_dir
        self._nursery = nursery
        self._grace = cancel_grace_seconds
        self._executions: dict[str, _Execution] = {}
        self._children = ChildWatcher(nursery)

    def _prepare(self, req: ExecuteRequest) -> _Execution:
        exec_id = validate_id("id", req.id)
        if exec_id in self._executions:
            raise already_exists(f"execution {exec_id} already exists")
        if req.timeout_seconds < 0:
            raise invalid_argument(f"timeout_seconds must be >= 0, got {req.timeout_seconds}")
        env = validate_env(req.env)
        entrypoint = validate_entrypoint(req.entrypoint)
        default = self._work_dir / exec_id
        cwd = resolve_working_dir(
            self._work_dir, req.working_dir, default=default, field="working_dir"
        )
        if entrypoint:
            if not is_below_text(real_path(f"{cwd}/{entrypoint}"), str(cwd)):
                raise invalid_argument(
                    f"entrypoint {entrypoint!r} resolves outside the working dir {cwd}"
                )
        if any("\0" in a for a in req.args):
            raise invalid_argument("args contain a NUL byte")
        try:
            argv = self._adapter.task_argv(entrypoint=entrypoint, args=list(req.args))
        except ValueError as exc:
            raise invalid_argument(str(exc)) from None
        if req.working_dir:
            require_directory(cwd, field="working_dir")
        return _Execution(
            id=exec_id,
            argv=argv,
            cwd=cwd,
            env=task_env(env, home=cwd),
            timeout_seconds=req.timeout_seconds,
        )

    def execute(self, req: ExecuteRequest) -> str:
        """Validate and start an execution; it runs in the background.

        Returns:
            The execution ID.

        Raises:
            ContractError: INVALID_ARGUMENT (id, env, entrypoint, args, working dir,
                timeout), ALREADY_EXISTS for a duplicate ID.
        """
        execution = self._prepare(req)
        if not req.working_dir:
            try:
                execution.owns_dir = not execution.cwd.exists()
                execution.cwd.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise failed_precondition(
                    f"cannot create working dir {execution.cwd}: {exc.strerror}"
                ) from None
        self._executions[execution.id] = execution
        self._nursery.start_soon(self._run, execution)
        return execution.id

    def status(self, exec_id: str) -> ExecutionStatus:
        """Return a snapshot of one execution.

        Raises:
            ContractError: INVALID_ARGUMENT for an ID Execute would refuse (empty, too long,
                bad characters); NOT_FOUND for an unknown ID.
        """
        return self._get(exec_id).snapshot()

    def list(self) -> list[ExecutionStatus]:
        """Return every known execution, in start order, without stdout and stderr.

        ``List`` is an index (runtimed polls it for state changes, seed 003): carrying up to
        2 MiB of output per execution would make its size grow with the Pod's load past gRPC
        message limits. :meth:`status` returns the output.
        """
        return [e.summary() for e in self._executions.values()]

    def cancel(self, exec_id: str) -> None:
        """Request termination (SIGTERM to the group, SIGKILL after the grace period).

        Cancelling a finished execution does nothing.

        Raises:
            ContractError: INVALID_ARGUMENT for an ID Execute would refuse; NOT_FOUND for an
                unknown ID.
        """
        execution = self._get(exec_id)
        if not execution.terminal:
            execution.cancel_requested.set()
            if execution.cancel_scope is not None:
                execution.cancel_scope.cancel()

    def forget(self, exec_id: str) -> None:
        """Drop a finished execution, and the default working dir if the server created it.

        The directory is renamed out of the way at once (so the ID can run again in a fresh
        one) and deleted in the background; a working dir the caller gave, or that existed
        before, is left alone.

        Raises:
            ContractError: INVALID_ARGUMENT for an ID Execute would refuse; NOT_FOUND for
                an unknown ID; FAILED_PRECONDITION while it is pending or running.
        """
        execution = self._get(exec_id)
        if not execution.terminal:
            raise failed_precondition(
                f"execution {exec_id} is {execution.state.name}; cancel it before forgetting it"
            )
        del self._executions[exec_id]
        if execution.owns_dir:
            self._discard_dir(execution.cwd)

    def _discard_dir(self, path: Path) -> None:
        trash = self._work_dir / f".forgotten-{path.name}-{uuid.uuid4().hex}"
        try:
            path.rename(trash)
        except OSError as exc:
            log.warning("cannot remove working dir", extra={"path": str(path), "error": str(exc)})
            return
        remove = functools.partial(shutil.rmtree, trash, ignore_errors=True)
        self._nursery.start_soon(trio.to_thread.run_sync, remove)

    async def wait(self, exec_id: str) -> ExecutionStatus:
        """Wait until the execution is terminal and return its snapshot (tests, demo)."""
        execution = self._get(exec_id)
        await execution.finished.wait()
        return execution.snapshot()

    def _get(self, exec_id: str) -> _Execution:
        try:
            return self._executions[exec_id]
        except KeyError:
            # an ID Execute refuses (empty, too long, bad characters) is a caller bug, as
            # Execute says: INVALID_ARGUMENT, never "no such execution"
            validate_id("id", exec_id)
            raise not_found(f"execution {exec_id} not found") from None

    async def _run(self, execution: _Execution) -> None:
        fields = {"execution_id": execution.id}
        try:
            await self._run_process(execution)
        finally:
            execution.finished.set()
            # a success is DEBUG (runtimed logs the Run's end; issue 6: one log write less
            # per task here and at the node); a failure stays visible at INFO
            log.log(
                logging.DEBUG if execution.state is ExecutionState.SUCCEEDED else logging.INFO,
                "execution finished",
                extra={
                    **fields,
                    "state": execution.state.name,
                    "exit_code": execution.exit_code,
                    "error": execution.error_message,
                },
            )

    async def _run_process(self, execution: _Execution) -> None:
        if execution.cancel_requested.is_set():
            execution.state = ExecutionState.FAILED
            execution.error_message = "cancelled before it started"
            return
        try:
            child = self._children.spawn(
                execution.argv,
                cwd=execution.cwd,
                env=execution.env,
                stdout=execution.stdout,
                stderr=execution.stderr,
            )
        except OSError as exc:
            execution.state = ExecutionState.FAILED
            execution.exit_code = -1
            execution.error_message = f"failed to start {execution.argv[0]!r}: {exc}"
            return
        execution.state = ExecutionState.RUNNING
        outcome = ""
        try:
            timed_out = False
            if execution.timeout_seconds:
                with trio.move_on_after(execution.timeout_seconds) as deadline:
                    await self._wait_or_stop(execution, child)
                timed_out = deadline.cancelled_caught
            else:  # no scope to enter and leave (about 5 µs each)
                await self._wait_or_stop(execution, child)
            if timed_out:
                outcome = f"timed out after timeout_seconds={execution.timeout_seconds}s"
                _signal_group(child.pid, signal.SIGKILL)
                await child.exited.wait()
            elif execution.cancel_requested.is_set():
                outcome = "cancelled"
            # the group dies with its leader: no orphan outlives the execution.
            _signal_group(child.pid, signal.SIGKILL)
            # orphans outside the group may hold the pipes open: read what is there, then stop.
            if not child.drained.is_set():
                with trio.move_on_after(_PIPE_DRAIN_SECONDS):
                    await child.drained.wait()
        finally:
            child.close_pipes()
            if child.returncode is None:
                _signal_group(child.pid, signal.SIGKILL)
                with trio.CancelScope(shield=True):
                    await child.reap_unwatched()
        code = child.returncode
        assert code is not None
        execution.exit_code = code
        if outcome:
            execution.state = ExecutionState.FAILED
            execution.error_message = outcome
        elif code == 0:
            execution.state = ExecutionState.SUCCEEDED
        else:
            execution.state = ExecutionState.FAILED
            execution.error_message = (
                f"killed by signal {-code}" if code < 0 else f"exited with status {code}"
            )

    async def _wait_or_stop(self, execution: _Execution, child: WatchedChild) -> None:
        """Wait for the exit; on Cancel, SIGTERM the group and SIGKILL it after the grace."""
        with trio.CancelScope() as asked:
            execution.cancel_scope = asked  # cancel() cancels it
            if execution.cancel_requested.is_set():
                asked.cancel()
            await child.exited.wait()
        execution.cancel_scope = None
        if child.exited.is_set():
            return
        _signal_group(child.pid, signal.SIGTERM)
        with trio.move_on_after(self._grace):
            await child.exited.wait()
        if not child.exited.is_set():
            _signal_group(child.pid, signal.SIGKILL)
            await child.exited.wait()

    async def aclose(self) -> None:
        """Kill every running execution's process group (server shutdown)."""
        for execution in self._executions.values():
            if not execution.terminal:
                execution.cancel_requested.set()
                if execution.cancel_scope is not None:
                    execution.cancel_scope.cancel()


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    """Send ``sig`` to the process group ``pgid`` (a task's pid); ignore a vanished group."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass
