"""At shutdown the node stops its Pods while the API server still serves (F6, issue 3)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from localkube import cluster
from localkube.cluster import ClusterConfig, serve_cluster


async def test_the_api_server_outlives_the_node_at_shutdown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Pod's last writes at SIGTERM (a control plane releasing its Lease) must reach the
    API server: the node stops first, then the API server, controllers and proxy."""
    answers: list[Any] = []

    async def node_writing_at_shutdown(
        kube: Any, config: Any, *, task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED
    ) -> None:
        task_status.started(object())
        try:
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True), trio.fail_after(10):
                namespace = await kube.get("/api/v1/namespaces/default")
                answers.append(namespace["metadata"]["name"] if namespace else None)

    monkeypatch.setattr(cluster, "serve_node", node_writing_at_shutdown)
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(serve_cluster, ClusterConfig(state_dir=tmp_path / "state"))
            nursery.cancel_scope.cancel()
    assert answers == ["default"]


async def test_a_node_that_fails_to_start_stops_the_services(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken_node(kube: Any, config: Any, *, task_status: Any = None) -> None:
        raise RuntimeError("node cannot start")

    monkeypatch.setattr(cluster, "serve_node", broken_node)
    with trio.fail_after(30), pytest.raises(BaseExceptionGroup) as raised:  # not a hang
        async with trio.open_nursery() as nursery:
            await nursery.start(serve_cluster, ClusterConfig(state_dir=tmp_path / "state"))
    matched, _ = raised.value.split(RuntimeError)
    assert matched is not None
    assert "node cannot start" in repr(matched.exceptions)
