"""Two control planes at once never double-bind (issue 5 acceptance: 200 Runs), and leader
election lets only one of them act, with a successor taking over when it stops."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from krt.api.phases import Phase
from krt.controlplane.app import ControlPlane
from krt.kube.client import Kube, connect
from krt.kube.resources import RUNS
from localkube.cluster import ClusterHandle

from .harness import NS, HeartbeatDouble, run_manifest, running_controlplane, wait_for
from .test_integration_scheduler import RunWatch, _create_runs, _pool


async def _race(
    kube: Kube, cluster: ClusterHandle, nursery: trio.Nursery, runs: int
) -> tuple[ControlPlane, ControlPlane, RunWatch]:
    watch = RunWatch(kube)
    await nursery.start(watch.informer.run)
    async with await connect(kubeconfig=Path(cluster.apiserver.kubeconfig_path)) as other:
        async with running_controlplane(kube) as first, running_controlplane(other) as second:
            await _pool(kube, replicas=2, runs=runs)
            await _create_runs(kube, runs)
            await wait_for(lambda: watch.phases()[Phase.SCHEDULED] == runs, seconds=120)
            # a bind's watch event can arrive before its PUT response is processed
            await wait_for(lambda: first.scheduler.bound + second.scheduler.bound >= runs)
            await trio.sleep(0.5)  # let any late (losing) bind land, if one could
            return first, second, watch


def _check_no_double_bind(
    first: ControlPlane, second: ControlPlane, watch: RunWatch, runs: int
) -> None:
    assert len(watch.binds) == runs
    assert all(len(assignments) == 1 for assignments in watch.binds.values())
    assert first.scheduler.bound + second.scheduler.bound == runs
    conflicts = (
        first.metrics.bind_conflicts._value.get() + second.metrics.bind_conflicts._value.get()
    )  # noqa: SLF001
    print(
        f"\nbinds: {first.scheduler.bound} + {second.scheduler.bound}, "
        f"binds answered 409 Conflict: {conflicts:.0f}"
    )


async def test_two_schedulers_without_leader_election_never_double_bind(
    kube: Kube, cluster: ClusterHandle, heartbeats: HeartbeatDouble, nursery: trio.Nursery
) -> None:
    """Both schedulers race for the same Runs; conditional binds make exactly one win."""
    first, second, watch = await _race(kube, cluster, nursery, 40)
    _check_no_double_bind(first, second, watch, 40)


@pytest.mark.slow
async def test_two_schedulers_never_double_bind_across_200_runs(
    kube: Kube, cluster: ClusterHandle, heartbeats: HeartbeatDouble, nursery: trio.Nursery
) -> None:
    """The acceptance scale: 200 Runs (about 30 s on a loaded 2-core machine)."""
    first, second, watch = await _race(kube, cluster, nursery, 200)
    _check_no_double_bind(first, second, watch, 200)


async def test_with_leader_election_only_the_leader_acts_and_a_successor_takes_over(
    kube: Kube, cluster: ClusterHandle, heartbeats: HeartbeatDouble, nursery: trio.Nursery
) -> None:
    """At no sampled moment do both planes lead; every Run is bound once; on the leader's
    stop the other takes over and schedules."""
    watch = RunWatch(kube)
    await nursery.start(watch.informer.run)
    timing = {
        "leader_elect": True,
        "lease_namespace": NS,
        "lease_duration": 6.0,
        "renew_deadline": 4.0,
        "retry_period": 0.5,
    }
    async with await connect(kubeconfig=Path(cluster.apiserver.kubeconfig_path)) as other:
        async with trio.open_nursery() as planes:
            stops = {"a": trio.CancelScope(), "b": trio.CancelScope()}
            started: dict[str, ControlPlane] = {}
            overlaps = 0

            async def keep(name: str, client: Kube) -> None:
                with stops[name]:
                    async with running_controlplane(client, identity=name, **timing) as plane:
                        started[name] = plane
                        await trio.sleep_forever()

            def leaders() -> list[str]:
                return [n for n, p in started.items() if p.metrics.is_leader._value.get() == 1]  # noqa: SLF001

            async def sample() -> None:
                nonlocal overlaps
                while True:
                    if len(leaders()) > 1:
                        overlaps += 1
                    await trio.sleep(0.005)

            planes.start_soon(keep, "a", kube)
            planes.start_soon(keep, "b", other)
            planes.start_soon(sample)
            await wait_for(lambda: len(started) == 2)
            await wait_for(lambda: len(leaders()) == 1)
            await _pool(kube, replicas=1, runs=30)
            await _create_runs(kube, 20)
            await wait_for(lambda: watch.phases()[Phase.SCHEDULED] == 20, seconds=30)
            # a bind's watch event can arrive before its PUT response is processed
            await wait_for(
                lambda: started["a"].scheduler.bound + started["b"].scheduler.bound == 20
            )
            await wait_for(lambda: len(leaders()) == 1)
            leader = leaders()[0]
            follower = "b" if leader == "a" else "a"
            before = started[follower].scheduler.bound
            stops[leader].cancel()  # the leader stops and releases its Lease
            await wait_for(lambda: leaders() == [follower], seconds=10)
            await kube.create(RUNS, run_manifest("after-failover"))
            await wait_for(lambda: watch.phases()[Phase.SCHEDULED] == 21, seconds=10)
            await wait_for(lambda: started[follower].scheduler.bound == before + 1)
            assert all(len(assignments) == 1 for assignments in watch.binds.values())
            assert overlaps == 0
            planes.cancel_scope.cancel()
