"""ChildWatcher: one trio task serves every task process's pipes and exit (real processes)."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
import trio

from servers.common.bounded import BoundedBuffer
from servers.common.child_watch import ChildWatcher, WatchedChild

ENV = {"PATH": "/usr/bin:/bin"}


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_children_are_served_by_one_task_that_ends_when_nothing_is_left(
    tmp_path: Path,
) -> None:
    """Output (more than a pipe buffer) reaches the sinks, several tasks may wait for one
    exit, and the nursery closes by itself: the watching task ends with its last child."""
    before = open_fds()
    outputs = [(BoundedBuffer(), BoundedBuffer()) for _ in range(4)]
    codes: list[int | None] = []

    async def wait_for(child: WatchedChild) -> None:
        await child.exited.wait()
        codes.append(child.returncode)

    async with trio.open_nursery() as nursery:
        watcher = ChildWatcher(nursery)
        children = [
            watcher.spawn(
                [
                    "/bin/sh",
                    "-c",
                    f"head -c 200000 /dev/zero | tr '\\0' o; echo e{n} >&2; exit {n}",
                ],
                cwd=tmp_path,
                env=ENV,
                stdout=out,
                stderr=err,
            )
            for n, (out, err) in enumerate(outputs)
        ]
        for child in children:
            for _ in range(2):
                nursery.start_soon(wait_for, child)
        with trio.fail_after(10):
            for child in children:
                await child.drained.wait()
    assert sorted(c for c in codes if c is not None) == [0, 0, 1, 1, 2, 2, 3, 3]
    assert len(codes) == 8
    for n, (out, err) in enumerate(outputs):
        assert out.text() == "o" * 200_000
        assert err.text() == f"e{n}\n"
    assert watcher.watching == 0
    assert open_fds() == before


async def test_stdin_is_dev_null_and_the_child_leads_its_own_session(tmp_path: Path) -> None:
    out, err = BoundedBuffer(), BoundedBuffer()
    async with trio.open_nursery() as nursery:
        child = ChildWatcher(nursery).spawn(
            ["/bin/sh", "-c", "read line || echo eof; ps -o sid= -o pgid= -p $$"],
            cwd=tmp_path,
            env=ENV,
            stdout=out,
            stderr=err,
        )
        with trio.fail_after(10):
            await child.exited.wait()
            await child.drained.wait()
    lines = out.text().split()
    assert lines == ["eof", str(child.pid), str(child.pid)], err.text()


async def test_spawn_failure_raises_oserror_and_leaks_no_descriptor(tmp_path: Path) -> None:
    before = open_fds()
    async with trio.open_nursery() as nursery:
        watcher = ChildWatcher(nursery)
        for argv, cwd in (([str(tmp_path / "missing")], tmp_path), (["/bin/sh"], tmp_path / "no")):
            with pytest.raises(FileNotFoundError):
                watcher.spawn(argv, cwd=cwd, env={}, stdout=BoundedBuffer(), stderr=BoundedBuffer())
    assert open_fds() == before


async def test_a_child_is_reaped_without_the_watcher_after_it_is_cancelled(
    tmp_path: Path,
) -> None:
    """Shutdown: the watching task is cancelled with the nursery; the owner kills the group
    and reaps the child itself (the pidfd), and no descriptor stays open."""
    before = open_fds()
    with trio.CancelScope() as outer:
        async with trio.open_nursery() as nursery:
            watcher = ChildWatcher(nursery)
            child = watcher.spawn(
                ["/bin/sh", "-c", "sleep 30"],
                cwd=tmp_path,
                env=ENV,
                stdout=BoundedBuffer(),
                stderr=BoundedBuffer(),
            )
            outer.cancel()
    assert child.returncode is None
    os.killpg(child.pid, signal.SIGKILL)
    child.close_pipes()
    with trio.fail_after(10):
        assert await child.reap_unwatched() == -signal.SIGKILL
    assert child.exited.is_set()
    assert open_fds() == before


async def test_close_pipes_stops_reading_and_marks_the_child_drained(tmp_path: Path) -> None:
    out = BoundedBuffer()
    async with trio.open_nursery() as nursery:
        watcher = ChildWatcher(nursery)
        child = watcher.spawn(
            ["/bin/sh", "-c", "echo first; exec sleep 30"],
            cwd=tmp_path,
            env=ENV,
            stdout=out,
            stderr=BoundedBuffer(),
        )
        with trio.fail_after(10):
            while out.text() != "first\n":  # noqa: ASYNC110 - a real process
                await trio.sleep(0.01)
        child.close_pipes()
        assert child.drained.is_set()
        assert watcher.watching == 1  # the pidfd: the child still runs
        os.killpg(child.pid, signal.SIGKILL)
        with trio.fail_after(10):
            await child.exited.wait()
    assert child.returncode == -signal.SIGKILL
    assert watcher.watching == 0


async def test_a_failed_registration_leaves_no_process_or_descriptor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = open_fds()
    async with trio.open_nursery() as nursery:
        watcher = ChildWatcher(nursery)
        calls = 0
        real_watch = watcher._watch

        def failing_watch(fd: int, handler: Any) -> None:
            nonlocal calls
            calls += 1
            if calls == 2:  # the second pipe: one descriptor is registered already
                raise OSError(12, "Cannot allocate memory")
            real_watch(fd, handler)

        monkeypatch.setattr(watcher, "_watch", failing_watch)
        with pytest.raises(OSError, match="Cannot allocate memory"):
            watcher.spawn(
                ["/bin/sh", "-c", "sleep 30"],
                cwd=tmp_path,
                env=ENV,
                stdout=BoundedBuffer(),
                stderr=BoundedBuffer(),
            )
        assert watcher.watching == 0
    assert open_fds() == before
