"""Problems found by reviewing localkube part 2 as a user and an adversary (issue 4).

Each test here failed before its fix: a crash-looping container made its Pod ``Failed``
for a moment (so its ReplicaSet created a surplus Pod), ...
"""

from __future__ import annotations

from typing import Any

import trio
from lk_node_helpers import DEPLOYMENTS, PODS, deployment, pod

from localkube.controllers.kubeapi import Kube

CRASH = {
    "name": "main",
    "image": "localkube/python",
    "args": ["-c", "raise SystemExit(3)"],
}


async def watch_until(
    kube: Kube,
    params: dict[str, str],
    done: Any,
    *,
    create: tuple[str, dict[str, Any]],
    seconds: float = 8.0,
) -> list[dict[str, Any]]:
    """Create ``create`` and collect every Pod version a watch sees until ``done(pod)``."""
    listed = await kube.list(PODS, params)
    seen: list[dict[str, Any]] = []
    await kube.create(*create)
    with trio.fail_after(seconds):
        async for event in kube.watch(
            PODS, resource_version=listed["metadata"]["resourceVersion"], params=params
        ):
            if event["type"] in ("ADDED", "MODIFIED"):
                seen.append(event["object"])
                if done(event["object"]):
                    return seen
    raise AssertionError("watch ended")


def restarts(p: dict[str, Any]) -> int:
    statuses = (p.get("status") or {}).get("containerStatuses") or [{}]
    return int(statuses[0].get("restartCount", 0))


async def test_crash_looping_pod_with_restart_always_never_turns_terminal(kube: Kube) -> None:
    """kubelet: with restartPolicy Always (or OnFailure and a failure) a Pod whose
    containers all exited stays Running; Failed/Succeeded are terminal phases."""
    seen = await watch_until(
        kube,
        {"fieldSelector": "metadata.name=crashy"},
        lambda p: restarts(p) >= 3,
        create=(PODS, pod("crashy", CRASH)),
    )
    phases = [(p.get("status") or {}).get("phase") for p in seen]
    assert "Failed" not in phases and "Succeeded" not in phases, phases
    assert phases[-1] == "Running"


async def test_replicaset_of_a_crash_looping_pod_creates_no_surplus_pods(kube: Kube) -> None:
    seen = await watch_until(
        kube,
        {"labelSelector": "app=crashdep"},
        lambda p: restarts(p) >= 3,
        create=(DEPLOYMENTS, deployment("crashdep", 1, CRASH)),
    )
    assert len({p["metadata"]["name"] for p in seen}) == 1
