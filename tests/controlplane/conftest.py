"""Fixtures for the control-plane tests on localkube (helpers in :mod:`.harness`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from krt.kube.client import Kube, connect
from krt.kube.clock import TrioLinkedClock
from krt.kube.resources import NAMESPACES
from localkube.cluster import ClusterConfig, ClusterHandle, serve_cluster

from .builders import NOW
from .fakekube import FakeKube
from .harness import NS, HeartbeatDouble, install_crds, write_image_table


@pytest.fixture
def clock() -> TrioLinkedClock:
    """Wall clock = NOW + trio time (virtual under autojump_clock)."""
    return TrioLinkedClock(epoch=NOW)


@pytest.fixture
def fake(clock: TrioLinkedClock) -> FakeKube:
    """An empty in-memory API."""
    return FakeKube(clock)


@pytest.fixture
async def cluster(tmp_path: Path, nursery: trio.Nursery) -> ClusterHandle:
    """A whole localkube (API server, controllers, node) under ``tmp_path``."""
    handle: ClusterHandle = await nursery.start(
        serve_cluster,
        ClusterConfig(
            state_dir=tmp_path / "state",
            images_file=write_image_table(tmp_path),
            backoff_initial=0.2,
            shutdown_grace=1.0,
        ),
    )
    return handle


@pytest.fixture
async def kube(cluster: ClusterHandle) -> AsyncIterator[Kube]:
    """A :class:`krt.kube.client.Kube` on the cluster: CRDs installed, namespace ``demo``."""
    client = await connect(kubeconfig=Path(cluster.apiserver.kubeconfig_path))
    async with client:
        await client.create(NAMESPACES, {"metadata": {"name": NS}})
        await install_crds(client)
        yield client


@pytest.fixture
async def heartbeats(kube: Kube, nursery: trio.Nursery) -> HeartbeatDouble:
    """The runtimed heartbeat double, running."""
    double = HeartbeatDouble(kube)
    await nursery.start(double.run)
    return double
