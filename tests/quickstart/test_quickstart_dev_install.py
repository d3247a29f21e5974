"""Readiness and failure reporting of the dev install (krt.cli.dev_install)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from krt.cli.dev_apply import apply, load_manifests
from krt.cli.dev_install import (
    Component,
    InstallError,
    ReadinessTracker,
    container_problem,
    latest_log,
    wait_until_ready,
)
from krt.kube.client import Kube
from krt.kube.errors import NotFound
from krt.kube.resources import PODS, RUNTIMES


def status(**container: Any) -> dict[str, Any]:
    return {"status": {"containerStatuses": [{"name": "c", "restartCount": 0, **container}]}}


def test_container_problem_tells_crash_loops_and_unrunnable_images_from_starting() -> None:
    assert container_problem(status(state={"running": {}})) is None
    # transient: the Secret may be created a moment later
    assert (
        container_problem(status(state={"waiting": {"reason": "CreateContainerConfigError"}}))
        is None
    )
    assert container_problem(status(restartCount=1, state={"running": {}})) is None
    assert container_problem(
        status(restartCount=2, lastState={"terminated": {"exitCode": 3}}, state={"running": {}})
    ) == ("c", "keeps exiting (restarted 2x, last exit code 3)")
    assert container_problem(
        status(restartCount=1, state={"waiting": {"reason": "CrashLoopBackOff"}})
    ) == (
        "c",
        "keeps exiting (restarted 1x)",
    )
    problem = container_problem(
        status(state={"waiting": {"reason": "ErrImagePull", "message": "image x is not run here"}})
    )
    assert problem == ("c", "cannot start (image x is not run here)")
    problem = container_problem(
        status(lastState={"terminated": {"reason": "StartError", "message": "no such file"}})
    )
    assert problem == ("c", "cannot start (no such file)")


def test_restarts_from_before_the_wait_do_not_count_as_a_crash_loop() -> None:
    """A resumed cluster's Pods carry the restarts of earlier sessions (each node restart adds
    one): ``krt dev up`` must not call a running container crash-looping for them."""
    tracker = ReadinessTracker(pods_dir=None)
    resumed = {**pod_meta(uid="old"), **status(restartCount=7, state={"running": {}})}
    assert container_problem(resumed, restarts_before=tracker.restarts_before(resumed)) is None
    assert container_problem(resumed) is not None  # counted from zero it would look crashing
    once_more = {**pod_meta(uid="old"), **status(restartCount=8, state={"running": {}})}
    assert container_problem(once_more, restarts_before=tracker.restarts_before(once_more)) is None
    crashing = {
        **pod_meta(uid="old"),
        **status(restartCount=9, lastState={"terminated": {"exitCode": 1}}, state={"running": {}}),
    }
    assert container_problem(crashing, restarts_before=tracker.restarts_before(crashing)) == (
        "c",
        "keeps exiting (restarted 9x, last exit code 1)",
    )
    fresh = {**pod_meta(uid="new"), **status(restartCount=2, state={"running": {}})}
    assert container_problem(fresh, restarts_before=tracker.restarts_before(fresh)) is None


def pod_meta(name: str = "p", namespace: str = "ns", uid: str = "u1") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, "uid": uid}}


def test_latest_log_is_the_highest_numbered_run(tmp_path: Path) -> None:
    logs = tmp_path / "ns_p_u1" / "logs" / "c"
    assert latest_log(tmp_path, pod_meta(), "c") is None
    logs.mkdir(parents=True)
    for n in (0, 9, 10):
        (logs / f"{n}.log").write_text(f"run {n}\n")
    (logs / "10.exited").write_text("")
    assert latest_log(tmp_path, pod_meta(), "c") == logs / "10.log"


def test_summary_lists_what_is_pending_with_logs(tmp_path: Path) -> None:
    tracker = ReadinessTracker(pods_dir=tmp_path)
    assert tracker.summary() == "everything reported ready"
    tracker.pending["gateway"] = "waiting for the gateway: 0/1 Pods ready"
    tracker.logs["gateway"] = tmp_path / "g.log"
    assert (
        tracker.summary()
        == f"  waiting for the gateway: 0/1 Pods ready (log: {tmp_path / 'g.log'})"
    )


@pytest.fixture
async def with_crds(kube: Kube) -> Kube:
    for crd in load_manifests("crds"):
        await apply(kube, crd)
    with trio.fail_after(10):
        while True:
            try:
                await kube.list(RUNTIMES, "default")
                return kube
            except NotFound:
                await trio.sleep(0.05)


async def make_pod(
    kube: Kube, name: str, labels: dict[str, str], pod_status: dict[str, Any]
) -> dict[str, Any]:
    pod = await kube.create(
        PODS,
        {
            "metadata": {"name": name, "namespace": "default", "labels": labels},
            "spec": {"containers": [{"name": "c", "image": "localkube/python"}]},
        },
    )
    pod["status"] = pod_status
    return await kube.replace_status(PODS, pod)


READY = {"conditions": [{"type": "Ready", "status": "True"}]}
PYTHON = Component("Runtime python", "default", "kruntimes.io/runtime=python", runtime="python")


async def test_wait_reports_progress_until_the_runtime_is_ready(with_crds: Kube) -> None:
    kube = with_crds
    lines: list[str] = []
    said = trio.Event()

    def progress(line: str) -> None:
        lines.append(line)
        said.set()

    assert await apply(kube, load_manifests("runtimes")[0]) == "created"
    await make_pod(kube, "python-1", {"kruntimes.io/runtime": "python"}, READY)

    async def control_plane_reports_ready() -> None:
        await said.wait()
        live = await kube.get(RUNTIMES, "python", "default")
        live["status"] = {"readyReplicas": 1, "replicas": 1}
        await kube.replace_status(RUNTIMES, live)

    tracker = ReadinessTracker(pods_dir=None)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(control_plane_reports_ready)
        with trio.fail_after(10):
            ready = await wait_until_ready(kube, [PYTHON], tracker=tracker, progress=progress)
    assert ready == {"python": 1}
    assert lines[0] == "waiting for Runtime python: 0/1 ready ..."
    assert tracker.pending == {}


async def test_wait_fails_at_once_on_a_crash_loop_with_the_log_path_and_tail(
    with_crds: Kube, tmp_path: Path
) -> None:
    kube = with_crds
    crashing = {
        "containerStatuses": [
            {
                "name": "c",
                "restartCount": 3,
                "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                "lastState": {"terminated": {"exitCode": 1}},
            }
        ]
    }
    pod = await make_pod(kube, "gw-1", {"app.kubernetes.io/component": "gateway"}, crashing)
    log_dir = tmp_path / f"default_gw-1_{pod['metadata']['uid']}" / "logs" / "c"
    log_dir.mkdir(parents=True)
    (log_dir / "3.log").write_text(
        "2026-01-01T00:00:00.000000000Z stderr F Traceback (most recent call last):\n"
        "2026-01-01T00:00:00.000000000Z stderr F ValueError: bad --bind\n"
    )
    gateway = Component("gateway", "default", "app.kubernetes.io/component=gateway")
    with trio.fail_after(10), pytest.raises(InstallError) as failed:
        await wait_until_ready(
            kube, [gateway], tracker=ReadinessTracker(pods_dir=tmp_path), progress=print
        )
    message = str(failed.value)
    assert message.startswith(
        "gateway: container c of Pod default/gw-1 keeps exiting (restarted 3x, last exit code 1)"
    )
    assert f"log: {log_dir / '3.log'}" in message
    assert message.endswith("Traceback (most recent call last):\nValueError: bad --bind")


async def test_pending_parts_are_left_in_the_tracker_when_the_caller_gives_up(
    with_crds: Kube,
) -> None:
    kube = with_crds
    tracker = ReadinessTracker(pods_dir=None)
    parts = [
        Component("control plane", "default", "app.kubernetes.io/component=controlplane"),
        PYTHON,
    ]
    with trio.move_on_after(1.2):
        await wait_until_ready(kube, parts, tracker=tracker, progress=lambda _: None)
    assert tracker.pending == {
        "control plane": "waiting for the control plane: 0/1 Pods ready",
        "Runtime python": "waiting for Runtime python: not created yet",
    }
