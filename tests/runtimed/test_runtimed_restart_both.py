"""runtimed and its Runtime Server killed together mid-execution, on localkube (seed 003).

The restarted runtimed has lost its in-memory observation and the restarted Runtime Server
answers NOT_FOUND: only the durable Execute marker (:mod:`runtimed.execute_markers`) tells
it the attempt was already sent. The attempt must end ``ExecutionLost`` (retried as attempt
2 when the retry policy allows), never run a second time silently.

The scripts count their executions in the Pod's workspace root (``../../..`` from the
task's working directory), which survives both container restarts (an emptyDir).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
import trio
from runtimed_cluster import (
    NS,
    alive,
    container_pid,
    running_cluster,
    runtime_manifest,
    task_run,
    wait_runtime_ready,
)

from krt.kube.client import Kube
from krt.kube.resources import RUNS, RUNTIMES
from runtimed.execute_markers import read_journal

pytestmark = pytest.mark.slow


def counting_script(name: str) -> str:
    """Append a line per execution; the first execution blocks, any later one exits 0."""
    return (
        f"echo run >> ../../../{name}.log\n"
        f'if [ "$(wc -l < ../../../{name}.log)" -eq 1 ]; then\n'
        f"  echo $$ > ../../../{name}.pid; exec sleep 60\n"
        "fi\n"
    )


async def kill_both_mid_execution(root: Path, name: str) -> None:
    """Wait for the first execution, then SIGKILL runtimed and the Runtime Server at once."""
    workspace = root / "workspace"
    with trio.fail_after(20):
        while not (workspace / f"{name}.pid").exists():  # noqa: ASYNC110 - another process
            await trio.sleep(0.05)
    first = int((workspace / f"{name}.pid").read_text())
    assert alive(first)
    os.kill(container_pid(root, "runtimed"), signal.SIGKILL)
    os.kill(container_pid(root, "runtime"), signal.SIGKILL)
    with trio.fail_after(5):
        while alive(first):  # noqa: ASYNC110 - another process
            await trio.sleep(0.05)


async def final_status(kube: Kube, name: str) -> tuple[dict[str, Any], set[str]]:
    """The terminal status of Run ``name`` and every reason it showed on the way."""
    reasons: set[str] = set()
    with trio.fail_after(60):
        while True:
            status = (await kube.get(RUNS, name, NS)).get("status") or {}
            reasons.add(str(status.get("reason")))
            if status.get("phase") in ("Succeeded", "Failed"):
                return status, reasons
            await trio.sleep(0.02)


async def test_killing_runtimed_and_runtime_server_together_never_reruns_silently(
    tmp_path: Path,
) -> None:
    async with running_cluster(tmp_path / "state") as cluster:
        kube = cluster.kube
        await kube.create(RUNTIMES, runtime_manifest("bash", kind="bash"))
        (pod,) = await wait_runtime_ready(kube, "bash", 1)
        root = cluster.pod_root(pod)
        workspace = root / "workspace"

        # maxAttempts 1: the lost attempt ends the Run Failed/ExecutionLost, run once
        await kube.create(RUNS, task_run("once", "bash", counting_script("once")))
        await kill_both_mid_execution(root, "once")
        status, _ = await final_status(kube, "once")
        assert status["phase"] == "Failed", status
        assert status["reason"] == "ExecutionLost", status
        assert status["attempt"] == 1
        assert (workspace / "once.log").read_text() == "run\n"

        # retries left: the re-run is the next attempt, through the normal retry path (one
        # spare attempt: the restarted Pod may still refuse the first start, StartFailed)
        await wait_runtime_ready(kube, "bash", 1)
        await kube.create(
            RUNS,
            task_run(
                "again",
                "bash",
                counting_script("again"),
                retryPolicy={"maxAttempts": 3, "backoff": "100ms"},
            ),
        )
        await kill_both_mid_execution(root, "again")
        lost_attempt = (await kube.get(RUNS, "again", NS))["status"]["attempt"]
        status, reasons = await final_status(kube, "again")
        assert "ExecutionLost" in reasons
        assert status["phase"] == "Succeeded", status
        assert status["attempt"] == lost_attempt + 1
        assert (workspace / "again.log").read_text() == "run\nrun\n"

        # both Runs are terminal and dropped: their markers are gone
        with trio.fail_after(10):
            while read_journal(workspace / "execute-markers"):  # noqa: ASYNC110
                await trio.sleep(0.05)
