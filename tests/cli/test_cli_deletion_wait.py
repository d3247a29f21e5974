"""Waiting for a Run to be gone (F18): "already gone" is success, a stall says what holds it."""

from __future__ import annotations

import io
from typing import Any

import pytest
import trio
import trio.testing

from krt.cli import deletion_waiting
from krt.cli.deletion_waiting import (
    STALL_NOTICE_SECONDS,
    DeletionProgress,
    deletion_blocker,
    wait_until_gone,
)
from krt.cli.exitcodes import ExitCode
from krt.cli.failures import CommandFailed
from krt.cli.waiting import time_limit
from krt.kube.client import Kube
from krt.kube.resources import RUNS

from .conftest import NS, CliRun, eventually, set_status, task_manifest
from .test_cli_waiting_time import OneRun

FINALIZER = "kruntimes.io/registration-cleanup"


def deleting(*finalizers: str, pod: str = "runtime-python-abc") -> dict[str, Any]:
    obj: dict[str, Any] = {
        "metadata": {
            "name": "fh",
            "namespace": "team",
            "deletionTimestamp": "2026-11-29T17:00:00Z",
            "finalizers": list(finalizers),
        },
        "status": {"phase": "Ready"},
    }
    if pod:
        obj["status"]["assignedPod"] = pod
    return obj


def test_the_blocker_names_the_finalizer_and_the_pod_whose_runtimed_removes_it() -> None:
    assert deletion_blocker(deleting(FINALIZER)) == (
        "runtimed on Pod runtime-python-abc has not unregistered the function yet (finalizer "
        "kruntimes.io/registration-cleanup; check: krt logs fh --runtimed, kubectl get pod "
        "runtime-python-abc -n team)"
    )


def test_the_blocker_without_a_pod_points_at_the_control_plane() -> None:
    text = deletion_blocker(deleting(FINALIZER, pod=""))
    assert text.startswith("finalizer kruntimes.io/registration-cleanup is still set and no Pod")
    assert "control plane" in text


def test_foreign_finalizers_are_named_as_someone_elses() -> None:
    assert deletion_blocker(deleting("example.com/backup", "example.com/audit")) == (
        "finalizers example.com/backup, example.com/audit (not kruntimes': the controller "
        "that added it must remove it)"
    )
    both = deletion_blocker(deleting(FINALIZER, "example.com/backup"))
    assert both.startswith("runtimed on Pod runtime-python-abc")
    assert both.endswith(
        "finalizer example.com/backup (not kruntimes': the controller that added it must remove it)"
    )


def test_nothing_blocks_a_deleting_run_without_finalizers_and_an_undeleted_run_says_so() -> None:
    assert deletion_blocker(deleting()) == ""
    undeleted = deleting(FINALIZER)
    del undeleted["metadata"]["deletionTimestamp"]
    assert deletion_blocker(undeleted) == (
        "it is not being deleted (no deletionTimestamp): krt delete fh"
    )


def held_run() -> OneRun:
    """A OneRun (name r) that is being deleted and held by the cleanup finalizer."""
    run = OneRun()
    run.obj["metadata"].update(deletionTimestamp="2026-11-29T17:00:00Z", finalizers=[FINALIZER])
    run.obj["status"] = {"phase": "Ready", "assignedPod": "pod-1"}
    return run


async def test_a_quick_deletion_says_nothing(autojump_clock: trio.testing.MockClock) -> None:
    run = held_run()
    stream = io.StringIO()

    async def runtimed() -> None:
        await trio.sleep(STALL_NOTICE_SECONDS / 2)
        run.set_phase(None, kind="DELETED")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(runtimed)
        start = trio.current_time()
        await wait_until_gone(run, "ns", "r", DeletionProgress("r", stream=stream))  # type: ignore[arg-type]
    assert trio.current_time() - start == pytest.approx(STALL_NOTICE_SECONDS / 2)
    assert stream.getvalue() == ""


