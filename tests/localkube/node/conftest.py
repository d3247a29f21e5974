"""Fixtures for the node, controller, proxy and ``krt dev`` tests: a real local cluster."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from localkube.apiserver import ApiServerHandle
from localkube.cluster import ClusterConfig, ClusterHandle, serve_cluster
from localkube.controllers.kubeapi import Kube


@pytest.fixture
async def cluster(tmp_path: Path, nursery: trio.Nursery) -> ClusterHandle:
    """A whole localkube (SQLite under tmp_path) with short back-off and shutdown grace."""
    handle: ClusterHandle = await nursery.start(
        serve_cluster,
        ClusterConfig(state_dir=tmp_path / "state", backoff_initial=0.2, shutdown_grace=1.0),
    )
    return handle


@pytest.fixture
def kube(cluster: ClusterHandle) -> Kube:
    """The admin API client of the cluster fixture."""
    return cluster.kube


@pytest.fixture
def apiserver(cluster: ClusterHandle) -> ApiServerHandle:
    """The cluster's API server, so the shared ``kubectl`` fixture talks to it."""
    return cluster.apiserver
