"""``krt dev up|down|status`` as a user runs them: real processes, checked by pid."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio
from lk_node_helpers import PODS, echo_container, eventually, pod

from krt.kube.kr8s_auth import private_api
from localkube.controllers.kubeapi import Kube
from localkube.node.process import PidRecord, alive, group_members


async def krt(*args: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
    return await trio.run_process(
        [sys.executable, "-m", "krt.cli.main", *args],
        capture_stdout=True,
        capture_stderr=True,
        check=check,
    )


@pytest.fixture
async def state(tmp_path: Path) -> AsyncIterator[Path]:
    """A dev cluster state directory, always brought down afterwards: a failing test
    must not leave a detached cluster (and its Pods) running."""
    state_dir = tmp_path / "dev"
    try:
        yield state_dir
    finally:
        if (state_dir / "krt-dev.pid").exists():
            with trio.CancelScope(shield=True):
                await krt("dev", "down", "--state-dir", str(state_dir), check=False)


def pod_pid_records(state: Path) -> list[PidRecord]:
    records = [PidRecord.read(p) for p in state.glob("node/pods/*/run/*.pid")]
    return [r for r in records if r is not None]


async def running_pod(kube: Kube, name: str) -> dict[str, Any]:
    async def probe() -> dict[str, Any] | None:
        p = await kube.get(f"{PODS}/{name}")
        cs = ((p or {}).get("status") or {}).get("containerStatuses") or []
        return p if cs and "running" in cs[0]["state"] and cs[0]["ready"] else None

    return await eventually(probe, what=f"{name} running")


async def test_down_leaves_no_process_and_state_survives_up_again(state: Path) -> None:
    result = await krt("dev", "up", "--detach", "--no-install", "--state-dir", str(state))
    out = result.stdout.decode()
    kubeconfig = state / "kubeconfig"
    assert f"export KUBECONFIG={kubeconfig}" in out
    cluster_pid = json.loads((state / "krt-dev.pid").read_text())["pid"]
    status = await krt("dev", "status", "--state-dir", str(state))
    assert f"running (pid {cluster_pid})" in status.stdout.decode()

    kube = Kube(await private_api(kubeconfig=str(kubeconfig)))
    await kube.create(PODS, pod("keeper", echo_container()))
    first = await running_pod(kube, "keeper")
    records = pod_pid_records(state)
    assert [r.pid for r in records] == [
        int(first["status"]["containerStatuses"][0]["containerID"].rsplit("/", 1)[1])
    ]
    assert all(r.leader_alive() for r in records)

    down = await krt("dev", "down", "--state-dir", str(state))
    assert f"localkube stopped (pid {cluster_pid})" in down.stdout.decode()
    assert not alive(cluster_pid, None)
    for r in records:
        assert not alive(r.pid, None)
        assert group_members(r.pgid) == []
    status = await krt("dev", "status", "--state-dir", str(state), check=False)
    assert status.returncode == 3

    # up again: the same objects, the Pod restarted like after a node reboot
    await krt("dev", "up", "--detach", "--no-install", "--state-dir", str(state))
    kube = Kube(await private_api(kubeconfig=str(kubeconfig)))

    async def resumed() -> dict[str, Any] | None:
        p = await kube.get(f"{PODS}/keeper")
        cs = ((p or {}).get("status") or {}).get("containerStatuses") or []
        return p if cs and cs[0]["restartCount"] == 1 and "running" in cs[0]["state"] else None

    again = await eventually(resumed, what="Pod resumed")
    assert again["metadata"]["uid"] == first["metadata"]["uid"]
    assert again["status"]["podIP"] == first["status"]["podIP"]
    assert again["status"]["containerStatuses"][0]["lastState"]["terminated"]["reason"] == "Unknown"
    new_records = pod_pid_records(state)
    await krt("dev", "down", "--state-dir", str(state))
    for r in new_records:
        assert not alive(r.pid, None)
        assert group_members(r.pgid) == []


async def test_up_refuses_a_second_cluster_on_the_same_state_dir(state: Path) -> None:
    await krt("dev", "up", "--detach", "--no-install", "--state-dir", str(state))
    first_pid = json.loads((state / "krt-dev.pid").read_text())["pid"]
    try:
        # in the foreground: refused (a second node would run the same Pods twice)
        second = await krt("dev", "up", "--no-install", "--state-dir", str(state), check=False)
        assert second.returncode == 2
        assert b"already running" in second.stderr
        # detached: idempotent, reports the running cluster and starts nothing new
        again = await krt("dev", "up", "--detach", "--no-install", "--state-dir", str(state))
        assert b"already running" in again.stdout
        assert json.loads((state / "krt-dev.pid").read_text())["pid"] == first_pid
    finally:
        await krt("dev", "down", "--state-dir", str(state))


async def test_down_kills_pod_groups_left_by_a_crashed_cluster(state: Path) -> None:
    """A cluster process killed with SIGKILL cannot stop its Pods; ``down`` does."""
    await krt("dev", "up", "--detach", "--no-install", "--state-dir", str(state))
    kube = Kube(await private_api(kubeconfig=str(state / "kubeconfig")))
    await kube.create(PODS, pod("orphan", echo_container()))
    await running_pod(kube, "orphan")

    async def listening() -> bool:
        async with kube.api.call_api("GET", version="", base=PODS, url="orphan/log") as r:
            return "listening" in r.text

    # after its first line: a container writing to the dead node's pipe would die anyway
    await eventually(listening, what="echo listening")
    records = pod_pid_records(state)
    cluster_pid = json.loads((state / "krt-dev.pid").read_text())["pid"]
    import os
    import signal

    os.kill(cluster_pid, signal.SIGKILL)
    await eventually(lambda: _dead(cluster_pid), what="cluster gone")
    assert all(r.leader_alive() for r in records)  # orphaned
    down = await krt("dev", "down", "--state-dir", str(state))
    assert b"killed 1 leftover Pod process group" in down.stdout
    for r in records:
        assert not alive(r.pid, None)


async def _dead(pid: int) -> bool:
    return not alive(pid, None)


async def test_krt_imports_localkube_only_inside_dev_commands() -> None:
    code = "import sys, krt.cli.main; print(sorted(m for m in sys.modules if m.startswith('localkube')))"
    result = await trio.run_process([sys.executable, "-c", code], capture_stdout=True)
    assert result.stdout.decode().strip() == "[]"
    help_text = await krt("dev", "--help")
    assert b"up" in help_text.stdout
    assert b"down" in help_text.stdout
    assert b"status" in help_text.stdout
