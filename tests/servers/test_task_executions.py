"""Task executions of the base Runtime service, with real Python processes."""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from servers.common import executions as executions_module
from servers.common import limits
from servers.common.errors import Code, ContractError
from servers.common.executions import ExecuteRequest, ExecutionManager, ExecutionState
from servers.python.adapter import PythonAdapter


@pytest.fixture
async def manager(tmp_path: Path) -> AsyncIterator[ExecutionManager]:
    async with trio.open_nursery() as nursery:
        yield ExecutionManager(
            PythonAdapter(), work_dir=tmp_path, nursery=nursery, cancel_grace_seconds=0.5
        )
        await manager_close(nursery)


async def manager_close(nursery: trio.Nursery) -> None:
    nursery.cancel_scope.cancel()


def code(manager_call: Any) -> Code:
    with pytest.raises(ContractError) as excinfo:
        manager_call()
    return excinfo.value.code


async def run(manager: ExecutionManager, **fields: Any) -> Any:
    exec_id = manager.execute(ExecuteRequest(**fields))
    return await manager.wait(exec_id)


async def test_success_captures_output_in_the_default_working_dir(
    manager: ExecutionManager, tmp_path: Path
) -> None:
    status = await run(
        manager,
        id="t1",
        args=["-c", "import os, sys; print(os.getcwd()); print('err', file=sys.stderr)"],
    )
    assert status.state is ExecutionState.SUCCEEDED
    assert status.exit_code == 0
    assert status.stdout == f"{tmp_path / 't1'}\n"
    assert status.stderr == "err\n"
    assert status.error_message == ""


async def test_failure_reports_exit_status(manager: ExecutionManager) -> None:
    status = await run(manager, id="t1", args=["-c", "raise SystemExit(3)"])
    assert status.state is ExecutionState.FAILED
    assert status.exit_code == 3
    assert status.error_message == "exited with status 3"


async def test_entrypoint_runs_with_args_in_working_dir(
    manager: ExecutionManager, tmp_path: Path
) -> None:
    work = tmp_path / "runs" / "r1"
    (work / "pkg").mkdir(parents=True)
    (work / "pkg" / "main.py").write_text("import sys; print(sys.argv[1:])\n")
    status = await run(
        manager, id="t1", entrypoint="pkg/main.py", args=["a b", "$(x)"], working_dir=str(work)
    )
    assert status.state is ExecutionState.SUCCEEDED, status
    assert status.stdout == "['a b', '$(x)']\n"


@pytest.mark.parametrize(
    ("fields", "fragment"),
    [
        ({"entrypoint": "../main.py"}, "'..'"),
        ({"entrypoint": "/tmp/main.py"}, "relative"),
        ({"entrypoint": "escape/main.py"}, "resolves outside"),
        ({"working_dir": "/etc"}, "not under the server's work dir"),
        ({"working_dir": "missing"}, "not an existing directory"),
        ({"working_dir": "a" * 5000}, "File name too long"),
        ({"working_dir": "t1/" + "a" * 300}, "File name too long"),
        ({"timeout_seconds": -1}, "timeout_seconds"),
        ({"env": {"A B": "1"}}, "'A B'"),
        ({"args": ["a\0b"]}, "NUL"),
        ({"args": []}, "entrypoint or args"),
        ({"id": "../x"}, "id '../x'"),
        ({"id": ""}, "id is required"),
    ],
)
async def test_execute_rejects_invalid_requests_without_state(
    manager: ExecutionManager, tmp_path: Path, fields: dict[str, Any], fragment: str
) -> None:
    (tmp_path / "outside").mkdir()
    (tmp_path / "t1").mkdir()
    (tmp_path / "t1" / "escape").symlink_to(tmp_path / "outside")
    request = {"id": "t1", "args": ["-c", "pass"], **fields}
    with pytest.raises(ContractError) as excinfo:
        manager.execute(ExecuteRequest(**request))
    assert excinfo.value.code is Code.INVALID_ARGUMENT
    assert fragment in excinfo.value.message
    assert manager.list() == []


