"""Fixtures of the chaos suite: one localkube cluster with kruntimes for the whole session.

Size: the short version by default (``make test``: the short faults at :data:`SHORT` size);
``KRT_CHAOS_FULL=1`` (``make chaos``) runs every scenario at :data:`FULL` size;
``KRT_CHAOS_SHORT=1`` forces the short version.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from .cluster import ChaosCluster, orphan_processes, start_cluster, stop_cluster
from .scenario import FULL, SHORT, Size


def full_size() -> bool:
    """Whether this session runs the full suite."""
    return os.environ.get("KRT_CHAOS_FULL") == "1" and os.environ.get("KRT_CHAOS_SHORT") != "1"


@pytest.fixture(scope="session")
def chaos_size() -> Size:
    """The scenario size of this session."""
    return FULL if full_size() else SHORT


@pytest.fixture(scope="session")
def chaos_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChaosCluster]:
    """The session's cluster; stopped at the end, and no process of it may be left."""
    state: Path = tmp_path_factory.mktemp("chaos") / "dev"
    cluster = start_cluster(state)
    try:
        yield cluster
    finally:
        orphans = orphan_processes(cluster)
        left = stop_cluster(cluster)
        print(f"chaos[cluster] after krt dev down: {len(left)} processes left")
        assert not orphans, f"orphan processes at the end: {orphans}"
        assert not left, f"processes left after krt dev down: {left}"
