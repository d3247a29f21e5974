"""Scaling a Runtime down on localkube removes the idle Pod, not the one holding a Run.

The user's repro: a Runtime with one Pod holding Runs is scaled to 2 and back to 1, and the
ReplicaSet deleted the busy Pod (its Runs ended ``PodLost``). Kubernetes' scale-down order
(localkube implements it, :func:`localkube.controllers.replicaset.compare_for_deletion`)
prefers the Pod Ready for less time, so the busy Pod loses whenever it became Ready more
recently than the idle one, as after a readiness blip of its runtimed; with equal log buckets
it is a coin toss on UIDs. This test sets the busy Pod up that way, so only the control
plane's ``pod-deletion-cost`` marks (:mod:`krt.controlplane.deletion_cost`) keep it.

runtimed is played by :class:`~tests.controlplane.harness.HeartbeatDouble`; the held Run is
a task left Scheduled on the older Pod (nothing claims it, and the heartbeat stays fresh).
The control plane runs as a ServiceAccount bound to exactly
:data:`~krt.controlplane.rbac.CONTROLPLANE_RULES` (the chart's ClusterRole), so the test also
shows the Pod patch is allowed on a real RBAC authorizer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from krt.api.constants import RUNTIME_LABEL, RUNTIMED_READY_POD_CONDITION
from krt.controlplane.deletion_cost import POD_DELETION_COST_ANNOTATION
from krt.kube.client import Kube, Obj, connect
from krt.kube.clock import SystemClock, format_time, parse_time
from krt.kube.resources import PODS, RUNS, RUNTIMES
from krt.kube.status import patch_pod_condition
from localkube.cluster import ClusterHandle

from .harness import (
    NS,
    HeartbeatDouble,
    create_runtime,
    run_manifest,
    running_controlplane,
    wait_for,
)
from .test_integration_rbac import _service_account_kubeconfig


async def _scale(kube: Kube, replicas: int) -> None:
    """``kubectl scale runtime python --replicas=N`` (the scale subresource)."""
    await kube.patch(RUNTIMES, "python", NS, {"spec": {"replicas": replicas}}, subresource="scale")


async def _pods(kube: Kube) -> list[Obj]:
    pods, _ = await kube.list(PODS, NS, label_selector=f"{RUNTIME_LABEL}=python")
    return pods


def _ready_since(pod: Obj) -> float | None:
    """When the Pod became Ready (epoch seconds), or None while it is not Ready."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready" and condition.get("status") == "True":
            when = condition.get("lastTransitionTime")
            return parse_time(when).timestamp() if when else None
    return None


async def _pod(kube: Kube, name: str) -> Obj | None:
    return next((p for p in await _pods(kube) if p["metadata"]["name"] == name), None)


async def _set_gate(kube: Kube, pod_name: str, status: str) -> None:
    await patch_pod_condition(
        kube,
        NS,
        pod_name,
        {
            "type": RUNTIMED_READY_POD_CONDITION,
            "status": status,
            "reason": "Healthy" if status == "True" else "Restarting",
            "lastProbeTime": format_time(SystemClock().now()),
        },
    )


async def test_scale_down_removes_the_idle_pod_and_keeps_the_run(
    kube: Kube, cluster: ClusterHandle, heartbeats: HeartbeatDouble, tmp_path: Path
) -> None:
    kubeconfig = await _service_account_kubeconfig(kube, cluster, tmp_path)
    async with (
        await connect(kubeconfig=kubeconfig) as limited,
        running_controlplane(limited, namespaces=None, leader_elect=True, lease_namespace=NS),
    ):
        await create_runtime(kube, replicas=1, runs=4)

        async def ready_pods(count: int) -> list[Obj]:
            pods = [p for p in await _pods(kube) if _ready_since(p) is not None]
            return pods if len(pods) == count else []

        await wait_for(lambda: ready_pods(1), seconds=30)
        await kube.create(RUNS, run_manifest("held"))

        async def scheduled() -> bool:
            run = await kube.get(RUNS, "held", NS)
            return (run.get("status") or {}).get("phase") == "Scheduled"

        await wait_for(scheduled)
        held = await kube.get(RUNS, "held", NS)
        busy_name = held["status"]["assignedPod"]
        busy_uid = held["status"]["assignedPodUID"]

        await _scale(kube, 2)
        await wait_for(lambda: ready_pods(2), seconds=30)
        idle = next(p for p in await ready_pods(2) if p["metadata"]["name"] != busy_name)
        idle_ready = _ready_since(idle)
        assert idle_ready is not None

        # the busy Pod's runtimed blips: it is Ready again 2+ s after the idle Pod, so it has
        # been Ready for less time (a lower log bucket) and the ReplicaSet would remove it
        await _set_gate(kube, busy_name, "False")

        async def busy_ready(want: bool) -> bool:
            pod = await _pod(kube, busy_name)
            return pod is not None and (_ready_since(pod) is not None) == want

        await wait_for(lambda: busy_ready(False))
        await trio.sleep(max(0.0, idle_ready + 2.0 - SystemClock().now().timestamp()))
        await _set_gate(kube, busy_name, "True")
        await wait_for(lambda: busy_ready(True))
        busy = await _pod(kube, busy_name)
        assert busy is not None
        busy_since = _ready_since(busy)
        assert busy_since is not None
        assert busy_since >= idle_ready + 2.0  # without the marks, the busy Pod goes first

        await _scale(kube, 1)

        async def one_left() -> list[Obj]:
            live = [p for p in await _pods(kube) if not p["metadata"].get("deletionTimestamp")]
            return live if len(live) == 1 else []

        await wait_for(one_left, seconds=20)
        survivor: dict[str, Any] = (await one_left())[0]
        assert survivor["metadata"]["name"] == busy_name
        annotations = survivor["metadata"].get("annotations") or {}
        assert annotations.get(POD_DELETION_COST_ANNOTATION) == "1"
        run = await kube.get(RUNS, "held", NS)
        assert run["status"]["assignedPodUID"] == busy_uid
        assert run["status"]["phase"] == "Scheduled"
        assert run["status"].get("reason") != "PodLost"
