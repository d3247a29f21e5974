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
from krt.cli.logs import LogLine, SeenLines, parse_line
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


def record(
    uid: str, message: str, stream: str | None = None, attempt: int = 1, offset: int | None = None
) -> str:
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
    if offset is not None:
        data["offset"] = offset
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


def lines_at(uid: str, texts: list[str], *, attempt: int = 1) -> list[str]:
    """stdout records of ``texts`` as runtimed logs them: each with its offset."""
    out, at = [], 0
    for text in texts:
        out.append(record(uid, text, "stdout", attempt, offset=at))
        at += len(text) + 1
    return out


async def test_logs_show_a_line_relogged_by_a_restarted_runtimed_once(
    stateful: tuple[ApiServerHandle, Kube],
) -> None:
    # F16: the new instance logs the attempt's kept output again from its beginning
    handle, kube = stateful
    run = await kube.create(RUNS, task_manifest("job"))
    uid = run["metadata"]["uid"]
    first = await pod_with_log(
        kube,
        handle,
        [*lines_at(uid, ["a", "b"]), record(uid, "from an older runtimed", "stdout")],
        exited=True,
    )
    first.with_name("1.log").write_text(
        "".join(cri(line) for line in lines_at(uid, ["a", "b", "c"]))
        + cri(record(uid, "retried", "stdout", attempt=2, offset=0))
    )
    await set_status(
        kube,
        "job",
        {"phase": "Running", "attempt": 2, "assignedPod": "rt-1", "assignedPodUID": "p-1"},
    )
    result = await cli(handle, "logs", "job")
    assert result.exit_code == 0, result.output
    assert result.stdout == "a\nb\nfrom an older runtimed\nc\nretried\n"
    assert result.stderr == "--- attempt 2 ---\n"  # F18: attempts told apart, stdout clean


async def test_follow_goes_on_across_a_runtimed_restart_showing_each_line_once(
    stateful: tuple[ApiServerHandle, Kube],
) -> None:
    # F16: a runtimed restart ends the followed log; the new instance's log is followed
    handle, kube = stateful
    run = await kube.create(RUNS, task_manifest("job"))
    uid = run["metadata"]["uid"]
    log = await pod_with_log(
        kube, handle, [record(uid, "claimed"), *lines_at(uid, ["a"])], exited=False
    )
    await set_status(
        kube,
        "job",
        {"phase": "Running", "attempt": 1, "assignedPod": "rt-1", "assignedPodUID": "p-1"},
    )
    async with trio.open_nursery() as nursery:
        done: list[Result] = []

        async def go() -> None:
            done.append(await cli(handle, "logs", "-f", "job", "--runtimed"))

        nursery.start_soon(go)
        await trio.sleep(0.5)
        with log.open("a") as f:
            f.write(cri(lines_at(uid, ["a", "b"])[1]))
        log.with_suffix(".exited").write_text("")  # runtimed was killed
        await trio.sleep(1.0)  # the follower reads the ended log again meanwhile
        # the new instance: live lines from the beginning, then the rest when the task ends
        log.with_name("1.log").write_text(
            "".join(cri(line) for line in lines_at(uid, ["a", "b", "c"]))
        )
        await trio.sleep(0.5)
        with log.with_name("1.log").open("a") as f:
            f.write(cri(lines_at(uid, ["a", "b", "c", "d"])[3]))
        await set_status(kube, "job", {"phase": "Succeeded", "reason": "Succeeded"})

        async def finished() -> bool:
            return bool(done)

        await eventually(finished, seconds=20)
    [result] = done
    assert result.exit_code == 0, result.output
    assert result.stdout == "[runtimed info] 2026-11-29T08:00:00Z claimed\na\nb\nc\nd\n"


async def test_logs_of_a_run_that_ended_before_it_had_a_pod(
    stateful: tuple[ApiServerHandle, Kube],
) -> None:
    # F9: cancelled while Pending: no Pod and no output ever; not "use -f to wait"
    handle, kube = stateful
    await kube.create(RUNS, task_manifest("pend"))
    await set_status(kube, "pend", {"phase": "Cancelled", "reason": "Cancelled"})
    for args in (["logs", "pend"], ["logs", "-f", "pend"]):
        result = await cli(handle, *args)
        assert result.exit_code == 0, result.output
        assert result.stdout == ""
        assert result.stderr == (
            "Run pend ended Cancelled before it was placed on a Pod: it has no output\n"
        )


def test_seen_lines_shows_each_record_once_across_rereads_and_instances() -> None:
    def parsed(raw: str) -> LogLine:
        line = parse_line(raw, "u")
        assert line is not None
        return line

    seen = SeenLines()
    first = [record("u", "claimed"), record("u", "same time, other text")]
    # two records with the same time are both new; read again, neither is
    assert [seen.first_time(raw, parsed(raw), "p/runtimed") for raw in first] == [True, True]
    assert [seen.first_time(raw, parsed(raw), "p/runtimed") for raw in first] == [False, False]
    # the same record in another container's log is its own
    assert seen.first_time(first[0], parsed(first[0]), "p/runtime")
    later = record("u", "claimed").replace("08:00:00Z", "08:00:01Z")
    assert seen.first_time(later, parsed(later), "p/runtimed")  # the next instance's
    assert not seen.first_time(first[0], parsed(first[0]), "p/runtimed")  # older: read before
    # output with an offset: once per attempt, stream and offset, whatever the time
    out = record("u", "a", "stdout", offset=0)
    assert seen.first_time(out, parsed(out), "p/runtimed")
    relogged = out.replace("08:00:00Z", "08:00:05Z")  # by a restarted runtimed
    assert not seen.first_time(relogged, parsed(relogged), "p/runtimed")
    retried = record("u", "a", "stdout", attempt=2, offset=0)
    assert seen.first_time(retried, parsed(retried), "p/runtimed")
    # an older runtimed's output line (no offset) shows
    legacy = record("u", "x", "stdout").replace("08:00:00Z", "08:00:02Z")
    assert seen.first_time(legacy, parsed(legacy), "p/runtimed")
