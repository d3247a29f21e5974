"""The container init: a container's processes die with it, whatever session or environment.

Issue 6: killing the Runtime Server container left running the task processes it had
started, because each task runs in a session of its own with a clean environment (out of the
container's process group, without the node's environment mark). On Kubernetes the
container's PID namespace takes them down; here :mod:`localkube.node.container_init` (a
child subreaper) must.
"""

from __future__ import annotations

import errno
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from localkube.images import ImageEntry, ImageTable
from localkube.node.backoff import CrashBackoff
from localkube.node.container import ContainerRunner
from localkube.node.layout import PodPaths
from localkube.node.podstatus import ContainerObservation
from localkube.node.process import alive, open_container_process

#: A "Runtime Server" that starts a "task" the way the servers do (a new session, a clean
#: environment: neither the group signal nor the environment mark reaches it), records the
#: task's pid, and waits.
SPAWNS_ESCAPED_TASK = (
    "env -i /usr/bin/setsid /bin/sleep 300 & echo $! > task.pid; echo started; wait"
)


def env() -> dict[str, str]:
    return {"PATH": os.environ["PATH"]}


def wait_for_escape(path: Path, seconds: float) -> int:
    """Block (real time) until the task named in ``path`` runs in a session of its own."""
    deadline = time.monotonic() + seconds
    pid = wait_for_pid_file(path, seconds)
    while time.monotonic() < deadline:
        if os.getsid(pid) == pid:  # setsid done: it leads its own session and group
            return pid
        time.sleep(0.01)
    raise TimeoutError(f"task {pid} did not start its own session within {seconds}s")


async def read_pid(path: Path) -> int:
    """The escaped task's pid, once it left the container's session (in a thread, so this
    works on the virtual clock too)."""
    return await trio.to_thread.run_sync(wait_for_escape, path, 5.0)


