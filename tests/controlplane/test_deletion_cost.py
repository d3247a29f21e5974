"""Busy Runtime Pods are marked with a deletion cost just before a scale-down.

The pure decision (:mod:`krt.controlplane.deletion_cost`), then the Runtime controller on the
in-memory API: the marks are written before the Deployment's replicas drop, and never
otherwise (no Pod write per Run).
"""

from __future__ import annotations

from typing import Any

import pytest
import trio

from krt.api.phases import Phase
from krt.controlplane.deletion_cost import (
    POD_DELETION_COST_ANNOTATION,
    busy_runs_by_pod,
    current_deletion_cost,
    deletion_cost_patches,
)
from krt.kube.clock import TrioLinkedClock
from krt.kube.resources import DEPLOYMENTS, PODS, RUNS, RUNTIMES

from .builders import make_run, pod_dict, run_dict, runtime_dict
from .fakekube import FakeKube
from .test_loops import add_pod, plane, until

NS = "demo"


def with_cost(pod: dict[str, Any], value: str) -> dict[str, Any]:
    pod["metadata"]["annotations"] = {POD_DELETION_COST_ANNOTATION: value}
    return pod


def test_busy_runs_count_non_terminal_runs_per_assigned_pod() -> None:
    runs = [
        make_run("fn-ready", function=True, phase=Phase.READY, pod="a"),
        make_run("fn-running", function=True, phase=Phase.RUNNING, pod="a"),
        make_run("task-scheduled", phase=Phase.SCHEDULED, pod="a"),
        make_run("task-running", phase=Phase.RUNNING, pod="b"),
        make_run("fn-pending-assigned", function=True, phase=Phase.PENDING, pod="b"),
        make_run("done", phase=Phase.SUCCEEDED, pod="a"),
        make_run("failed", function=True, phase=Phase.FAILED, pod="b"),
        make_run("cancelled", phase=Phase.CANCELLED, pod="b"),
        make_run("timeout", phase=Phase.TIMEOUT, pod="b"),
        make_run("unassigned", phase=Phase.PENDING),
    ]
    assert busy_runs_by_pod(runs) == {"uid-a": 3, "uid-b": 2}


def names(patches: list[Any]) -> list[tuple[str, int]]:
    return [(p.pod_name, p.cost) for p in patches]


def test_scale_down_marks_pods_whose_cost_differs() -> None:
    pods = [
        pod_dict("busy"),  # no annotation (cost 0), 2 Runs: patched
        with_cost(pod_dict("was-busy"), "3"),  # stale cost, now idle: patched to 0
        pod_dict("idle"),  # cost 0 already (missing): no write
        with_cost(pod_dict("same"), "1"),  # already right: no write
        with_cost(pod_dict("garbled"), "+1"),  # reads as 0 (Kubernetes' parser): no write
        pod_dict("leaving", deleting=True),  # being deleted: no write
    ]
    busy = {"uid-busy": 2, "uid-same": 1, "uid-leaving": 4}
    patches = deletion_cost_patches(pods, busy, current_replicas=6, desired_replicas=4)
    assert names(patches) == [("busy", 2), ("was-busy", 0)]
    assert patches[0].patch == {"metadata": {"annotations": {POD_DELETION_COST_ANNOTATION: "2"}}}
    assert patches[1].patch == {"metadata": {"annotations": {POD_DELETION_COST_ANNOTATION: "0"}}}


@pytest.mark.parametrize(("current", "desired"), [(2, 2), (1, 2), (None, 1), (0, 0)])
def test_no_marks_unless_replicas_drop(current: int | None, desired: int) -> None:
    pods = [pod_dict("busy"), with_cost(pod_dict("stale"), "5")]
    assert (
        deletion_cost_patches(
            pods, {"uid-busy": 2}, current_replicas=current, desired_replicas=desired
        )
        == []
    )


def test_scale_to_zero_marks_too() -> None:
    patches = deletion_cost_patches(
        [pod_dict("busy")], {"uid-busy": 1}, current_replicas=1, desired_replicas=0
    )
    assert names(patches) == [("busy", 1)]


@pytest.mark.parametrize(
    ("value", "cost"),
    [("0", 0), ("12", 12), ("-4", -4), ("007", 0), ("+7", 0), ("x", 0), ("2147483648", 0)],
)
def test_current_cost_reads_like_kubernetes(value: str, cost: int) -> None:
    assert current_deletion_cost(with_cost(pod_dict("p"), value)) == cost


async def _set_replicas(fake: FakeKube, replicas: int) -> None:
    runtime = fake.peek(RUNTIMES, NS, "python")
    assert runtime is not None
    await fake.replace(RUNTIMES, {**runtime, "spec": {**runtime["spec"], "replicas": replicas}})


def _deployment_replicas(fake: FakeKube) -> int | None:
    deployment = fake.peek(DEPLOYMENTS, NS, "runtime-python")
    return None if deployment is None else int(deployment["spec"]["replicas"])


def _pod_writes(fake: FakeKube) -> list[tuple[str, str, str]]:
    """Writes to Pods other than the test's own creations."""
    return [w for w in fake.writes if w[1] == "pods" and w[0] != "create"]


async def test_controller_marks_busy_pods_before_lowering_replicas(
    fake: FakeKube, clock: TrioLinkedClock, autojump_clock: trio.abc.Clock
) -> None:
    await fake.create(RUNTIMES, runtime_dict(replicas=2, runs=4))
    old = await add_pod(fake, "p-old")
    await add_pod(fake, "p-new")
    for name, function, phase in (("fn", True, Phase.READY), ("task", False, Phase.RUNNING)):
        data = run_dict(name, function=function, phase=phase, pod="p-old")
        data["status"]["assignedPodUID"] = old["metadata"]["uid"]
        del data["metadata"]["uid"], data["metadata"]["resourceVersion"]
        await fake.create(RUNS, data)
    async with plane(fake, clock):
        await until(lambda: _deployment_replicas(fake) == 2)
        await trio.sleep(1.0)
        assert _pod_writes(fake) == []  # steady state: no Pod writes
        await _set_replicas(fake, 3)  # scaling up marks nothing
        await until(lambda: _deployment_replicas(fake) == 3)
        assert _pod_writes(fake) == []
        await _set_replicas(fake, 1)
        await until(lambda: _deployment_replicas(fake) == 1)
        # the busy Pod is marked (once), before the Deployment's replicas drop
        assert _pod_writes(fake) == [("patch", "pods", "p-old")]
        marked = fake.writes.index(("patch", "pods", "p-old"))
        lowered = max(i for i, w in enumerate(fake.writes) if w[:2] == ("replace", "deployments"))
        assert marked < lowered
        pod = fake.peek(PODS, NS, "p-old")
        assert pod is not None
        assert pod["metadata"]["annotations"][POD_DELETION_COST_ANNOTATION] == "2"
        assert POD_DELETION_COST_ANNOTATION not in (
            fake.peek(PODS, NS, "p-new") or {"metadata": {}}
        )["metadata"].get("annotations", {})
        # a second scale-down with nothing changed writes no Pod again
        await _set_replicas(fake, 0)
        await until(lambda: _deployment_replicas(fake) == 0)
        assert _pod_writes(fake) == [("patch", "pods", "p-old")]
