"""The task lifecycle adapter on virtual time, against fakes of runtimed's own interfaces.

Seed 003 end to end through :class:`runtimed.tasks.TaskLifecycle`: claim, preparation,
asynchronous start, observation, outputs, retry, ExecutionLost, timeout, cancellation,
deletion, stale caches and restart safety. The Runtime Server and the Run store are the
fakes in ``runtimed_fakes``; files are real (``tmp_path``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from runtimed_builders import POD_UID, run_dict
from runtimed_fakes import FakeRunStore, FakeRuntimeServer, Program, RecordingEvents

from krt.kube.clock import TrioLinkedClock
from runtimed import tasks as tasks_module
from runtimed.identity import PodIdentity
from runtimed.runtime_client import RpcRejected
from runtimed.sources import Workspace
from runtimed.task_decisions import ExecState
from runtimed.tasks import TaskLifecycle, TaskTimings, rleg_delay
from servers.common.bounded import BoundedBuffer

EPOCH = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)
POD = PodIdentity(name="runtime-bash-abc", namespace="ns", uid=POD_UID)


@pytest.fixture
def clock() -> trio.testing.MockClock:
    """Virtual time that jumps only after 5 ms of real idleness (thread-backed file I/O)."""
    return trio.testing.MockClock(autojump_threshold=0.005)


@dataclass
class Harness:
    store: FakeRunStore
    server: FakeRuntimeServer
    workspace: Workspace
    events: RecordingEvents
    nursery: trio.Nursery
    lifecycle: TaskLifecycle | None = None
    scope: trio.CancelScope | None = None

    async def start(self, timings: TaskTimings | None = None, **options: Any) -> TaskLifecycle:
        options.setdefault("workers", 4)
        lifecycle = TaskLifecycle(
            pod=POD,
            cache=self.store,
            writer=self.store,
            server=self.server,
            workspace=self.workspace,
            clock=TrioLinkedClock(EPOCH),
            events=self.events,
            timings=timings or TaskTimings(rleg_period=0.05, sweep_period=5.0),
            **options,
        )
        self.store.handlers[:] = [lifecycle.on_run_event]

        async def run(task_status: trio.TaskStatus[trio.CancelScope]) -> None:
            with trio.CancelScope():
                await lifecycle.run(task_status=task_status)

        async def runner(
            *, task_status: trio.TaskStatus[trio.CancelScope] = trio.TASK_STATUS_IGNORED
        ) -> None:
            with trio.CancelScope() as scope:
                async with trio.open_nursery() as inner:
                    await inner.start(lambda task_status: lifecycle.run(task_status=task_status))
                    task_status.started(scope)

        del run
        self.scope = await self.nursery.start(runner)
        self.lifecycle = lifecycle
        for key in list(self.store.cache):
            lifecycle.queue.add(key)
        return lifecycle

    def stop(self) -> None:
        assert self.scope is not None
        self.scope.cancel()
        self.store.handlers.clear()

    def create(self, **kwargs: Any) -> str:
        obj = run_dict(**kwargs)
        self.store.create(obj)
        return f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"

    async def wait_phase(self, key: str, *phases: str, within: float = 120.0) -> dict[str, Any]:
        with trio.fail_after(within):
            while self.store.status(key).get("phase") not in phases:  # noqa: ASYNC110
                await trio.sleep(0.1)
        return self.store.status(key)

    async def wait_for(self, predicate: Any, within: float = 60.0) -> None:
        with trio.fail_after(within):
            while not predicate():  # noqa: ASYNC110
                await trio.sleep(0.1)


@asynccontextmanager
async def harness(
    tmp_path: Path, *, lag: float = 0.0, start: bool = True
) -> AsyncIterator[Harness]:
    async with trio.open_nursery() as nursery:
        h = Harness(
            store=FakeRunStore(nursery, lag=lag),
            server=FakeRuntimeServer(nursery),
            workspace=Workspace(root=tmp_path / "ws"),
            events=RecordingEvents(),
            nursery=nursery,
        )
        if start:
            await h.start()
        yield h
        nursery.cancel_scope.cancel()


def uid_of(h: Harness, key: str) -> str:
    return str(h.store.objects[key]["metadata"]["uid"])


# -- the happy path ------------------------------------------------------------------------------


async def test_inline_task_succeeds_with_outputs(
    tmp_path: Path, clock: trio.testing.MockClock
) -> None:
    async with harness(tmp_path) as h:
        h.server.default = Program(seconds=1.0, outputs="answer=42\n# comment\nname=x=y\n")
        key = h.create(source={"inline": "echo hi\n"})
        status = await h.wait_phase(key, "Succeeded", "Failed")
        uid = uid_of(h, key)
        assert status["phase"] == "Succeeded", status
        assert status["outputs"] == {"answer": "42", "name": "x=y"}
        assert status["startTime"]
        assert h.server.execute_calls == {uid: 1}
        spec = h.store.history[key]
        assert [s.get("phase") for s in spec] == ["Scheduled", "Running", "Succeeded"]
        # the execution was forgotten and the Run's files removed
        await h.wait_for(lambda: not (h.workspace.root / "runs" / uid).exists())
        assert uid not in h.server.executions
        assert h.lifecycle is not None
        assert h.lifecycle.local(uid) is None


async def test_execute_request_carries_entrypoint_env_and_outputs_path(
    tmp_path: Path, clock: trio.testing.MockClock
) -> None:
    async with harness(tmp_path) as h:
        seen: dict[str, Any] = {}
        original = h.server.execute

        async def spy(spec: Any) -> None:
            seen["spec"] = spec
            seen["script"] = (Path(spec.working_dir) / "main.sh").read_text()
            await original(spec)

        h.server.execute = spy  # type: ignore[method-assign]
        obj = run_dict(
            source={"inline": "echo $A\n", "inlinePath": "main.sh"}, task={"args": ["x"]}
        )
        obj["spec"]["env"] = [{"name": "A", "value": "1"}]
        h.store.create(obj)
        await h.wait_phase("ns/r1", "Succeeded")
        spec = seen["spec"]
        assert spec.entrypoint == "main.sh"
        assert list(spec.args) == ["x"]
        assert spec.env["A"] == "1"
        uid = obj["metadata"]["uid"]
        assert spec.env["KRUNTIME_OUTPUTS"] == str(h.workspace.root / "runs" / uid / "outputs")
        # the Run's identity, for tasks that key their side effects by Run and attempt
        assert spec.env["KRUNTIME_RUN_NAME"] == obj["metadata"]["name"]
        assert spec.env["KRUNTIME_RUN_NAMESPACE"] == obj["metadata"]["namespace"]
        assert spec.env["KRUNTIME_RUN_UID"] == uid
        assert spec.env["KRUNTIME_ATTEMPT"] == "1"
        assert spec.working_dir == str(h.workspace.root / "runs" / uid / "work")
        assert seen["script"] == "echo $A\n"


async def test_run_of_another_pod_is_never_touched(
    tmp_path: Path, clock: trio.testing.MockClock
) -> None:
    async with harness(tmp_path) as h:
        key = h.create(pod_uid="another-pod")
        await trio.sleep(5)
        assert h.store.status(key)["phase"] == "Scheduled"
        assert {method for method, _ in h.server.calls} == {"List"}


# -- failures and retry --------------------------------------------------------------------------


async def test_failing_task_ends_failed_with_exit_code_and_stderr_tail(
    tmp_path: Path, clock: trio.testing.MockClock
) -> None:
    async with harness(tmp_path) as h:
        h.server.default = Program(exit_code=3, stderr="line1\nfatal: boom\n")
        key = h.create()
        status = await h.wait_phase(key, "Failed", "Succeeded")
        assert status["phase"] == "Failed"
        assert status["reason"] == "ExecutionFailed"
        assert "exit code 3" in status["message"]
        assert "fatal: boom" in status["message"]
        assert "outputs" not in status


async def test_retry_fails_twice_then_succeeds_at_attempt_three(
    tmp_path: Path, clock: trio.testing.MockClock
) -> None:
    async with harness(tmp_path) as h:
        obj = run_dict(retry={"maxAttempts": 3, "backoff": "1s"})
        uid = obj["metadata"]["uid"]
        h.server.programs[uid] = [
            Program(exit_code=1),
            Program(exit_code=1),
            Program(outputs="ok=1\n"),
        ]
        attempts_seen: list[str] = []
        original = h.server.execute

        async def spy(spec: Any) -> None:
            attempts_seen.append(spec.env["KRUNTIME_ATTEMPT"])
            await original(spec)

        h.server.execute = spy  # type: ignore[method-assign]
        h.store.create(obj)
        start = trio.current_time()
        status = await h.wait_phase("ns/r1", "Succeeded", "Failed")
        assert status["phase"] == "Succeeded", status
        assert status["attempt"] == 3
        assert status["outputs"] == {"ok": "1"}
        assert h.server.execute_calls[uid] == 3
        assert attempts_seen == ["1", "2", "3"]  # $KRUNTIME_ATTEMPT names each attempt
        # exponential backoff: 1 s then 2 s between attempts
        assert trio.current_time() - start >= 3.0
        phases = [
            (s.get("phase"), s.get("attempt"), bool(s.get("retryAfter")))
            for s in h.store.history["ns/r1"]
        ]
        assert ("Running", 2, True) in phases
        assert ("Running", 3, True) in phases
        # F2: while attempt 2 runs, reason/message describe it, not the backoff before it
        resumed = [
            s
            for s in h.store.history["ns/r1"]
            if s.get("phase") == "Running" and s.get("attempt") == 2 and not s.get("retryAfter")
        ]
        assert resumed
        assert "reason" not in resumed[0]
        assert resumed[0]["message"] == (
            "attempt 2 of 3 running (attempt 1 failed: ExecutionFailed: exit code 1)"
        )


async def test_invalid_outputs_fail_permanently_naming_the_key(
    tmp_path: Path, clock: trio.testing.MockClock
) -> None:
    async with harness(tmp_path) as h:
        h.server.default = Program(outputs="bad key=1\n")
        key = h.create(retry={"maxAttempts": 3})
        status = await h.wait_phase(key, "Failed", "Succeeded")
        assert status["reason"] == "OutputsInvalid"
        assert "'bad key'" in status["message"]
        assert h.server.execute_calls[uid_of(h, key)] == 1


async def test_a_symlinked_outputs_file_fails_without_reading_the_target(
    tmp_path: Path, clock: trio.testing.MockClock
) -> None:
    """F17: ``ln -s /runtimed/side/file $KRUNTIME_OUTPUTS`` must not copy it into status."""
    secret = tmp_path / "runtimed-side"
    secret.write_text("TOKEN=secret-line-from-runtimed-side\n")
    async with harness(tmp_path) as h:
        h.server.default = Program(outputs_link=secret)
        key = h.create(retry={"maxAttempts": 3})
        status = await h.wait_phase(key, "Failed", "Succeeded")
        assert status["reason"] == "OutputsInvalid"
        assert "outputs file is a symbolic link" in status["message"]
        assert "secret" not in str(status)
        assert h.server.execute_calls[uid_of(h, key)] == 1  # permanent, like other bounds


async def test_oversized_output_value_names_the_bound(
    tmp_path: Path, clock: trio.testing.MockClock
) -> None:
    async with harness(tmp_path) as h:
        h.server.default = Program(outputs="big=" + "x" * 5000 + "\n")
        key = h.create()
        status = await h.wait_phase(key, "Failed", "Succeeded")
        assert status["reason"] == "OutputsInvalid"
        assert "'big'" in status["message"]
        assert "4096" in status["message"]


async def test_start_failure_is_applied_by_reconciliation_with_an_event(
    tmp_path: Path, clock: trio.testing.MockClock
) -> None:
    async with harness(tmp_path) as h:
        h.server.execute_error = RpcRejected("Execute", "UNAVAILABLE", "busy")
        key = h.create(retry={"maxAttempts": 2, "backoff": "0s"})
        status = await h.wait_phase(key, "Failed", "Succeeded")
        assert status["reason"] == "StartFailed"
        assert "UNAVAILABLE: busy" in status["message"]
        assert [e[1] for e in h.events.events] == ["StartFailed", "StartFailed"]  # retried


async def test_execute_rejected_as_invalid_fails_permanently_naming_the_fields(
    tmp_path: Path, clock: trio.testing.MockClock
) -> None:
    """F17: INVALID_ARGUMENT from Execute is the spec's fault: not retried, says what to set."""
    async with harness(tmp_path) as h:
        h.server.execute_error = RpcRejected(
            "Execute", "INVALID_ARGUMENT", "a Python task needs an entrypoint or args"
        )
        key = h.create(retry={"maxAttempts": 3, "backoff": "0s"})
        status = await h.wait_phase(key, "Failed", "Succeeded")
        assert status["reason"] == "ExecuteRejected"
        assert "a Python task needs an entrypoint or args" in status["message"]
        assert "set spec.mode.task.args, or spec.source" in status["message"]
        assert status["message"].endswith("ExecuteRejected is permanent")
        assert status["attempt"] == 1
        assert [e[1] for e in h.events.events] == ["StartFailed"]  # one Execute, one Event


