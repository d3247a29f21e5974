"""Execute markers in the task lifecycle: runtimed and its Runtime Server restarting together.

Virtual time, the fakes of ``runtimed_fakes`` and real files (``tmp_path``), through the
harness of ``test_runtimed_task_lifecycle``. A restart is ``Harness.stop`` (runtimed's
memory is gone) plus ``FakeRuntimeServer.lose_all`` (the server's too); the workspace, and
so the markers (:mod:`runtimed.execute_markers`), survive as an emptyDir does.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import trio
import trio.testing
from runtimed_builders import run_dict
from runtimed_fakes import Program
from test_runtimed_task_lifecycle import Harness, harness, uid_of

from runtimed.execute_markers import MARKERS_DIR_NAME, read_journal


@pytest.fixture
def clock() -> trio.testing.MockClock:
    """Virtual time that jumps only after 5 ms of real idleness (thread-backed file I/O)."""
    return trio.testing.MockClock(autojump_threshold=0.005)


def markers(h: Harness) -> list[str]:
    """The markers on disk, as ``<uid>.<attempt>``."""
    recorded = read_journal(h.workspace.root / MARKERS_DIR_NAME)
    return sorted(f"{uid}.{attempt}" for uid, attempt in recorded.items())


async def restart_both(h: Harness) -> None:
    """Kill runtimed and the Runtime Server together, then start a fresh runtimed."""
    h.stop()
    h.server.lose_all()
    await trio.sleep(1)
    await h.start()


async def test_lost_attempt_without_retries_fails_execution_lost_and_runs_once(
    tmp_path: Path, clock: trio.testing.MockClock
) -> None:
    async with harness(tmp_path) as h:
        h.server.default = Program(seconds=10, outputs="done=1\n")
        key = h.create()
        uid = uid_of(h, key)
        await h.wait_for(lambda: uid in h.server.executions)
        assert markers(h) == [f"{uid}.1"]
        await restart_both(h)
        status = await h.wait_phase(key, "Succeeded", "Failed")
        assert status["phase"] == "Failed"
        assert status["reason"] == "ExecutionLost"
        assert status["attempt"] == 1
        assert h.server.execute_calls[uid] == 1
        assert markers(h) == []  # dropped with the Run's local state


async def test_lost_attempt_with_retries_left_reruns_as_the_next_attempt(
    tmp_path: Path, clock: trio.testing.MockClock
) -> None:
    async with harness(tmp_path) as h:
        key = h.create(retry={"maxAttempts": 2, "backoff": "1s"})
        uid = uid_of(h, key)
        h.server.programs[uid] = [Program(seconds=10), Program(seconds=0.1, outputs="a=2\n")]
        await h.wait_for(lambda: uid in h.server.executions)
        await restart_both(h)
        await h.wait_for(lambda: h.store.status(key).get("reason") == "ExecutionLost")
        status = await h.wait_phase(key, "Succeeded", "Failed")
        assert status["phase"] == "Succeeded"
        assert status["attempt"] == 2
        assert status["outputs"] == {"a": "2"}
        assert h.server.execute_calls[uid] == 2
        assert markers(h) == []


async def test_killed_between_marker_and_execute_costs_a_retry_not_a_silent_rerun(
    tmp_path: Path, clock: trio.testing.MockClock
) -> None:
    async with harness(tmp_path) as h:
        h.server.execute_delay = 5.0  # Execute has not reached the server yet
        key = h.create()
        uid = uid_of(h, key)
        await h.wait_for(lambda: ("Execute", uid) in h.server.calls)
        assert markers(h) == [f"{uid}.1"]  # written before Execute was sent
        await restart_both(h)
        status = await h.wait_phase(key, "Succeeded", "Failed")
        assert status["reason"] == "ExecutionLost"
        assert uid not in h.server.execute_calls  # nothing ran, nothing ran twice


async def test_restart_of_runtimed_alone_still_observes_and_succeeds(
    tmp_path: Path, clock: trio.testing.MockClock
) -> None:
    async with harness(tmp_path) as h:
        h.server.default = Program(seconds=5, outputs="done=1\n")
        key = h.create()
        uid = uid_of(h, key)
        await h.wait_for(lambda: uid in h.server.executions)
        h.stop()
        await h.start()  # the server still holds the execution
        status = await h.wait_phase(key, "Succeeded", "Failed")
        assert status["phase"] == "Succeeded"
        assert h.server.execute_calls[uid] == 1
        assert markers(h) == []


async def test_unwritable_marker_directory_fails_the_start_clearly(
    tmp_path: Path, clock: trio.testing.MockClock
) -> None:
    async with harness(tmp_path) as h:
        shutil.rmtree(h.workspace.root / MARKERS_DIR_NAME)
        key = h.create()
        uid = uid_of(h, key)
        status = await h.wait_phase(key, "Succeeded", "Failed")
        assert status["reason"] == "StartFailed"
        assert MARKERS_DIR_NAME in status["message"]
        assert "No such file or directory" in status["message"]
        assert uid not in h.server.execute_calls  # never sent without its marker
        assert [r for _, r, _ in h.events.events] == ["StartFailed"]


async def test_markers_of_runs_gone_while_runtimed_was_down_are_removed(
    tmp_path: Path, clock: trio.testing.MockClock
) -> None:
    async with harness(tmp_path) as h:
        h.server.default = Program(seconds=10)
        key = h.create()
        uid = uid_of(h, key)
        await h.wait_for(lambda: uid in h.server.executions)
        h.stop()
        h.server.lose_all()
        h.store.delete(key)
        other = run_dict(name="r2", phase="Running", attempt=1)
        other_uid = other["metadata"]["uid"]
        h.store.create(other)  # another Run left Running with an attempt-1 marker
        with (h.workspace.root / MARKERS_DIR_NAME / "journal").open("a") as journal:
            journal.write(f"+{other_uid} 1\n")
        await h.start()
        assert f"{uid}.1" not in markers(h)  # pruned by the first sweep
        status = await h.wait_phase("ns/r2", "Succeeded", "Failed")
        assert status["reason"] == "ExecutionLost"
        assert markers(h) == []