async def test_a_stalled_deletion_says_what_holds_it_and_the_timeout_repeats_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    run = held_run()
    stream = io.StringIO()
    progress = DeletionProgress("r", stream=stream)
    start = trio.current_time()
    with (
        pytest.raises(CommandFailed) as caught,
        time_limit(15.0, "Run r was not gone", progress=progress),
    ):
        await wait_until_gone(run, "ns", "r", progress)  # type: ignore[arg-type]
    assert trio.current_time() - start == pytest.approx(15.0)
    assert caught.value.code is ExitCode.TIMED_OUT
    blocker = (
        "runtimed on Pod pod-1 has not unregistered the function yet (finalizer "
        "kruntimes.io/registration-cleanup; check: krt logs r --runtimed, kubectl get pod "
        "pod-1 -n ns)"
    )
    assert caught.value.message == f"Run r was not gone within 15s; waiting for: {blocker}"
    assert stream.getvalue() == f"r: still there; waiting for: {blocker}\n"  # once


async def test_after_the_stall_each_new_blocker_gets_a_line(
    autojump_clock: trio.testing.MockClock,
) -> None:
    run = held_run()
    stream = io.StringIO()

    async def recovery() -> None:
        await trio.sleep(5)
        run.obj["status"].pop("assignedPod")  # the Pod was lost; the control plane takes over
        run.set_phase(None)
        await trio.sleep(5)
        run.set_phase(None, kind="DELETED")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(recovery)
        await wait_until_gone(run, "ns", "r", DeletionProgress("r", stream=stream))  # type: ignore[arg-type]
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("r: still there; waiting for: runtimed on Pod pod-1 ")
    assert lines[1].startswith("r: still there; waiting for: finalizer kruntimes.io/")


async def test_a_run_that_is_not_there_is_gone_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from krt.kube.errors import NotFound

    class Missing:
        async def get(self, ref: Any, name: str, namespace: str | None = None) -> Any:
            raise NotFound(404, "NotFound", "gone", details={"name": name})

    stream = io.StringIO()
    await wait_until_gone(Missing(), "ns", "r", DeletionProgress("r", stream=stream))  # type: ignore[arg-type]
    assert stream.getvalue() == ""


# -- the commands, against localkube -------------------------------------------------------


async def test_wait_for_delete_of_a_run_that_does_not_exist_is_success(cli: CliRun) -> None:
    """kubectl wait --for=delete semantics; docs/cli.md: "delete: 0 when gone"."""
    result = await cli("wait", "nope", "--for", "delete")
    assert result.exit_code == ExitCode.OK, result.output
    assert result.stdout == ""
    assert result.stderr == ""
    # the other conditions still need the Run
    assert (await cli("wait", "nope")).exit_code == ExitCode.NOT_FOUND


async def test_delete_wait_that_stalls_names_the_finalizer_and_the_pod(
    kube: Kube, cli: CliRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(deletion_waiting, "STALL_NOTICE_SECONDS", 0.05)
    manifest = task_manifest("held")
    manifest["metadata"]["finalizers"] = [FINALIZER]
    await kube.create(RUNS, manifest)
    await set_status(
        kube,
        "held",
        {"phase": "Scheduled", "attempt": 1, "assignedPod": "rt-1", "assignedPodUID": "p-1"},
    )
    result = await cli("delete", "held", "--wait", "--timeout", "1s")
    assert result.exit_code == ExitCode.TIMED_OUT, result.output
    blocker = (
        f"runtimed on Pod rt-1 has not unregistered the function yet (finalizer {FINALIZER}; "
        f"check: krt logs held --runtimed, kubectl get pod rt-1 -n {NS})"
    )
    assert result.stderr.splitlines() == [
        f"held: still there; waiting for: {blocker}",
        f"error: Run held was not gone within 1s; waiting for: {blocker}",
    ]
    # the finalizer goes: the same wait ends at once
    await kube.patch(RUNS, "held", NS, {"metadata": {"finalizers": None}})

    async def gone() -> bool:
        return (await cli("wait", "held", "--for", "delete")).exit_code == ExitCode.OK

    await eventually(gone)