async def test_preparation_failure_fails_the_run_in_the_claiming_reconciliation(
    tmp_path: Path, clock: trio.testing.MockClock
) -> None:
    async with harness(tmp_path) as h:
        key = h.create(source={"inline": "x", "inlinePath": "../escape.sh"})
        status = await h.wait_phase(key, "Failed", "Succeeded")
        assert status["reason"] == "PreparationFailed"
        assert "inlinePath" in status["message"]
        assert h.server.execute_calls == {}
        assert not (tmp_path / "ws" / "escape.sh").exists()


async def test_execution_lost_when_the_server_forgets_an_observed_execution(
    tmp_path: Path, clock: trio.testing.MockClock
) -> None:
    async with harness(tmp_path) as h:
        obj = run_dict(retry={"maxAttempts": 2, "backoff": "0s"})
        uid = obj["metadata"]["uid"]
        h.server.programs[uid] = [Program(seconds=30), Program(seconds=0.5)]
        h.store.create(obj)
        await h.wait_for(lambda: uid in h.server.executions)
        assert h.lifecycle is not None
        await h.wait_for(
            lambda: h.lifecycle.local(uid) is not None and h.lifecycle.local(uid).view.observed
        )
        h.server.lose_all()  # the Runtime Server restarted
        status = await h.wait_phase("ns/r1", "Succeeded", "Failed")
        assert status["phase"] == "Succeeded"
        assert status["attempt"] == 2
        reasons = [s.get("reason") for s in h.store.history["ns/r1"]]
        assert "ExecutionLost" in reasons
        assert h.server.execute_calls[uid] == 2