async def test_duplicate_id_unknown_id_and_forget(manager: ExecutionManager) -> None:
    manager.execute(ExecuteRequest(id="t1", args=["-c", "import time; time.sleep(0.2)"]))
    assert (
        code(lambda: manager.execute(ExecuteRequest(id="t1", args=["-c", "pass"])))
        is Code.ALREADY_EXISTS
    )
    assert code(lambda: manager.forget("t1")) is Code.FAILED_PRECONDITION
    for call in (manager.status, manager.cancel, manager.forget):
        assert code(lambda call=call: call("nope")) is Code.NOT_FOUND
    assert [s.id for s in manager.list()] == ["t1"]
    assert (await manager.wait("t1")).state is ExecutionState.SUCCEEDED
    manager.forget("t1")
    assert code(lambda: manager.status("t1")) is Code.NOT_FOUND
    assert manager.list() == []
    # after Forget the ID can be executed again (seed 003, "Retry")
    assert (await run(manager, id="t1", args=["-c", "pass"])).state is ExecutionState.SUCCEEDED


async def test_list_is_an_index_without_output(manager: ExecutionManager) -> None:
    # runtimed polls List (seed 003, RLEG) for states only; with every execution's 2 MiB of
    # output in it, a busy Pod's List would outgrow gRPC message limits and burn CPU on each
    # poll. Status carries the output.
    script = (
        "import sys; sys.stdout.write('o' * 1_500_000); sys.stderr.write('e' * 10); sys.exit(3)"
    )
    await run(manager, id="big", args=["-c", script])
    (entry,) = manager.list()
    assert (entry.id, entry.state, entry.exit_code) == ("big", ExecutionState.FAILED, 3)
    assert entry.error_message == "exited with status 3"
    assert (entry.stdout, entry.stderr) == ("", "")
    status = manager.status("big")
    assert status.stdout.startswith("o" * 1000)
    assert status.stderr == "e" * 10


async def test_forget_removes_only_the_working_dir_the_server_created(
    manager: ExecutionManager, tmp_path: Path
) -> None:
    # a long-lived Runtime Pod runs many tasks: the default <work-dir>/<id> the server made
    # goes with Forget; a caller's own directory (given or pre-existing) stays.
    await run(manager, id="made", args=["-c", "open('result.txt', 'w').write('x')"])
    assert (tmp_path / "made" / "result.txt").exists()
    (tmp_path / "given").mkdir()
    await run(
        manager, id="t2", args=["-c", "open('result.txt', 'w').write('x')"], working_dir="given"
    )
    (tmp_path / "pre").mkdir()
    await run(manager, id="pre", args=["-c", "open('result.txt', 'w').write('x')"])
    for exec_id in ("made", "t2", "pre"):
        manager.forget(exec_id)
    assert not (tmp_path / "made").exists()
    assert (tmp_path / "given" / "result.txt").exists()
    assert (tmp_path / "pre" / "result.txt").exists()
    # the removal finishes in the background: nothing is left behind under the work dir
    for _ in range(100):
        if sorted(os.listdir(tmp_path)) == ["given", "pre"]:
            break
        await trio.sleep(0.01)
    assert sorted(os.listdir(tmp_path)) == ["given", "pre"]
    # the ID can run again at once, in a fresh directory
    await run(manager, id="made", args=["-c", "import os; assert os.listdir() == []"])
    assert (await manager.wait("made")).state is ExecutionState.SUCCEEDED


