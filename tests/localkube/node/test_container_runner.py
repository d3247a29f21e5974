"""ContainerRunner with real processes on virtual time: back-off and grace timers."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import trio
import trio.testing

from localkube.images import ImageEntry, ImageTable
from localkube.node.backoff import CrashBackoff
from localkube.node.container import ContainerRunner
from localkube.node.layout import PodPaths
from localkube.node.logpump import BATCH_SECONDS
from localkube.node.logs import read_log
from localkube.node.podstatus import ContainerObservation


def runner(
    tmp_path: Path, script: str, *, policy: str = "Always", on_change: Any = None
) -> ContainerRunner:
    table = ImageTable({"t/sh": ImageEntry("t/sh", ("sh", "-c", script))})
    paths = PodPaths(tmp_path / "pod")
    paths.workspace.mkdir(parents=True)

    async def env_for(_c: Any) -> dict[str, str]:
        return {"PATH": os.environ["PATH"]}

    return ContainerRunner(
        {"name": "main", "image": "t/sh"},
        paths=paths,
        pod=lambda: {"metadata": {"name": "p"}, "spec": {}, "status": {"podIP": "127.0.0.1"}},
        images=table,
        restart_policy=policy,
        env_for=env_for,
        on_change=on_change or (lambda: None),
        observation=ContainerObservation("main", "t/sh"),
        backoff=CrashBackoff(initial=10, cap=40),
    )


async def test_sigkill_follows_sigterm_after_the_grace_period(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    # the shell and its sleep ignore SIGTERM (ignored dispositions survive exec)
    r = runner(tmp_path, "trap '' TERM; echo started; sleep 300 & wait")
    started = trio.Event()
    r.on_change = lambda: started.set() if r.obs.state == "running" else None
    async with trio.open_nursery() as nursery:
        nursery.start_soon(r.run)
        await started.wait()
        t0 = trio.current_time()
        r.request_stop(30.0)
        await r.finished.wait()
    # SIGKILL at 30 s; the log pump's last batching pause may add up to BATCH_SECONDS
    assert 30.0 <= trio.current_time() - t0 <= 30.0 + BATCH_SECONDS
    assert r.obs.state == "terminated"
    assert r.obs.exit_code == 128 + signal.SIGKILL
    assert read_log(r.paths.log_dir, "main") == b"started\n"


async def test_crash_back_off_runs_on_virtual_time(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    starts: list[float] = []
    five = trio.Event()
    r = runner(tmp_path, "exit 1")

    def seen() -> None:
        if r.obs.state == "running" and r.obs.restart_count == len(starts):
            starts.append(trio.current_time())
            if len(starts) == 5:
                five.set()

    r.on_change = seen
    async with trio.open_nursery() as nursery:
        nursery.start_soon(r.run)
        # no other deadline is pending, so virtual time only moves for the back-off sleeps
        await five.wait()
        r.request_stop(1.0)
    gaps = [round(b - a) for a, b in zip(starts, starts[1:], strict=False)]
    assert gaps == [0, 10, 20, 40]
    assert r.obs.restart_count >= 4
    assert r.obs.last_terminated is not None
    assert r.obs.last_terminated["exitCode"] == 1


async def test_never_policy_keeps_the_terminated_state(tmp_path: Path) -> None:
    r = runner(tmp_path, "echo bye; exit 4", policy="Never")
    with trio.fail_after(5):
        await r.run()
    assert (r.obs.state, r.obs.exit_code, r.obs.reason, r.obs.restart_count) == (
        "terminated",
        4,
        "Error",
        0,
    )
    assert read_log(r.paths.log_dir, "main") == b"bye\n"
    assert (r.paths.log_dir / "main" / "0.exited").exists()
    assert not r.paths.pid_file("main").exists()


async def test_failing_startup_probe_kills_the_container(tmp_path: Path) -> None:
    r = runner(tmp_path, "echo up; sleep 300", policy="Never")
    r.spec = {
        **r.spec,
        "startupProbe": {
            "exec": {"command": ["false"]},
            "periodSeconds": 0.05,
            "failureThreshold": 3,
        },
    }
    with trio.fail_after(5):
        await r.run()
    assert r.obs.state == "terminated"
    assert r.obs.message == "Startup probe failed 3 times"
    assert r.obs.exit_code == 128 + signal.SIGTERM  # sh dies on SIGTERM within the grace


async def test_startup_probe_gates_readiness(tmp_path: Path) -> None:
    running, ready = trio.Event(), trio.Event()
    r = runner(tmp_path, "sleep 300")

    def changed() -> None:
        if r.obs.state == "running":
            running.set()
        if r.obs.ready:
            ready.set()

    r.on_change = changed
    marker = r.paths.workspace / "started"
    r.spec = {
        **r.spec,
        "startupProbe": {
            "exec": {"command": ["test", "-e", str(marker)]},
            "periodSeconds": 0.05,
            "failureThreshold": 1000,
        },
    }
    async with trio.open_nursery() as nursery:
        nursery.start_soon(r.run)
        with trio.fail_after(5):
            await running.wait()
        await trio.sleep(0.2)
        assert (r.obs.started, r.obs.ready) == (False, False)
        marker.touch()
        with trio.fail_after(5):
            await ready.wait()
        assert r.obs.started
        r.request_stop(1.0)
