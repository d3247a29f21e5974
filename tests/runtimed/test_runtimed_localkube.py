"""Issue 6 acceptance on localkube: the control plane, real runtimed sidecars and the real Bash
and Python Runtime Servers in Runtime Pods (processes), driven only through Run objects.

Scripts keep cross-attempt state in the Pod's workspace root (``../../..`` from a task's
working directory ``<workspace>/runs/<uid>/work``), which survives the per-attempt
preparation, runtimed restarts and Runtime Server restarts (an emptyDir).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest
import trio
from runtimed_cluster import (
    NS,
    alive,
    container_pid,
    running_cluster,
    runtime_manifest,
    task_run,
    wait_phase,
    wait_runtime_ready,
)

from krt.kube.resources import RUNS, RUNTIMES

pytestmark = pytest.mark.slow


async def gone(pid: int, within: float = 5.0) -> bool:
    with trio.move_on_after(within):
        while alive(pid):  # noqa: ASYNC110 - polling another process
            await trio.sleep(0.05)
        return True
    return False


async def test_task_lifecycle_with_bash_and_python_servers(tmp_path: Path) -> None:
    async with running_cluster(tmp_path / "state") as cluster:
        kube = cluster.kube
        await kube.create(RUNTIMES, runtime_manifest("bash", kind="bash"))
        await kube.create(RUNTIMES, runtime_manifest("python", kind="python"))
        (bash_pod,) = await wait_runtime_ready(kube, "bash", 1)
        await wait_runtime_ready(kube, "python", 1)
        workspace = cluster.pod_root(bash_pod) / "workspace"

        # inline Bash and Python tasks succeed with outputs
        await kube.create(
            RUNS,
            task_run("sh-ok", "bash", 'echo hi\necho "answer=42" >> "$KRUNTIME_OUTPUTS"\n'),
        )
        py = "import os\nwith open(os.environ['KRUNTIME_OUTPUTS'], 'a') as f:\n    f.write('lang=python\\n')\n"
        await kube.create(RUNS, task_run("py-ok", "python", py))
        sh_ok = await wait_phase(kube, "sh-ok", "Succeeded", "Failed")
        py_ok = await wait_phase(kube, "py-ok", "Succeeded", "Failed")
        assert sh_ok["status"]["phase"] == "Succeeded", sh_ok["status"]
        assert sh_ok["status"]["outputs"] == {"answer": "42"}
        assert py_ok["status"]["phase"] == "Succeeded", py_ok["status"]
        assert py_ok["status"]["outputs"] == {"lang": "python"}

        # a failing task ends Failed with its exit code and a tail of stderr
        await kube.create(RUNS, task_run("sh-bad", "bash", "echo 'it broke' >&2\nexit 3\n"))
        bad = await wait_phase(kube, "sh-bad", "Failed", "Succeeded")
        assert bad["status"]["reason"] == "ExecutionFailed"
        assert "exit code 3" in bad["status"]["message"]
        assert "it broke" in bad["status"]["message"]

        # maxAttempts 3, fails twice then succeeds: Succeeded with attempt 3
        retry = (
            "n=$(cat ../../../retry-count 2>/dev/null || echo 0)\n"
            "n=$((n+1)); echo $n > ../../../retry-count\n"
            '[ "$n" -ge 3 ] || exit 1\n'
            'echo "tries=$n" >> "$KRUNTIME_OUTPUTS"\n'
        )
        await kube.create(
            RUNS,
            task_run("sh-retry", "bash", retry, retryPolicy={"maxAttempts": 3, "backoff": "100ms"}),
        )
        retried = await wait_phase(kube, "sh-retry", "Succeeded", "Failed")
        assert retried["status"]["phase"] == "Succeeded", retried["status"]
        assert retried["status"]["attempt"] == 3
        assert retried["status"]["outputs"] == {"tries": "3"}

        # timeout: ends Timeout and the process is gone
        slow = "echo $$ > ../../../slow.pid\nexec sleep 60\n"
        await kube.create(RUNS, task_run("sh-slow", "bash", slow, timeout="1s"))
        timed_out = await wait_phase(kube, "sh-slow", "Timeout", "Failed", "Succeeded")
        assert timed_out["status"]["phase"] == "Timeout"
        assert await gone(int((workspace / "slow.pid").read_text()))

        # cancel: ends Cancelled and the process is gone
        held = "echo $$ > ../../../held.pid\nexec sleep 60\n"
        await kube.create(RUNS, task_run("sh-cancel", "bash", held))
        with trio.fail_after(20):
            while not (workspace / "held.pid").exists():  # noqa: ASYNC110
                await trio.sleep(0.05)
        await kube.patch(RUNS, "sh-cancel", NS, {"spec": {"cancelRequested": True}})
        cancelled = await wait_phase(kube, "sh-cancel", "Cancelled", "Failed", "Succeeded")
        assert cancelled["status"]["phase"] == "Cancelled"
        assert await gone(int((workspace / "held.pid").read_text()))

        # deleting a running Run cancels its execution
        doomed = "echo $$ > ../../../doomed.pid\nexec sleep 60\n"
        await kube.create(RUNS, task_run("sh-doomed", "bash", doomed))
        with trio.fail_after(20):
            while not (workspace / "doomed.pid").exists():  # noqa: ASYNC110
                await trio.sleep(0.05)
        await kube.delete(RUNS, "sh-doomed", NS)
        assert await gone(int((workspace / "doomed.pid").read_text()))


async def test_restarts_of_runtimed_and_of_the_runtime_server(tmp_path: Path) -> None:
    async with running_cluster(tmp_path / "state") as cluster:
        kube = cluster.kube
        await kube.create(RUNTIMES, runtime_manifest("bash", kind="bash"))
        (pod,) = await wait_runtime_ready(kube, "bash", 1)
        root = cluster.pod_root(pod)
        workspace = root / "workspace"

        # killing runtimed mid-execution: the Run still ends right, executed exactly once
        once = "echo run >> ../../../once.log\nsleep 1\necho 'done=1' >> \"$KRUNTIME_OUTPUTS\"\n"
        await kube.create(RUNS, task_run("once", "bash", once))
        with trio.fail_after(20):
            while not (workspace / "once.log").exists():  # noqa: ASYNC110
                await trio.sleep(0.05)
        os.kill(container_pid(root, "runtimed"), signal.SIGKILL)
        finished = await wait_phase(kube, "once", "Succeeded", "Failed", within=60)
        assert finished["status"]["phase"] == "Succeeded", finished["status"]
        assert finished["status"]["outputs"] == {"done": "1"}
        assert (workspace / "once.log").read_text() == "run\n"

        # killing the Runtime Server mid-execution: ExecutionLost, then a retry; the first
        # attempt's process (its own session, a clean environment) dies with the container,
        # as it would with the container's PID namespace on a real node
        await wait_runtime_ready(kube, "bash", 1)
        lost = (
            "echo run >> ../../../lost.log\n"
            'if [ "$(wc -l < ../../../lost.log)" -eq 1 ]; then\n'
            "  echo $$ > ../../../lost.pid; exec sleep 60\n"
            "fi\n"
        )
        await kube.create(
            RUNS,
            task_run("lost", "bash", lost, retryPolicy={"maxAttempts": 2, "backoff": "100ms"}),
        )
        with trio.fail_after(20):
            while not (workspace / "lost.log").exists():  # noqa: ASYNC110
                await trio.sleep(0.05)
        await trio.sleep(0.5)  # let runtimed observe the execution
        first_attempt = int((workspace / "lost.pid").read_text())
        assert alive(first_attempt)
        os.kill(container_pid(root, "runtime"), signal.SIGKILL)
        assert await gone(first_attempt), "the task outlived its Runtime Server container"
        reasons: set[str] = set()
        with trio.fail_after(60):
            while True:
                status = (await kube.get(RUNS, "lost", NS)).get("status") or {}
                reasons.add(str(status.get("reason")))
                if status.get("phase") in ("Succeeded", "Failed"):
                    break
                await trio.sleep(0.02)
        assert "ExecutionLost" in reasons
        assert status["phase"] == "Succeeded", status
        assert status["attempt"] == 2
        assert (workspace / "lost.log").read_text() == "run\nrun\n"


async def test_a_runtime_server_with_only_the_base_service(tmp_path: Path) -> None:
    script = str(Path(__file__).with_name("base_only_server.py"))
    images = {"test/base-only-runtime": {"entrypoint": [sys.executable, script]}}
    async with running_cluster(tmp_path / "state", images=images) as cluster:
        kube = cluster.kube
        await kube.create(
            RUNTIMES, runtime_manifest("base", kind="bash", image="test/base-only-runtime")
        )
        await wait_runtime_ready(kube, "base", 1)
        await kube.create(
            RUNS, task_run("b-ok", "base", 'echo "only=base" >> "$KRUNTIME_OUTPUTS"\n')
        )
        await kube.create(RUNS, task_run("b-bad", "base", "exit 5\n"))
        ok = await wait_phase(kube, "b-ok", "Succeeded", "Failed")
        bad = await wait_phase(kube, "b-bad", "Succeeded", "Failed")
        assert ok["status"]["outputs"] == {"only": "base"}, ok["status"]
        assert "exit code 5" in bad["status"]["message"]
