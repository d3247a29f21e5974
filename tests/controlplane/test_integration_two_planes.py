"""Two control planes at once never double-bind (issue 5 acceptance: 200 Runs), and leader
election lets only one of them act."""

from __future__ import annotations

from pathlib import Path

import trio

from krt.api.phases import Phase
from krt.kube.client import Kube, connect
from localkube.cluster import ClusterHandle

from .harness import NS, HeartbeatDouble, running_controlplane, wait_for
from .test_integration_scheduler import RunWatch, _create_runs, _pool


async def test_two_schedulers_without_leader_election_never_double_bind(
    kube: Kube, cluster: ClusterHandle, heartbeats: HeartbeatDouble, nursery: trio.Nursery
) -> None:
    """Both schedulers race for the same 200 Runs; conditional binds make exactly one win."""
    watch = RunWatch(kube)
    await nursery.start(watch.informer.run)
    async with await connect(kubeconfig=Path(cluster.apiserver.kubeconfig_path)) as other:
        async with running_controlplane(kube) as first, running_controlplane(other) as second:
            await _pool(kube, replicas=2, runs=100)
            await _create_runs(kube, 200)
            await wait_for(lambda: watch.phases()[Phase.SCHEDULED] == 200, seconds=60)
            await trio.sleep(0.5)  # let any late (losing) bind land, if one could
            assert len(watch.binds) == 200
            assert all(len(assignments) == 1 for assignments in watch.binds.values())
            assert first.scheduler.bound + second.scheduler.bound == 200
            conflicts = (
                first.metrics.bind_conflicts._value.get()  # noqa: SLF001
                + second.metrics.bind_conflicts._value.get()  # noqa: SLF001
            )
            print(
                f"\nbinds: {first.scheduler.bound} + {second.scheduler.bound}, "
                f"conflicts answered 409: {conflicts:.0f}"
            )


async def test_with_leader_election_only_the_leader_binds(
    kube: Kube, cluster: ClusterHandle, heartbeats: HeartbeatDouble, nursery: trio.Nursery
) -> None:
    watch = RunWatch(kube)
    await nursery.start(watch.informer.run)
    timing = {"lease_duration": 3.0, "renew_deadline": 2.0, "retry_period": 0.5}
    async with await connect(kubeconfig=Path(cluster.apiserver.kubeconfig_path)) as other:
        async with (
            running_controlplane(kube, leader_elect=True, lease_namespace=NS, **timing) as a,
            running_controlplane(other, leader_elect=True, lease_namespace=NS, **timing) as b,
        ):
            await wait_for(
                lambda: a.metrics.is_leader._value.get() + b.metrics.is_leader._value.get() == 1
            )  # noqa: SLF001
            await _pool(kube, replicas=1, runs=20)
            await _create_runs(kube, 20)
            await wait_for(lambda: watch.phases()[Phase.SCHEDULED] == 20, seconds=30)
            assert sorted([a.scheduler.bound, b.scheduler.bound]) == [0, 20]
            assert all(len(assignments) == 1 for assignments in watch.binds.values())
