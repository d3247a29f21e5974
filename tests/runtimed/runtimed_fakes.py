"""Fakes of runtimed's own interfaces for virtual-time tests.

* :class:`FakeRunStore`: the Run cache (:class:`runtimed.tasks.RunCache`) and the
  conditional status writer (:class:`runtimed.tasks.StatusWriter`) over one dict, with
  resourceVersions, 409 on stale writes, and watch delivery to handlers after ``lag``
  seconds of trio time (so tests see the cache lag behind a write, as on a real cluster).
* :class:`FakeRuntimeServer`: :class:`runtimed.runtime_client.RuntimeServer` in memory.
  Each execution runs a :class:`Program` in trio time: it sleeps ``seconds``, writes its
  outputs to ``$KRUNTIME_OUTPUTS`` (a real file) and ends with ``exit_code``. Cancel ends it
  at once with 143. ``down`` makes every call raise ServerUnavailable; ``lose_all()``
  models a Runtime Server restart.

Anything not modelled raises, so a test never passes by silently skipping behaviour.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio
import trio.lowlevel

from krt.kube.errors import Conflict, NotFound
from krt.kube.informer import EventType, InformerEvent
from runtimed.runtime_client import (
    ExecuteSpec,
    ExecutionStillRunning,
    RpcRejected,
    ServerUnavailable,
)
from runtimed.task_decisions import ExecState, ServerView


class FakeRunStore:
    """Runs by ``namespace/name`` with resourceVersions and lagged watch delivery."""

    def __init__(self, nursery: trio.Nursery, *, lag: float = 0.0) -> None:
        self._nursery = nursery
        self.lag = lag
        self.objects: dict[str, dict[str, Any]] = {}
        self.cache: dict[str, dict[str, Any]] = {}
        self.handlers: list[Callable[[InformerEvent], None]] = []
        self._rv = itertools.count(100)
        self.writes: list[dict[str, Any]] = []
        self.history: dict[str, list[dict[str, Any]]] = {}

    # -- RunCache ----------------------------------------------------------------------------

    def get(self, namespace: str | None, name: str) -> dict[str, Any] | None:
        return self.cache.get(f"{namespace}/{name}")

    def by_uid(self, uid: str) -> dict[str, Any] | None:
        for obj in self.cache.values():
            if obj["metadata"]["uid"] == uid:
                return obj
        return None

    # -- StatusWriter ------------------------------------------------------------------------

    async def write_status(self, obj: dict[str, Any], status: Any) -> dict[str, Any]:
        await trio.lowlevel.checkpoint()
        key = f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"
        current = self.objects.get(key)
        if current is None or current["metadata"]["uid"] != obj["metadata"]["uid"]:
            raise NotFound(f"{key} not found")
        if current["metadata"]["resourceVersion"] != obj["metadata"]["resourceVersion"]:
            raise Conflict(f"{key} changed")
        new = copy.deepcopy(current)
        new["status"] = copy.deepcopy(dict(status))
        self.writes.append(copy.deepcopy(new["status"]))
        self._store(key, new)
        return copy.deepcopy(new)

    # -- test controls -----------------------------------------------------------------------

    def _store(self, key: str, obj: dict[str, Any]) -> None:
        obj["metadata"]["resourceVersion"] = str(next(self._rv))
        self.objects[key] = obj
        self.history.setdefault(key, []).append(copy.deepcopy(obj.get("status") or {}))
        snapshot = copy.deepcopy(obj)
        if self.lag:
            self._nursery.start_soon(self._deliver_later, key, snapshot)
        else:
            self._deliver(key, snapshot)

    async def _deliver_later(self, key: str, obj: dict[str, Any]) -> None:
        await trio.sleep(self.lag)
        self._deliver(key, obj)

    def _deliver(self, key: str, obj: dict[str, Any] | None) -> None:
        old = self.cache.get(key)
        if obj is None:
            if old is None:
                return
            del self.cache[key]
            event = InformerEvent(EventType.DELETED, old, old)
        else:
            if old is not None and int(old["metadata"]["resourceVersion"]) > int(
                obj["metadata"]["resourceVersion"]
            ):
                return
            self.cache[key] = obj
            event = InformerEvent(EventType.ADDED if old is None else EventType.MODIFIED, obj, old)
        for handler in self.handlers:
            handler(event)

    def create(self, obj: dict[str, Any]) -> None:
        key = f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"
        self._store(key, copy.deepcopy(obj))

    def update_spec(self, key: str, **spec: Any) -> None:
        obj = copy.deepcopy(self.objects[key])
        obj["spec"].update(spec)
        self._store(key, obj)

    def delete(self, key: str) -> None:
        del self.objects[key]
        self._deliver(key, None)

    def status(self, key: str) -> dict[str, Any]:
        return self.objects[key].get("status") or {}


@dataclass
class Program:
    """What a fake execution does: run ``seconds``, write ``outputs``, exit ``exit_code``.

    ``outputs_link`` makes ``$KRUNTIME_OUTPUTS`` a symbolic link to that path instead.
    """

    seconds: float = 0.5
    exit_code: int = 0
    stdout: str = "hello\n"
    stderr: str = ""
    outputs: str | None = None
    outputs_link: Path | None = None


@dataclass
class FakeExecution:
    spec: ExecuteSpec
    state: ExecState = ExecState.RUNNING
    exit_code: int = 0
    stdout: str = ""
    stderr: str = ""
    cancel: trio.Event = field(default_factory=trio.Event)


class FakeRuntimeServer:
    """An in-memory Runtime Server (see the module docstring).

    Args:
        nursery: runs the executions.
        programs: per execution ID, the programs of successive Execute calls (the last one
            repeats); ``default`` otherwise.
    """

    def __init__(self, nursery: trio.Nursery, *, default: Program | None = None) -> None:
        self._nursery = nursery
        self.default = default or Program()
        self.programs: dict[str, list[Program]] = {}
        self.executions: dict[str, FakeExecution] = {}
        self.execute_calls: dict[str, int] = {}
        self.calls: list[tuple[str, str]] = []
        self.down = False
        self.execute_delay = 0.0
        self.execute_error: RpcRejected | None = None
        self.healthy = True

    def _check(self, method: str, uid: str = "") -> None:
        self.calls.append((method, uid))
        if self.down:
            raise ServerUnavailable(f"{method}: connection refused")

    def lose_all(self) -> None:
        for execution in self.executions.values():
            execution.cancel.set()
        self.executions.clear()

    async def execute(self, spec: ExecuteSpec) -> None:
        self._check("Execute", spec.id)
        if self.execute_delay:
            await trio.sleep(self.execute_delay)
        if self.execute_error is not None:
            raise self.execute_error
        if spec.id in self.executions:
            raise RpcRejected("Execute", "ALREADY_EXISTS", f"execution {spec.id} already exists")
        count = self.execute_calls.get(spec.id, 0)
        self.execute_calls[spec.id] = count + 1
        plan = self.programs.get(spec.id) or [self.default]
        program = plan[min(count, len(plan) - 1)]
        execution = FakeExecution(spec)
        self.executions[spec.id] = execution
        self._nursery.start_soon(self._run, execution, program)

    async def _run(self, execution: FakeExecution, program: Program) -> None:
        with trio.move_on_after(program.seconds):
            await execution.cancel.wait()
        if execution.cancel.is_set():
            execution.state, execution.exit_code = ExecState.FAILED, 143
            execution.stderr = "terminated\n"
            return
        if program.outputs is not None and execution.spec.env:
            Path(execution.spec.env["KRUNTIME_OUTPUTS"]).write_text(program.outputs)  # noqa: ASYNC240 - a test fake
        if program.outputs_link is not None and execution.spec.env:
            link = Path(execution.spec.env["KRUNTIME_OUTPUTS"])
            link.symlink_to(program.outputs_link)  # noqa: ASYNC240 - a test fake
        execution.stdout, execution.stderr = program.stdout, program.stderr
        execution.exit_code = program.exit_code
        execution.state = ExecState.SUCCEEDED if program.exit_code == 0 else ExecState.FAILED

    def _view(self, execution: FakeExecution) -> ServerView:
        return ServerView(
            execution.state,
            exit_code=execution.exit_code,
            stdout=execution.stdout,
            stderr=execution.stderr,
        )

    async def status(self, uid: str) -> ServerView:
        self._check("Status", uid)
        await trio.lowlevel.checkpoint()
        execution = self.executions.get(uid)
        return ServerView(ExecState.NOT_FOUND) if execution is None else self._view(execution)

    async def list(self) -> dict[str, ServerView]:
        self._check("List")
        await trio.lowlevel.checkpoint()
        return {uid: self._view(e) for uid, e in self.executions.items()}

    async def cancel(self, uid: str) -> None:
        self._check("Cancel", uid)
        execution = self.executions.get(uid)
        if execution is not None:
            execution.cancel.set()
        await trio.lowlevel.checkpoint()

    async def forget(self, uid: str) -> None:
        self._check("Forget", uid)
        execution = self.executions.get(uid)
        if execution is None:
            return
        if execution.state.active:
            raise ExecutionStillRunning("Forget", "FAILED_PRECONDITION", f"{uid} is running")
        del self.executions[uid]

    async def health(self) -> tuple[bool, str]:
        self._check("Health")
        return self.healthy, "ok" if self.healthy else "sick"


class RecordingEvents:
    """An EventSink that keeps what it was given."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def emit(self, obj: Any, *, type_: str, reason: str, message: str) -> None:
        self.events.append((type_, reason, message))