async def test_execution_lost_without_retry_fails(
    tmp_path: Path, clock: trio.testing.MockClock
) -> None:
    async with harness(tmp_path) as h:
        h.server.default = Program(seconds=30)
        key = h.create()
        uid = uid_of(h, key)
        await h.wait_for(lambda: uid in h.server.executions)
        await trio.sleep(1)
        h.server.lose_all()
        status = await h.wait_phase(key, "Failed")
        assert status["reason"] == "ExecutionLost"


# -- timeout, cancellation, deletion -------------------------------------------------------------


async def test_timeout_cancels_the_execution_and_ends_timeout(
    tmp_path: Path, clock: trio.testing.MockClock
) -> None:
    async with harness(tmp_path) as h:
        h.server.default = Program(seconds=600)
        key = h.create(timeout="5s")
        uid = uid_of(h, key)
        start = trio.current_time()
        status = await h.wait_phase(key, "Timeout", "Failed", "Succeeded")
        assert status["phase"] == "Timeout"
        assert status["reason"] == "TimeoutExceeded"
        assert 5.0 <= trio.current_time() - start < 7.0
        assert ("Cancel", uid) in h.server.calls
        assert uid not in h.server.executions


async def test_cancel_requested_cancels_forgets_and_ends_cancelled(
    tmp_path: Path, clock: trio.testing.MockClock
) -> None:
    async with harness(tmp_path) as h:
        h.server.default = Program(seconds=600)
        key = h.create()
        uid = uid_of(h, key)
        await h.wait_for(lambda: uid in h.server.executions)
        h.store.update_spec(key, cancelRequested=True)
        status = await h.wait_phase(key, "Cancelled", "Failed")
        assert status["phase"] == "Cancelled"
        methods = [m for m, u in h.server.calls if u == uid]
        assert methods.index("Cancel") < methods.index("Forget")
        await h.wait_for(lambda: not (h.workspace.root / "runs" / uid).exists())
        assert uid not in h.server.executions


async def test_deleting_a_running_run_cancels_its_execution(
    tmp_path: Path, clock: trio.testing.MockClock
) -> None:
    async with harness(tmp_path) as h:
        h.server.default = Program(seconds=600)
        key = h.create()
        uid = uid_of(h, key)
        await h.wait_for(lambda: uid in h.server.executions)
        h.store.delete(key)
        await h.wait_for(lambda: uid not in h.server.executions)
        assert ("Cancel", uid) in h.server.calls
        assert h.lifecycle is not None
        assert h.lifecycle.local(uid) is None


async def test_execute_succeeding_after_the_run_was_deleted_is_forgotten(
    tmp_path: Path, clock: trio.testing.MockClock
) -> None:
    async with harness(tmp_path) as h:
        h.server.default = Program(seconds=600)
        h.server.execute_delay = 3.0
        key = h.create()
        uid = uid_of(h, key)
        await h.wait_for(lambda: ("Execute", uid) in h.server.calls)
        h.store.delete(key)
        await trio.sleep(1)
        assert h.lifecycle is not None
        assert h.lifecycle.local(uid) is None
        await h.wait_for(lambda: h.server.execute_calls.get(uid) == 1)
        await h.wait_for(lambda: uid not in h.server.executions)
        assert ("Forget", uid) in h.server.calls


# -- caches, restarts, unreachable server --------------------------------------------------------


async def test_lagging_cache_never_double_claims_or_reruns(
    tmp_path: Path, clock: trio.testing.MockClock
) -> None:
    async with harness(tmp_path, lag=0.5) as h:
        h.server.default = Program(seconds=0.2, outputs="a=1\n")
        key = h.create()
        status = await h.wait_phase(key, "Succeeded", "Failed")
        assert status["phase"] == "Succeeded"
        await trio.sleep(5)
        assert h.server.execute_calls[uid_of(h, key)] == 1
        assert [s.get("phase") for s in h.store.history[key]] == [
            "Scheduled",
            "Running",
            "Succeeded",
        ]


async def test_restart_mid_execution_never_executes_twice(
    tmp_path: Path, clock: trio.testing.MockClock
) -> None:
    async with harness(tmp_path) as h:
        h.server.default = Program(seconds=10, outputs="done=1\n")
        key = h.create()
        uid = uid_of(h, key)
        await h.wait_for(lambda: uid in h.server.executions)
        h.stop()
        await trio.sleep(2)
        await h.start()  # a new runtimed: empty local state
        status = await h.wait_phase(key, "Succeeded", "Failed")
        assert status["phase"] == "Succeeded"
        assert status["outputs"] == {"done": "1"}
        assert h.server.execute_calls[uid] == 1


async def test_restart_after_claim_before_execute_starts_once(
    tmp_path: Path, clock: trio.testing.MockClock
) -> None:
    async with harness(tmp_path) as h:
        h.server.down = True
        key = h.create()
        await h.wait_phase(key, "Running")
        h.stop()
        h.server.down = False
        await h.start()
        status = await h.wait_phase(key, "Succeeded", "Failed")
        assert status["phase"] == "Succeeded"
        assert h.server.execute_calls[uid_of(h, key)] == 1


async def test_restart_between_retry_write_and_forget_forgets_before_resuming(
    tmp_path: Path, clock: trio.testing.MockClock
) -> None:
    async with harness(tmp_path, start=False) as h:
        # attempt 1 failed and the retry was persisted, but runtimed died before Forget
        obj = run_dict(
            phase="Running",
            attempt=2,
            retry={"maxAttempts": 2, "backoff": "1s"},
            start_time=EPOCH,
            retry_after=EPOCH,
        )
        uid = obj["metadata"]["uid"]
        h.store.create(obj)
        await h.server.execute(
            __import__("runtimed.runtime_client", fromlist=["ExecuteSpec"]).ExecuteSpec(
                id=uid, working_dir=""
            )
        )
        h.server.execute_calls[uid] = 0
        h.server.executions[uid].state = ExecState.FAILED
        h.server.programs[uid] = [Program(outputs="x=1\n")]
        await h.start()
        status = await h.wait_phase("ns/r1", "Succeeded", "Failed")
        assert status["phase"] == "Succeeded"
        assert status["attempt"] == 2
        assert h.server.execute_calls[uid] == 1


async def test_unreachable_server_changes_nothing_until_it_returns(
    tmp_path: Path, clock: trio.testing.MockClock
) -> None:
    async with harness(tmp_path) as h:
        h.server.default = Program(seconds=2)
        key = h.create()
        uid = uid_of(h, key)
        await h.wait_for(lambda: uid in h.server.executions)
        h.server.down = True
        await trio.sleep(20)
        assert h.store.status(key)["phase"] == "Running"
        h.server.down = False
        status = await h.wait_phase(key, "Succeeded", "Failed")
        assert status["phase"] == "Succeeded"