def wait_for_pid_file(path: Path, seconds: float) -> int:
    """Block (in a thread, real time) until ``path`` holds a pid; for virtual-clock tests."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            text = path.read_text()
        except FileNotFoundError:
            text = ""
        if text.strip():
            return int(text)
        time.sleep(0.01)
    raise TimeoutError(f"{path} was not written within {seconds}s")


async def dead(pid: int) -> bool:
    """Whether ``pid`` is gone (or a zombie) within 5 seconds."""
    with trio.move_on_after(5):
        while alive(pid, None):  # noqa: ASYNC110 - polling another process
            await trio.sleep(0.01)
        return True
    return False


def kill_quietly(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


async def test_killing_the_main_process_kills_a_task_in_its_own_session(
    tmp_path: Path,
) -> None:
    container = await open_container_process(
        ["sh", "-c", SPAWNS_ESCAPED_TASK], env=env(), cwd=tmp_path
    )
    task = await read_pid(tmp_path / "task.pid")
    try:
        assert os.getsid(task) != os.getsid(container.main_pid)  # it left the session
        assert os.getpgid(task) != container.pgid  # and the container's process group
        os.kill(container.main_pid, signal.SIGKILL)  # the "Runtime Server" is killed
        with trio.fail_after(5):
            await container.init.wait()
        assert container.init.returncode == -signal.SIGKILL  # exits like its main process
        assert await dead(task), "the task outlived its container"
    finally:
        kill_quietly(task)
        kill_quietly(container.main_pid)


async def test_a_sigkill_of_the_whole_group_still_takes_the_task_down(tmp_path: Path) -> None:
    """Killing the container's process group at once (as a chaos tool or ``krt dev down``
    does) must not kill the init with it: it is outside the group and cleans up."""
    container = await open_container_process(
        ["sh", "-c", SPAWNS_ESCAPED_TASK], env=env(), cwd=tmp_path
    )
    task = await read_pid(tmp_path / "task.pid")
    try:
        assert os.getpgid(container.main_pid) == container.pgid == container.main_pid
        assert os.getpgid(container.init.pid) != container.pgid
        os.killpg(container.pgid, signal.SIGKILL)
        with trio.fail_after(5):
            assert await container.init.wait() == -signal.SIGKILL
        assert await dead(task), "the task outlived its container"
    finally:
        kill_quietly(task)


async def test_the_init_exits_with_the_main_process_code_and_signal(tmp_path: Path) -> None:
    done = await open_container_process(["sh", "-c", "exit 3"], env=env(), cwd=tmp_path)
    with trio.fail_after(5):
        assert await done.init.wait() == 3
    termed = await open_container_process(
        ["sh", "-c", "echo up; exec sleep 300"], env=env(), cwd=tmp_path
    )
    assert termed.init.stdout is not None
    with trio.fail_after(5):
        assert await termed.init.stdout.receive_some(64) == b"up\n"  # output is the main's
        os.kill(termed.main_pid, signal.SIGTERM)
        assert await termed.init.wait() == -signal.SIGTERM


async def test_the_group_signal_reaches_the_main_process_once_and_spares_the_init(
    tmp_path: Path,
) -> None:
    """SIGTERM to the container's group: the main process gets it once (here: counts it and
    exits 6 + count), and the init, outside the group, stays until the main process is done."""
    script = "n=0; trap 'n=$((n+1))' TERM; echo ready; sleep 0.3 & wait; sleep 0.3; exit $((6+n))"
    container = await open_container_process(["sh", "-c", script], env=env(), cwd=tmp_path)
    assert container.init.stdout is not None
    with trio.fail_after(5):
        assert await container.init.stdout.receive_some(64) == b"ready\n"
        os.killpg(container.pgid, signal.SIGTERM)
        assert await container.init.wait() == 7


async def test_a_program_that_cannot_be_executed_is_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as raised:
        await open_container_process(["no-such-program-xyz"], env=env(), cwd=tmp_path)
    assert raised.value.errno == errno.ENOENT
    assert raised.value.filename == "no-such-program-xyz"


def runner(tmp_path: Path, script: str) -> ContainerRunner:
    paths = PodPaths(tmp_path / "pod")
    paths.workspace.mkdir(parents=True)

    async def env_for(_c: Any) -> dict[str, str]:
        return env()

    return ContainerRunner(
        {"name": "runtime", "image": "t/sh"},
        paths=paths,
        pod=lambda: {"metadata": {"name": "p"}, "spec": {}, "status": {"podIP": "127.0.0.1"}},
        images=ImageTable({"t/sh": ImageEntry("t/sh", ("sh", "-c", script))}),
        restart_policy="Never",
        env_for=env_for,
        on_change=lambda: None,
        observation=ContainerObservation("runtime", "t/sh"),
        backoff=CrashBackoff(initial=10, cap=40),
    )


async def test_a_killed_container_takes_its_escaped_task_with_it(tmp_path: Path) -> None:
    """The Runtime Server container is killed (its main process, as the pid file names it):
    the container ends with 137 and the task it started in its own session is gone."""
    r = runner(tmp_path, SPAWNS_ESCAPED_TASK)
    running = trio.Event()
    r.on_change = lambda: running.set() if r.obs.state == "running" else None
    async with trio.open_nursery() as nursery:
        nursery.start_soon(r.run)
        task = await read_pid(r.paths.workspace / "task.pid")
        with trio.fail_after(5):
            await running.wait()  # the pid file is written before the state says running
        try:
            record = r.paths.pid_file("runtime").read_text()
            assert r.obs.pid is not None
            assert f'"pid": {r.obs.pid}' in record  # the pid file names the main process
            os.kill(r.obs.pid, signal.SIGKILL)
            with trio.fail_after(5):
                await r.finished.wait()
            assert (r.obs.state, r.obs.exit_code) == ("terminated", 128 + signal.SIGKILL)
            assert await dead(task), "the task outlived its container"
        finally:
            kill_quietly(task)


async def test_stopping_after_the_grace_kills_the_escaped_task_too(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """A main process that ignores SIGTERM is SIGKILLed after the grace period, and the
    init takes down the task in another session before it exits."""
    r = runner(tmp_path, "trap '' TERM; " + SPAWNS_ESCAPED_TASK)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(r.run)
        task = await trio.to_thread.run_sync(wait_for_pid_file, r.paths.workspace / "task.pid", 5.0)
        try:
            t0 = trio.current_time()
            r.request_stop(30.0)
            await r.finished.wait()
            # the SIGKILL comes at the grace, not before; the mock clock may move on by a
            # timer step (e.g. a log pump window) while the real process is still dying
            assert 30.0 <= trio.current_time() - t0 < 30.5
            assert r.obs.exit_code == 128 + signal.SIGKILL
            assert not alive(task, None), "the task outlived its container"
            assert r.obs.pid is not None
        finally:
            kill_quietly(task)