async def test_environment_is_exactly_env_plus_path_home_and_pythonunbuffered(
    manager: ExecutionManager, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("KRT_SERVER_SECRET", "hunter2")
    status = await run(
        manager,
        id="t1",
        args=["-c", "import os, json; print(json.dumps(dict(os.environ)))"],
        env={"GREETING": "hi"},
    )
    import json

    env = json.loads(status.stdout)
    assert env["GREETING"] == "hi"
    assert env["HOME"] == str(tmp_path / "t1")
    assert env["PYTHONUNBUFFERED"] == "1"
    assert set(env) - {"GREETING", "HOME", "PATH", "PYTHONUNBUFFERED", "LC_CTYPE"} == set()


async def test_stdout_and_stderr_keep_head_and_tail_with_a_marker(
    manager: ExecutionManager,
) -> None:
    script = (
        "import sys\n"
        "for stream in (sys.stdout, sys.stderr):\n"
        "    stream.write('first line\\n' + 'o' * 3 * 1024 * 1024 + '\\nTHE END\\n')\n"
        "sys.exit(1)\n"
    )
    status = await run(manager, id="t1", args=["-c", script])
    assert status.state is ExecutionState.FAILED
    size = len("first line\n") + 3 * 1024 * 1024 + len("\nTHE END\n")
    marker = limits.TRUNCATION_MARKER.format(
        dropped=size - limits.TASK_OUTPUT_LIMIT_BYTES,
        head=limits.TASK_OUTPUT_HEAD_BYTES,
        tail=limits.TASK_OUTPUT_LIMIT_BYTES - limits.TASK_OUTPUT_HEAD_BYTES,
    )
    for text in (status.stdout, status.stderr):
        assert text.startswith("first line\nooo")
        assert text.endswith("ooo\nTHE END\n")
        assert text.count(marker) == 1
        assert len(text.encode()) == limits.TASK_OUTPUT_LIMIT_BYTES + len(marker)


async def test_small_output_is_kept_whole(manager: ExecutionManager) -> None:
    script = "import sys; sys.stdout.write('o' * 300_000); sys.stderr.write('e' * 10)"
    status = await run(manager, id="t1", args=["-c", script])
    assert status.stdout == "o" * 300_000
    assert status.stderr == "e" * 10


async def test_timeout_kills_the_process_and_names_the_timeout(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    script = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    async with trio.open_nursery() as nursery:
        manager = ExecutionManager(PythonAdapter(), work_dir=tmp_path, nursery=nursery)
        manager.execute(ExecuteRequest(id="t1", args=["-c", script], timeout_seconds=5))
        start = trio.current_time()
        status = await manager.wait("t1")
        assert trio.current_time() - start == pytest.approx(5, abs=0.1)
    assert status.state is ExecutionState.FAILED
    assert "timeout_seconds=5" in status.error_message
    assert status.exit_code == -signal.SIGKILL


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (not reaped by its dead parent yet) counts as gone
    return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"


async def wait_for_output(manager: ExecutionManager, exec_id: str, text: str) -> None:
    with trio.fail_after(5):
        while True:
            if text in manager.status(exec_id).stdout:
                return
            await trio.sleep(0.02)


async def test_cancel_sends_sigterm(manager: ExecutionManager) -> None:
    manager.execute(
        ExecuteRequest(
            id="t1", args=["-c", "import time; print('ready', flush=True); time.sleep(30)"]
        )
    )
    await wait_for_output(manager, "t1", "ready")
    assert manager.status("t1").state is ExecutionState.RUNNING
    manager.cancel("t1")
    status = await manager.wait("t1")
    assert status.state is ExecutionState.FAILED
    assert status.error_message == "cancelled"
    assert status.exit_code == -signal.SIGTERM
    manager.cancel("t1")  # cancelling a finished execution is a no-op


async def test_cancel_escalates_to_sigkill_after_the_grace(manager: ExecutionManager) -> None:
    script = (
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('ready', flush=True)\n"
        "time.sleep(30)\n"
    )
    manager.execute(ExecuteRequest(id="t1", args=["-c", script]))
    await wait_for_output(manager, "t1", "ready")
    start = trio.current_time()
    manager.cancel("t1")
    status = await manager.wait("t1")
    assert trio.current_time() - start >= 0.5
    assert status.exit_code == -signal.SIGKILL
    assert status.error_message == "cancelled"


async def test_missing_interpreter_fails_the_execution(tmp_path: Path) -> None:
    async with trio.open_nursery() as nursery:
        manager = ExecutionManager(
            PythonAdapter(python=str(tmp_path / "no-python")), work_dir=tmp_path, nursery=nursery
        )
        status = await run(manager, id="t1", args=["-c", "pass"])
    assert status.state is ExecutionState.FAILED
    assert "failed to start" in status.error_message


async def test_timeout_kills_the_whole_process_group(
    mock_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    mock_clock.rate = 1.0  # real speed until the test jumps past the timeout
    script = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print(child.pid, 'ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    async with trio.open_nursery() as nursery:
        manager = ExecutionManager(PythonAdapter(), work_dir=tmp_path, nursery=nursery)
        manager.execute(ExecuteRequest(id="t1", args=["-c", script], timeout_seconds=30))
        await wait_for_output(manager, "t1", "ready")
        child = int(manager.status("t1").stdout.split()[0])
        mock_clock.jump(30)
        status = await manager.wait("t1")
    assert "timeout_seconds=30" in status.error_message
    for _ in range(100):  # a SIGKILLed process disappears within 2 s
        if not _alive(child):
            break
        await trio.sleep(0.02)
    assert not _alive(child)


async def test_an_orphan_holding_the_pipes_delays_the_end_by_the_drain_bound_only(
    autojump_clock: trio.testing.MockClock, manager: ExecutionManager
) -> None:
    """A process that left the task's group keeps stdout open: output is read for at most
    _PIPE_DRAIN_SECONDS after the task exits, then the execution ends with what it has."""
    script = (
        "import subprocess, sys\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'],"
        " start_new_session=True)\n"
        "print(child.pid, 'started', flush=True)\n"
    )
    exec_id = manager.execute(ExecuteRequest(id="t-orphan", args=["-c", script]))
    start = trio.current_time()
    status = await manager.wait(exec_id)
    orphan = int(status.stdout.split()[0])
    try:
        assert trio.current_time() - start == pytest.approx(
            executions_module._PIPE_DRAIN_SECONDS, abs=0.1
        )
        assert status.state is ExecutionState.SUCCEEDED
        assert status.stdout == f"{orphan} started\n"
        assert _alive(orphan)  # outside the group: not ours to kill, only not waited for
    finally:
        os.kill(orphan, signal.SIGKILL)


async def test_only_a_failed_execution_logs_its_end_at_info(
    manager: ExecutionManager, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="servers.executions")
    await run(manager, id="ok", args=["-c", "pass"])
    await run(manager, id="bad", args=["-c", "raise SystemExit(3)"])
    ended = [r.__dict__["execution_id"] for r in caplog.records if r.msg == "execution finished"]
    assert ended == ["bad"]


async def test_python_task_output_streams_before_it_exits(
    manager: ExecutionManager, tmp_path: Path
) -> None:
    """F2: a task's stdout is a pipe; without PYTHONUNBUFFERED Python would hold 'tick'
    in its buffer until exit, and ``krt run --follow`` would show nothing meanwhile."""
    go = tmp_path / "go"
    script = (
        "import os, time\n"
        "print('tick')\n"
        f"while not os.path.exists({str(go)!r}):\n"
        "    time.sleep(0.01)\n"
    )
    exec_id = manager.execute(ExecuteRequest(id="t-stream", args=["-c", script]))
    with trio.fail_after(10):
        while manager.status(exec_id).stdout != "tick\n":  # noqa: ASYNC110 - a real process
            await trio.sleep(0.02)
    assert manager.status(exec_id).state is ExecutionState.RUNNING
    go.touch()
    status = await manager.wait(exec_id)
    assert status.state is ExecutionState.SUCCEEDED


@pytest.mark.parametrize(("env", "seen"), [({}, "'1'"), ({"PYTHONUNBUFFERED": ""}, "''")])
async def test_task_env_sets_pythonunbuffered_unless_the_spec_env_does(
    manager: ExecutionManager, env: dict[str, str], seen: str
) -> None:
    status = await run(
        manager,
        id="t-env",
        args=["-c", "import os; print(repr(os.environ.get('PYTHONUNBUFFERED')))"],
        env=env,
    )
    assert status.stdout == f"{seen}\n"