async def test_startup_sweep_cleans_executions_of_unknown_and_terminal_runs(
    tmp_path: Path, clock: trio.testing.MockClock
) -> None:
    async with harness(tmp_path, start=False) as h:
        from runtimed.runtime_client import ExecuteSpec

        h.server.default = Program(seconds=600)
        done = run_dict(name="done", phase="Succeeded")
        h.store.create(done)
        await h.server.execute(ExecuteSpec(id="gone-uid", working_dir=""))
        await h.server.execute(ExecuteSpec(id=done["metadata"]["uid"], working_dir=""))
        (h.workspace.root / "runs" / "stray").mkdir(parents=True)
        await h.start()
        await h.wait_for(lambda: not h.server.executions, within=30)
        assert not (h.workspace.root / "runs" / "stray").exists()


async def test_cancel_written_while_the_cache_lags_our_claim_is_honoured(
    tmp_path: Path, clock: trio.testing.MockClock
) -> None:
    async with harness(tmp_path, lag=1.0) as h:
        h.server.default = Program(seconds=600)
        key = h.create()
        uid = uid_of(h, key)
        await h.wait_for(lambda: uid in h.server.executions)
        h.store.update_spec(key, cancelRequested=True)
        status = await h.wait_phase(key, "Cancelled", "Failed", "Succeeded")
        assert status["phase"] == "Cancelled"
        assert h.server.execute_calls[uid] == 1
        assert uid not in h.server.executions


async def test_many_runs_in_parallel_each_execute_once(
    tmp_path: Path, clock: trio.testing.MockClock
) -> None:
    async with harness(tmp_path, lag=0.05) as h:
        h.server.default = Program(seconds=0.3, outputs="k=v\n")
        keys = [h.create(name=f"r{i}") for i in range(30)]
        for key in keys:
            status = await h.wait_phase(key, "Succeeded", "Failed")
            assert status["phase"] == "Succeeded"
        assert sorted(h.server.execute_calls.values()) == [1] * 30
        assert not h.server.executions


# -- output logging ------------------------------------------------------------------------------


def _logged(caplog: pytest.LogCaptureFixture, uid: str) -> list[tuple[str, str, int]]:
    """(stream, line, attempt) of every task output line logged for Run ``uid``."""
    return [
        (str(r.__dict__["stream"]), r.getMessage(), int(r.__dict__["attempt"]))
        for r in caplog.records
        if r.name == "runtimed.task" and r.__dict__.get("run_uid") == uid and "stream" in r.__dict__
    ]


