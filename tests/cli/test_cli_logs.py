"""``krt logs`` and ``krt run --follow``: the Run's lines from its Pod's runtimed log.

The API server runs with a state directory so ``pods/{name}/log`` reads real log files; the
test writes them where localkube's node would (CRI format), as runtimed's JSON lines.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio
from click.testing import Result

from krt.cli.exitcodes import ExitCode
from krt.kube.client import Kube
from krt.kube.errors import NotFound
from krt.kube.resources import PODS, RUNS
from localkube.apiserver import ApiServerHandle
from localkube.node.layout import PodPaths

from .conftest import (
    NS,
    durable_cluster,
    eventually,
    invoke_cli,
    set_status,
    task_manifest,
)


@pytest.fixture
async def stateful(tmp_path: Path) -> AsyncIterator[tuple[ApiServerHandle, Kube]]:
    async with durable_cluster(tmp_path / "state", "bash") as cluster:
        yield cluster


async def cli(handle: ApiServerHandle, *args: str) -> Result:
    env = {"KRT_KUBECONFIG": str(handle.kubeconfig_path), "KUBECONFIG": ""}
    with trio.fail_after(30):
        return await trio.to_thread.run_sync(lambda: invoke_cli(list(args), env=env))


def record(uid: str, message: str, stream: str | None = None, attempt: int = 1) -> str:
    data: dict[str, Any] = {
        "time": "2026-11-29T08:00:00Z",
        "level": "info",
        "logger": "runtimed.tasks",
        "message": message,
        "run_uid": uid,
        "attempt": attempt,
    }
    if stream:
        data["stream"] = stream
    return json.dumps(data)


def cri(line: str) -> str:
    return f"2026-11-29T08:00:00.000000000Z stderr F {line}\n"


async def pod_with_log(
    kube: Kube, handle: ApiServerHandle, lines: list[str], *, exited: bool
) -> Path:
    pod = await kube.create(
        PODS,
        {
            "metadata": {"name": "rt-1", "namespace": NS},
            "spec": {
                "nodeName": "localkube",
                "containers": [
                    {"name": "runtime", "image": "kruntimes/python-runtime"},
                    {"name": "runtimed", "image": "kruntimes/runtimed"},
                ],
            },
        },
    )
    assert handle.state_dir is not None
    log_dir = (
        PodPaths.for_pod(handle.state_dir, NS, "rt-1", pod["metadata"]["uid"]).log_dir / "runtimed"
    )
    log_dir.mkdir(parents=True)
    (log_dir / "0.log").write_text("".join(cri(line) for line in lines))
    if exited:
        (log_dir / "0.exited").write_text("")
    return log_dir / "0.log"


async def test_logs_prints_the_runs_output_only(stateful: tuple[ApiServerHandle, Kube]) -> None:
    handle, kube = stateful
    run = await kube.create(RUNS, task_manifest("job"))
    uid = run["metadata"]["uid"]
    await pod_with_log(
        kube,
        handle,
        [
            record(uid, "execution started"),
            record(uid, "hello", "stdout"),
            record("someone-else", "not mine", "stdout"),
            "a line that is not JSON",
            record(uid, "warning: x", "stderr"),
        ],
        exited=True,
    )
    no_pod = await cli(handle, "logs", "job")
    assert no_pod.exit_code == ExitCode.UNAVAILABLE
    assert "has no Pod yet" in no_pod.stderr
    await set_status(
        kube,
        "job",
        {"phase": "Running", "attempt": 1, "assignedPod": "rt-1", "assignedPodUID": "p-1"},
    )
    result = await cli(handle, "logs", "job")
    assert result.exit_code == 0, result.output
    assert result.stdout == "hello\n"
    assert result.stderr == "warning: x\n"
    verbose = await cli(handle, "logs", "job", "--runtimed")
    assert verbose.stdout.splitlines() == [
        "[runtimed info] 2026-11-29T08:00:00Z execution started",
        "hello",
    ]


async def test_run_follow_streams_until_the_run_is_terminal(
    stateful: tuple[ApiServerHandle, Kube],
) -> None:
    handle, kube = stateful
    async with trio.open_nursery() as nursery:
        done: list[Result] = []

        async def go() -> None:
            done.append(
                await cli(handle, "run", "f", "--runtime", "bash", "--follow", "--", "echo hi")
            )

        nursery.start_soon(go)
        with trio.fail_after(10):
            while True:
                try:
                    run = await kube.get(RUNS, "f", NS)
                    break
                except NotFound:
                    await trio.sleep(0.02)
        uid = run["metadata"]["uid"]
        log = await pod_with_log(kube, handle, [record(uid, "line 1", "stdout")], exited=False)
        await set_status(
            kube,
            "f",
            {"phase": "Running", "attempt": 1, "assignedPod": "rt-1", "assignedPodUID": "p-1"},
        )
        await trio.sleep(0.3)
        with log.open("a") as f:
            f.write(cri(record(uid, "line 2", "stdout")))
        await set_status(
            kube, "f", {"phase": "Succeeded", "reason": "Succeeded", "outputs": {"n": "2"}}
        )

        async def finished() -> bool:
            return bool(done)

        await eventually(finished, seconds=20)
    [result] = done
    assert result.exit_code == 0, result.output
    assert result.stdout == "line 1\nline 2\nn=2\n"
    assert "run.kruntimes.io/f Succeeded" in result.stderr


async def test_logs_include_the_runtimed_instance_before_a_restart(
    stateful: tuple[ApiServerHandle, Kube],
) -> None:
    # runtimed restarted (a crash, or krt dev down/up) after the Run printed: the node keeps
    # the earlier instance as 0.log and the current one as 1.log (kubectl logs --previous)
    handle, kube = stateful
    run = await kube.create(RUNS, task_manifest("job"))
    uid = run["metadata"]["uid"]
    first = await pod_with_log(kube, handle, [record(uid, "before restart", "stdout")], exited=True)
    first.with_name("1.log").write_text(
        cri(record(uid, "after restart", "stdout")) + cri(record("other", "x", "stdout"))
    )
    await set_status(
        kube,
        "job",
        {"phase": "Running", "attempt": 1, "assignedPod": "rt-1", "assignedPodUID": "p-1"},
    )
    result = await cli(handle, "logs", "job")
    assert result.exit_code == 0, result.output
    assert result.stdout == "before restart\nafter restart\n"
