"""A status write must not replace a newer Pod that arrived while the write was in flight.

Regression: the node's PUT response (older) overwrote an informer update carrying the
``kruntimes.io/RuntimedReady`` condition another component had patched, so the readiness gate
looked unmet until the Pod changed again.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import trio

from localkube.node.config import NodeConfig
from localkube.node.podworker import NodeServices, PodWorker


def _pod(rv: int, conditions: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default", "uid": "u1", "resourceVersion": str(rv)},
        "spec": {"containers": [{"name": "c", "image": "localkube/python"}]},
        "status": {"conditions": conditions or []},
    }


class _SlowKube:
    """Answers the status PUT only after the test delivered a newer Pod to the worker."""

    def __init__(self) -> None:
        self.release = trio.Event()
        self.puts = 0

    async def replace(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.puts += 1
        await self.release.wait()
        written = copy.deepcopy(body)
        written["metadata"]["resourceVersion"] = "11"
        return written


async def test_put_response_does_not_hide_a_newer_informer_update(tmp_path: Path) -> None:
    kube = _SlowKube()
    node = NodeServices(
        kube=kube,  # type: ignore[arg-type]
        config=NodeConfig(
            state_dir=tmp_path, apiserver_host="127.0.0.1", apiserver_port=1, ca_pem=""
        ),
        services_in=lambda _ns: [],
        release_ip=lambda _ip: None,
    )
    worker = PodWorker(node, _pod(10), "127.0.9.9")
    gate = {"type": "kruntimes.io/RuntimedReady", "status": "True"}
    async with trio.open_nursery() as nursery:
        nursery.start_soon(worker.write_status)
        await trio.testing.wait_all_tasks_blocked()
        assert kube.puts == 1
        worker.update(_pod(12, [gate]))  # the informer's newer object, while the PUT waits
        kube.release.set()
    assert worker.pod["metadata"]["resourceVersion"] == "12"
    assert gate in worker.pod["status"]["conditions"]