async def test_output_of_a_running_task_is_logged_while_it_runs_each_line_once(
    tmp_path: Path, clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """``krt logs -f`` shows lines as they come: complete lines are logged during the run."""
    caplog.set_level("INFO", logger="runtimed.task")
    async with harness(tmp_path) as h:
        h.server.default = Program(seconds=20.0, stdout="one\ntwo\nthree", stderr="warn\n")
        key = h.create()
        uid = uid_of(h, key)
        await h.wait_for(lambda: uid in h.server.executions)
        execution = h.server.executions[uid]
        execution.stdout = "one\ntw"  # a partial line is held back until it is complete
        await trio.sleep(5)
        assert _logged(caplog, uid) == [("stdout", "one", 1)]
        execution.stdout, execution.stderr = "one\ntwo\n", "warn\n"
        await trio.sleep(5)
        assert h.store.status(key)["phase"] == "Running"
        assert sorted(_logged(caplog, uid)) == [
            ("stderr", "warn", 1),
            ("stdout", "one", 1),
            ("stdout", "two", 1),
        ]
        status = await h.wait_phase(key, "Succeeded", "Failed")
        assert status["phase"] == "Succeeded"
        # the rest (the unterminated last line included) comes at the end, nothing twice
        assert sorted(_logged(caplog, uid)) == [
            ("stderr", "warn", 1),
            ("stdout", "one", 1),
            ("stdout", "three", 1),
            ("stdout", "two", 1),
        ]


async def test_a_restarted_runtimed_relogs_lines_at_the_offsets_they_were_logged_at(
    tmp_path: Path, clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """F16: the new instance logs the kept output again; offsets let krt logs show it once."""
    caplog.set_level("INFO", logger="runtimed.task")
    async with harness(tmp_path) as h:
        h.server.default = Program(seconds=20.0, stdout="a\nb\nc\nd\n")
        key = h.create()
        uid = uid_of(h, key)
        await h.wait_for(lambda: uid in h.server.executions)
        h.server.executions[uid].stdout = "a\nb\n"
        await trio.sleep(5)
        h.stop()  # runtimed restarts after logging a and b live
        await trio.sleep(1)
        await h.start()
        status = await h.wait_phase(key, "Succeeded", "Failed")
        assert status["phase"] == "Succeeded"
    logged = [
        (r.getMessage(), r.__dict__.get("offset"))
        for r in caplog.records
        if r.name == "runtimed.task"
        and r.__dict__.get("run_uid") == uid
        and r.__dict__.get("stream") == "stdout"
    ]
    assert logged[:2] == [("a", 0), ("b", 2)]
    assert set(logged[2:]) == {("a", 0), ("b", 2), ("c", 4), ("d", 6)}


async def test_each_attempt_logs_its_own_output_in_full(
    tmp_path: Path, clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="runtimed.task")
    async with harness(tmp_path) as h:
        obj = run_dict(retry={"maxAttempts": 2, "backoff": "1s"})
        uid = obj["metadata"]["uid"]
        h.server.programs[uid] = [
            Program(seconds=5.0, exit_code=1, stdout="a1\nb1\n"),
            Program(seconds=5.0, stdout="a2\n"),
        ]
        h.store.create(obj)
        status = await h.wait_phase("ns/r1", "Succeeded", "Failed")
        assert status["phase"] == "Succeeded"
        assert sorted(_logged(caplog, uid)) == [
            ("stdout", "a1", 1),
            ("stdout", "a2", 2),
            ("stdout", "b1", 1),
        ]


async def test_logged_output_is_bounded_per_stream_and_attempt(
    tmp_path: Path,
    clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At most MAX_LOGGED_LINES lines per stream, counted across follow and final logging."""
    monkeypatch.setattr(tasks_module, "MAX_LOGGED_LINES", 3)
    caplog.set_level("INFO", logger="runtimed.task")
    async with harness(tmp_path) as h:
        h.server.default = Program(
            seconds=10.0, stdout="1\n2\n3\n4\n5\n", stderr="e1\ne2\ne3\ne4\n"
        )
        key = h.create()
        uid = uid_of(h, key)
        await h.wait_for(lambda: uid in h.server.executions)
        h.server.executions[uid].stdout = "1\n2\n"
        await trio.sleep(3)
        assert _logged(caplog, uid) == [("stdout", "1", 1), ("stdout", "2", 1)]
        await h.wait_phase(key, "Succeeded", "Failed")
        lines = [(stream, line) for stream, line, _ in _logged(caplog, uid)]
        assert lines == [
            ("stdout", "1"),
            ("stdout", "2"),
            ("stdout", "3"),
            ("stdout", "2 more lines not logged"),
            ("stderr", "e1"),
            ("stderr", "e2"),
            ("stderr", "e3"),
            ("stderr", "1 more lines not logged"),
        ]


async def test_live_following_says_when_it_pauses(
    tmp_path: Path,
    clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """When the next line does not fit FOLLOW_MAX_BYTES the follower stops; one stderr line
    says so, then the rest comes at the end."""
    monkeypatch.setattr(tasks_module, "FOLLOW_MAX_BYTES", 4)
    caplog.set_level("INFO", logger="runtimed.task")
    async with harness(tmp_path) as h:
        h.server.default = Program(seconds=10.0, stdout="one\ntwo\nthree\n")
        key = h.create()
        uid = uid_of(h, key)
        await h.wait_for(lambda: uid in h.server.executions)
        h.server.executions[uid].stdout = "one\ntwo\n"
        await trio.sleep(3)
        paused = ("stderr", "live output paused after 0 KiB; the rest is logged when the task ends")
        # "one\n" is the 4-byte budget: "two" waits for the end
        assert [(s, line) for s, line, _ in _logged(caplog, uid)] == [("stdout", "one"), paused]
        await h.wait_phase(key, "Succeeded", "Failed")
        lines = [(s, line) for s, line, _ in _logged(caplog, uid)]
        assert lines == [("stdout", "one"), paused, ("stdout", "two"), ("stdout", "three")]


#: the finding's task (T_findings F1): ``print('line %d %s' % (i, 'x' * 56))`` 100,000 times
BIG_LINES = 100_000


def _big_line(i: int) -> bytes:
    return b"line %d %s\n" % (i, b"x" * 56)


async def _print_through_bounded_buffer(
    execution: Any, *, first: int, pause: float, per_chunk: int
) -> BoundedBuffer:
    """Print BIG_LINES lines as the real Runtime Server shows them while the task runs.

    ``first`` lines, then ``pause`` s, then the rest ``per_chunk`` lines every 50 ms; after
    each write the execution's stdout is the server's text: head + marker (count so far) + a
    tail window that moves.
    """
    buffer = BoundedBuffer()
    i = 1
    while i <= BIG_LINES:
        n = first if i == 1 else per_chunk
        buffer.write(b"".join(_big_line(j) for j in range(i, min(i + n, BIG_LINES + 1))))
        execution.stdout = buffer.text()
        i += n
        await trio.sleep(pause if i == first + 1 else 0.05)
    return buffer


@pytest.mark.parametrize(
    ("delay", "first", "pause", "per_chunk"),
    [
        (0.0, 2_500, 0.05, 2_500),  # a follow tick falls while the buffer wraps
        (0.35, 2_500, 0.05, 2_500),
        (0.7, 7_000, 0.05, 1_500),
        (0.1, 100, 1.5, 2_500),  # a few lines followed live, then a flood
        (0.1, 5_000, 1.5, 2_500),  # first read already past the budget, not yet wrapping
    ],
)
async def test_a_large_output_is_logged_as_documented_whenever_the_follower_reads(
    tmp_path: Path,
    clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
    delay: float,
    first: int,
    pause: float,
    per_chunk: int,
) -> None:
    """docs/usage.md "Logs" for 6,788,895 bytes of stdout (T_findings F1), at any tick phase.

    Live: at most 64 KiB, then the paused line. Final: the first 256 KiB, the marker with the
    *final* dropped count, then lines up to 10,000 and ``N more lines not logged``.
    """
    caplog.set_level("INFO", logger="runtimed.task")
    final = BoundedBuffer()
    for start in range(1, BIG_LINES + 1, 10_000):
        final.write(b"".join(_big_line(j) for j in range(start, start + 10_000)))
    total = sum(len(_big_line(j)) for j in range(1, BIG_LINES + 1))
    assert total == 6_788_895
    async with harness(tmp_path) as h:
        printing = pause + 0.05 * (BIG_LINES - first) / per_chunk
        h.server.default = Program(seconds=delay + printing + 3.0, stdout=final.text())
        key = h.create()
        uid = uid_of(h, key)
        await h.wait_for(lambda: uid in h.server.executions)
        await trio.sleep(delay)
        await _print_through_bounded_buffer(
            h.server.executions[uid], first=first, pause=pause, per_chunk=per_chunk
        )
        await trio.sleep(1.5)  # the follower has had its chances; the task still runs
        assert h.store.status(key)["phase"] == "Running"
        live = _logged(caplog, uid)
        paused = (
            "stderr",
            "live output paused after 64 KiB; the rest is logged when the task ends",
        )
        assert [(s, line) for s, line, _ in live if s == "stderr"] == [paused]
        live_bytes = sum(len(line.encode()) + 1 for s, line, _ in live if s == "stdout")
        assert 0 < live_bytes <= 64 * 1024
        assert 64 * 1024 - live_bytes < len(_big_line(BIG_LINES))  # whole lines, budget used
        status = await h.wait_phase(key, "Succeeded", "Failed")
        assert status["phase"] == "Succeeded"
    stdout = [line for s, line, _ in _logged(caplog, uid) if s == "stdout"]
    kept = final.text().splitlines()
    assert stdout == [*kept[:10_000], f"{len(kept) - 10_000} more lines not logged"]
    marker = [line for line in stdout if "bytes of output dropped" in line]
    assert marker == [
        f"[... {total - 1024 * 1024} bytes of output dropped by the Runtime Server"
        f" (kept the first {256 * 1024} and the last {768 * 1024} bytes) ...]"
    ]
    assert stdout[0] == "line 1 " + "x" * 56
    assert [s for s, _, _ in _logged(caplog, uid)].count("stderr") == 1


async def test_following_a_silent_task_backs_off(
    tmp_path: Path, clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A long task that prints nothing is asked for its output ever less often."""
    caplog.set_level("INFO", logger="runtimed.task")
    async with harness(tmp_path, start=False) as h:
        await h.start(TaskTimings(rleg_period=1.0, sweep_period=60.0))
        h.server.default = Program(seconds=120.0, stdout="")
        key = h.create()
        uid = uid_of(h, key)
        await h.wait_for(lambda: uid in h.server.executions)
        await trio.sleep(5)
        before = h.server.calls.count(("Status", uid))
        await trio.sleep(40)  # 40 reads at a fixed 1 s pace; 1+2+4+8+8+8+8 s backing off
        assert h.server.calls.count(("Status", uid)) - before <= 8
        h.server.executions[uid].stdout = "now\n"  # seen within the longest follow interval
        await trio.sleep(tasks_module.FOLLOW_MAX_DELAY_PERIODS + 1)
        assert h.store.status(key)["phase"] == "Running"
        assert _logged(caplog, uid) == [("stdout", "now", 1)]


def test_rleg_delay_stays_bounded_after_any_number_of_quiet_polls() -> None:
    """Thousands of quiet RLEG polls (minutes of a silent task) never overflow its back-off."""
    assert rleg_delay(0, fastest=0.01, slowest=0.2) == 0.01
    assert rleg_delay(tasks_module.RLEG_FAST_POLLS + 2, fastest=0.01, slowest=0.2) == 0.04
    for quiet in (1_030, 5_000, 10**6):
        assert rleg_delay(quiet, fastest=0.01, slowest=0.2) == 0.2


# -- issue 6: RLEG pacing under a burst, the per-Run stage timeline ---------------------------


def _list_starts(h: Harness, *, answer_after: float = 0.0) -> list[float]:
    """Record the virtual time of every RLEG ``List`` (answered after ``answer_after`` s)."""
    starts: list[float] = []
    original = h.server.list

    async def timed_list() -> dict[str, Any]:
        starts.append(trio.current_time())
        await trio.sleep(answer_after)
        return await original()

    h.server.list = timed_list  # type: ignore[method-assign]
    return starts


async def test_a_burst_of_starts_never_polls_list_faster_than_the_floor(
    tmp_path: Path, clock: trio.testing.MockClock
) -> None:
    """Every observation wakes the RLEG; a burst of them must not become a List per
    wake-up: polls stay ``rleg_min_period`` apart."""
    async with harness(tmp_path, start=False) as h:
        starts = _list_starts(h)
        await h.start(TaskTimings(rleg_period=0.2, rleg_min_period=0.01, sweep_period=60.0))
        starts.clear()  # the start-up sweep's List is not the RLEG's
        h.server.default = Program(seconds=0.5)
        keys = [h.create(name=f"burst{i}") for i in range(25)]
        for key in keys:
            assert (await h.wait_phase(key, "Succeeded", "Failed"))["phase"] == "Succeeded"
        gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
        assert len(starts) >= 3
        assert min(gaps) >= 0.01 - 1e-9, sorted(gaps)[:5]


async def test_a_slow_list_is_polled_at_most_a_quarter_of_the_time(
    tmp_path: Path, clock: trio.testing.MockClock
) -> None:
    """A List that takes 50 ms (a loaded server) is followed by at least 150 ms of quiet."""
    async with harness(tmp_path, start=False) as h:
        starts = _list_starts(h, answer_after=0.05)
        await h.start(TaskTimings(rleg_period=0.2, rleg_min_period=0.01, sweep_period=60.0))
        starts.clear()  # the start-up sweep's List is not the RLEG's
        h.server.default = Program(seconds=1.0)
        keys = [h.create(name=f"slow{i}") for i in range(5)]
        for key in keys:
            assert (await h.wait_phase(key, "Succeeded", "Failed"))["phase"] == "Succeeded"
        # (the first List of the spell is exempt: see the idle-spell test below)
        gaps = [b - a for a, b in zip(starts[1:], starts[2:], strict=False)]
        assert len(starts) >= 4
        assert min(gaps) >= 0.05 + tasks_module.RLEG_LOAD_FACTOR * 0.05 - 1e-9, sorted(gaps)[:5]


async def test_a_new_execution_is_first_listed_one_min_period_after_its_execute(
    tmp_path: Path, clock: trio.testing.MockClock
) -> None:
    """Issue 6: a List right after Execute always finds the new execution running (and
    under load its slow answer stretches the floor); the first poll after an idle spell
    waits ``rleg_min_period``, so a task shorter than that is seen finished by one List."""
    async with harness(tmp_path, start=False) as h:
        starts = _list_starts(h)
        executed: list[float] = []
        original = h.server.execute

        async def timed_execute(spec: Any) -> None:
            await original(spec)
            executed.append(trio.current_time())

        h.server.execute = timed_execute  # type: ignore[method-assign]
        await h.start(TaskTimings(rleg_period=0.2, rleg_min_period=0.01, sweep_period=60.0))
        starts.clear()  # the start-up sweep's List is not the RLEG's
        h.server.default = Program(seconds=0.004)
        key = h.create()
        assert (await h.wait_phase(key, "Succeeded", "Failed"))["phase"] == "Succeeded"
        assert len(executed) == 1
        assert len(starts) == 1, [round(t - executed[0], 4) for t in starts]
        assert starts[0] - executed[0] >= 0.01 - 1e-9


async def test_a_trivial_task_is_seen_finished_within_a_few_milliseconds(
    tmp_path: Path, clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 6: with the default timings a 2 ms task (bash ``exit 0`` on an idle Pod) is
    seen finished within 5 ms of its Execute, by at most two Lists."""
    caplog.set_level("INFO", logger="runtimed.task")
    async with harness(tmp_path, start=False) as h:
        starts = _list_starts(h)
        await h.start(TaskTimings())
        starts.clear()  # the start-up sweep's List is not the RLEG's
        h.server.default = Program(seconds=0.002)
        key = h.create()
        assert (await h.wait_phase(key, "Succeeded", "Failed"))["phase"] == "Succeeded"
        (line,) = [r for r in caplog.records if r.getMessage() == "task succeeded"]
        assert line.__dict__["stages_ms"]["executed->finished"] <= 5.0
        assert len(starts) <= 2


async def test_the_first_list_after_an_idle_spell_is_not_followed_by_the_load_floor(
    tmp_path: Path, clock: trio.testing.MockClock
) -> None:
    """Issue 6: the first List after a start waits while the server starts the process; its
    slow answer is no sign of load, so the next poll comes ``rleg_min_period`` after it
    (later Lists keep the floor: see the slow-List tests above)."""
    async with harness(tmp_path, start=False) as h:
        starts: list[float] = []
        ends: list[float] = []
        original = h.server.list

        async def first_list_slow() -> dict[str, Any]:
            starts.append(trio.current_time())
            if len(starts) == 2:  # (the first is the start-up sweep's)
                await trio.sleep(0.006)
            answer = await original()
            ends.append(trio.current_time())
            return answer

        h.server.list = first_list_slow  # type: ignore[method-assign]
        await h.start(TaskTimings(rleg_period=0.2, rleg_min_period=0.004, sweep_period=60.0))
        h.server.default = Program(seconds=0.015)
        key = h.create()
        assert (await h.wait_phase(key, "Succeeded", "Failed"))["phase"] == "Succeeded"
        assert len(starts) >= 3
        assert starts[2] - ends[1] <= 0.004 + 1e-9, (starts, ends)


async def test_the_terminal_log_line_carries_the_stage_timeline(
    tmp_path: Path, clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """``task succeeded`` names the Run and how long each lifecycle stage took (ms), so
    bench/task_runs.py can break the latency down; the informer delivery time is there too."""
    caplog.set_level("INFO", logger="runtimed.task")
    async with harness(tmp_path) as h:
        h.server.default = Program(seconds=2.0)
        key = h.create()
        await h.wait_phase(key, "Succeeded", "Failed")
        uid = uid_of(h, key)
        (line,) = [
            r
            for r in caplog.records
            if r.name == "runtimed.task" and r.getMessage() == "task succeeded"
        ]
        assert line.__dict__["run_uid"] == uid
        stages = line.__dict__["stages_ms"]
        assert list(stages) == [
            "seen->claimed",
            "claimed->prepared",
            "prepared->start",
            "start->executed",
            "executed->finished",
            "finished->completed",
        ]
        # the fake execution runs 2 s of (virtual, wall-linked) time: it is in one stage
        assert 2000.0 <= stages["executed->finished"] <= 2300.0
        assert isinstance(line.__dict__["seen_at"], float)
        assert h.lifecycle is not None
        await h.wait_for(lambda: h.lifecycle is not None and h.lifecycle.local(uid) is None)


async def test_a_failed_run_logs_its_timeline_on_the_failure_line(
    tmp_path: Path, clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="runtimed.task")
    async with harness(tmp_path) as h:
        h.server.default = Program(seconds=0.5, exit_code=2, stderr="bad\n")
        key = h.create()
        await h.wait_phase(key, "Failed", "Succeeded")
        (line,) = [
            r
            for r in caplog.records
            if r.name == "runtimed.task" and r.getMessage().startswith("task failed")
        ]
        assert "finished->completed" in line.__dict__["stages_ms"]


async def test_one_very_slow_list_delays_the_next_poll_no_more_than_the_slowest_pace(
    tmp_path: Path, clock: trio.testing.MockClock
) -> None:
    """A List that took 2 s (a stalled server) is followed by a pause of ``rleg_period``
    (0.2 s), not 2 s: the end of a task is still seen promptly afterwards."""
    async with harness(tmp_path, start=False) as h:
        starts = _list_starts(h, answer_after=2.0)
        await h.start(TaskTimings(rleg_period=0.2, rleg_min_period=0.01, sweep_period=60.0))
        starts.clear()
        h.server.default = Program(seconds=10.0)
        key = h.create()
        await h.wait_phase(key, "Succeeded", "Failed", within=60)
        gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
        assert len(gaps) >= 3
        assert max(gaps) <= 2.0 + 0.2 + 1e-9, sorted(gaps)[-3:]
        # the 2 s answer plus the capped floor (the spell's first List is exempt, see below)
        assert min(gaps[1:]) >= 2.0 + 0.2 - 1e-9


# -- burst ordering (issue 6) ----------------------------------------------------------------------


async def test_a_claim_is_followed_at_once_by_the_next_reconciliation(
    tmp_path: Path, clock: trio.testing.MockClock
) -> None:
    """One worker, three queued Runs: the first Run's Status (seed 003 step 3, a later
    reconciliation than its claim) comes before the second Run's claim, instead of queueing
    behind every Run that arrived meanwhile."""
    async with harness(tmp_path, start=False) as h:
        keys = [h.create(name=f"r{i}") for i in range(3)]
        uids = [uid_of(h, key) for key in keys]
        events: list[str] = []
        write, status = h.store.write_status, h.server.status

        async def recording_write(obj: Any, new_status: Any) -> Any:
            events.append(f"{new_status.get('phase')} {obj['metadata']['uid']}")
            return await write(obj, new_status)

        async def recording_status(uid: str) -> Any:
            events.append(f"Status {uid}")
            return await status(uid)

        h.store.write_status = recording_write  # type: ignore[method-assign]
        h.server.status = recording_status  # type: ignore[method-assign]
        await h.start(workers=1)
        for key in keys:
            await h.wait_phase(key, "Succeeded")
        for first, second in zip(uids, uids[1:], strict=False):
            assert events.index(f"Status {first}") < events.index(f"Running {second}"), events
            assert events.index(f"Running {first}") < events.index(f"Status {first}")
        assert h.server.execute_calls == dict.fromkeys(uids, 1)


async def test_the_start_window_bounds_runs_between_claim_and_start_oldest_first(
    tmp_path: Path, clock: trio.testing.MockClock
) -> None:
    """Issue 6: at most ``start_window`` Runs are claimed and not yet started; the others
    wait and are claimed in the order they arrived."""
    async with harness(tmp_path, start=False) as h:
        h.server.default = Program(seconds=0.5)
        keys = [h.create(name=f"r{i:02d}") for i in range(12)]
        uids = [uid_of(h, key) for key in keys]
        claimed: list[str] = []
        started: set[str] = set()
        most = 0
        write, execute = h.store.write_status, h.server.execute

        async def recording_write(obj: Any, new_status: Any) -> Any:
            nonlocal most
            if new_status.get("phase") == "Running" and "startTime" in new_status:
                claimed.append(obj["metadata"]["uid"])
                most = max(most, len(set(claimed) - started))
            return await write(obj, new_status)

        async def slow_execute(spec: Any) -> None:
            await trio.sleep(0.2)  # the start takes a while: claims pile up behind it
            await execute(spec)
            started.add(spec.id)

        h.store.write_status = recording_write  # type: ignore[method-assign]
        h.server.execute = slow_execute  # type: ignore[method-assign]
        lifecycle = await h.start(workers=8, start_window=3)
        for key in keys:
            await h.wait_phase(key, "Succeeded")
        assert most == 3
        assert sorted(claimed) == sorted(uids)
        assert lifecycle.window.holders == 0
        assert lifecycle.window.parked == []


async def test_a_running_execution_holds_no_place_in_the_start_window(
    tmp_path: Path, clock: trio.testing.MockClock
) -> None:
    """A long task does not keep the next Runs from starting (capacity is not reduced)."""
    async with harness(tmp_path, start=False) as h:
        await h.start(start_window=1)
        h.server.default = Program(seconds=600.0)
        long_key = h.create(name="long")
        await h.wait_for(lambda: uid_of(h, long_key) in h.server.execute_calls)
        h.server.default = Program(seconds=1.0)
        short = [h.create(name=f"s{i}") for i in range(3)]
        for key in short:
            await h.wait_phase(key, "Succeeded", within=60)
        assert h.store.status(long_key)["phase"] == "Running"


async def test_a_parked_run_that_no_longer_claims_does_not_stall_the_line(
    tmp_path: Path, clock: trio.testing.MockClock
) -> None:
    async with harness(tmp_path, start=False) as h:
        h.server.default = Program(seconds=1.0)
        release = trio.Event()
        execute = h.server.execute

        async def gated_execute(spec: Any) -> None:
            await release.wait()
            await execute(spec)

        h.server.execute = gated_execute  # type: ignore[method-assign]
        lifecycle = await h.start(start_window=1)
        first = h.create(name="a")
        await h.wait_phase(first, "Running")
        gone = h.create(name="b")
        await h.wait_for(lambda: lifecycle.window.parked == [gone])
        last = h.create(name="c")
        await h.wait_for(lambda: lifecycle.window.parked == [gone, last])
        h.store.delete(gone)  # the oldest parked Run disappears
        release.set()
        await h.wait_phase(first, "Succeeded")
        await h.wait_phase(last, "Succeeded")
        assert lifecycle.window.parked == []


async def test_a_run_is_parsed_once_per_resource_version(
    tmp_path: Path, clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    parsed: list[str] = []
    real = tasks_module.Run.from_dict

    def counting(obj: Any) -> Any:
        parsed.append(obj["metadata"]["resourceVersion"])
        return real(obj)

    monkeypatch.setattr(tasks_module.Run, "from_dict", staticmethod(counting))
    async with harness(tmp_path) as h:
        h.server.default = Program(seconds=5.0)  # several reconciliations while it runs
        key = h.create()
        await h.wait_phase(key, "Succeeded")
    assert len(parsed) == len(set(parsed)), parsed


@pytest.mark.parametrize("seconds", [0.0, 0.5, 5.0])
async def test_a_run_costs_two_status_calls(
    tmp_path: Path, clock: trio.testing.MockClock, seconds: float
) -> None:
    """Issue 6: Status before Execute (NOT_FOUND) and Status of the finished execution, no
    more: an accepted Execute is the server reporting the execution (seed 003 step 5), so
    the reconciliation the start worker enqueues asks nothing, and the RLEG's PENDING <->
    RUNNING changes enqueue nothing (reconciliation observes both alike)."""
    async with harness(tmp_path, start=False) as h:
        # (no output following: its own Status reads are not reconciliations)
        await h.start(TaskTimings(rleg_period=0.05, sweep_period=1000.0, follow_period=1000.0))
        execute = h.server.execute
        states: list[ExecState] = []

        async def pending_then_running(spec: Any) -> None:
            await execute(spec)
            execution = h.server.executions[spec.id]
            execution.state = ExecState.PENDING
            await trio.sleep(min(0.05, seconds / 2))
            states.append(execution.state)
            if execution.state is ExecState.PENDING:
                execution.state = ExecState.RUNNING

        h.server.default = Program(seconds=seconds)
        h.server.execute = pending_then_running  # type: ignore[method-assign]
        key = h.create()
        await h.wait_phase(key, "Succeeded")
        uid = uid_of(h, key)
        assert [m for m, u in h.server.calls if u == uid] == [
            "Status",
            "Execute",
            "Status",
            "Forget",
        ]


async def test_an_execution_lost_after_an_accepted_execute_is_seen_by_the_rleg(
    tmp_path: Path, clock: trio.testing.MockClock
) -> None:
    """The Status-free observation of an accepted Execute still ends in ExecutionLost when
    the server loses the execution before any Status (the RLEG's List reports NOT_FOUND)."""
    async with harness(tmp_path) as h:
        execute = h.server.execute

        async def lost(spec: Any) -> None:
            await execute(spec)
            h.server.lose_all()

        h.server.default = Program(seconds=5.0)
        h.server.execute = lost  # type: ignore[method-assign]
        key = h.create(retry={"maxAttempts": 1})
        status = await h.wait_phase(key, "Failed")
        assert status["reason"] == "ExecutionLost"
        uid = uid_of(h, key)
        assert [m for m, u in h.server.calls if u == uid].count("Status") == 2


async def test_a_runs_paths_are_built_once_and_dropped_with_its_files(
    tmp_path: Path, clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 6: prepare, Execute, outputs and removal share one ``Workspace.files`` of the
    Run (it was built at every step), and nothing of it stays once the Run ended here."""
    built: list[str] = []
    files = Workspace.files

    def counting(self: Workspace, uid: str) -> Any:
        built.append(uid)
        return files(self, uid)

    monkeypatch.setattr(Workspace, "files", counting)
    async with harness(tmp_path) as h:
        h.server.default = Program(seconds=1.0, stdout="")
        key = h.create()
        await h.wait_phase(key, "Succeeded")
        uid = uid_of(h, key)
        lifecycle = h.lifecycle
        assert lifecycle is not None
        await h.wait_for(lambda: lifecycle.local(uid) is None)
        assert built.count(uid) == 1
        assert uid not in lifecycle._files
        assert not (tmp_path / "ws" / "runs" / uid).exists()


async def test_a_successful_run_costs_one_info_line(
    tmp_path: Path, clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 6: progress lines are DEBUG; the terminal line (with the timeline) is the one
    INFO line of a quiet successful Run (task output lines come on top)."""
    caplog.set_level("INFO", logger="runtimed")
    async with harness(tmp_path) as h:
        h.server.default = Program(seconds=1.0, stdout="")
        key = h.create()
        await h.wait_phase(key, "Succeeded")
        uid = uid_of(h, key)
        lines = [r.getMessage() for r in caplog.records if r.__dict__.get("run_uid") == uid]
        assert lines == ["task succeeded"]


async def test_a_reconciliation_without_news_reuses_the_last_running_answer(
    tmp_path: Path, clock: trio.testing.MockClock
) -> None:
    """Issue 6: reconciling an observed execution again at the same Run version asks no
    Status (the RLEG reports changes); a new version (cancel) asks again and acts."""
    async with harness(tmp_path, start=False) as h:
        # (no output following: its own Status reads are not reconciliations)
        lifecycle = await h.start(
            TaskTimings(rleg_period=0.05, sweep_period=5.0, follow_period=1000.0)
        )
        h.server.default = Program(seconds=60.0)
        key = h.create()
        uid = uid_of(h, key)
        await h.wait_for(
            lambda: (local := lifecycle.local(uid)) is not None and local.view.observed
        )
        await trio.sleep(0.5)
        before = h.server.calls.count(("Status", uid))
        for _ in range(5):
            lifecycle.queue.add(key)
            await trio.sleep(0.1)
        assert h.server.calls.count(("Status", uid)) == before
        h.store.update_spec(key, cancelRequested=True)
        assert (await h.wait_phase(key, "Cancelled"))["phase"] == "Cancelled"
        assert h.server.calls.count(("Status", uid)) > before


async def test_the_watch_echo_of_our_own_write_starts_no_reconciliation(
    tmp_path: Path, clock: trio.testing.MockClock
) -> None:
    """Issue 6: a Run costs three reconciliations here (claim and start, the started
    execution seen running, its end), not five: the echoes of the claim and of the terminal
    write carry nothing the writer did not already act on."""
    async with harness(tmp_path, lag=0.05) as h:
        lifecycle = h.lifecycle
        assert lifecycle is not None
        h.server.default = Program(seconds=1.0)
        before = lifecycle.queue.done
        key = h.create()
        await h.wait_phase(key, "Succeeded")
        await trio.sleep(1)  # both echoes delivered
        assert lifecycle.queue.done - before == 3


async def test_a_claim_write_that_errors_gives_its_start_window_place_back(
    tmp_path: Path, clock: trio.testing.MockClock
) -> None:
    """A claim whose write raises (not a 409: the API server failing) holds no place while
    its reconciliation backs off, so the Runs behind it are still claimed."""
    async with harness(tmp_path, start=False) as h:
        h.server.default = Program(seconds=0.5)
        write = h.store.write_status
        failures = 0

        async def failing_for_a(obj: Any, new_status: Any) -> Any:
            nonlocal failures
            if obj["metadata"]["name"] == "a":
                failures += 1
                raise RuntimeError("API server hiccup")
            return await write(obj, new_status)

        h.store.write_status = failing_for_a  # type: ignore[method-assign]
        await h.start(start_window=1)
        h.create(name="a")
        await h.wait_for(lambda: failures >= 1)
        second = h.create(name="b")
        assert (await h.wait_phase(second, "Succeeded", within=30))["phase"] == "Succeeded"
