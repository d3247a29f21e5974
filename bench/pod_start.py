"""Benchmark: Pod start latency on localkube (create -> Ready) for a trivial Python process.

Starts a whole cluster in this process (API server on SQLite in a temporary state
directory, controllers, node, proxy), then creates Pods one after another, each running
``python -c 'import time; time.sleep(600)'`` (image ``localkube/python``, no probes), and
measures from the POST until a watch reports the Pod's ``Ready`` condition True. Also
times a Deployment of N replicas from POST to ``readyReplicas == N``.

Usage: ``.venv/bin/python bench/pod_start.py [--pods 10] [--replicas 5]``
``--quick`` is a short run; ``--report-json PATH`` writes the figures for bench/report.py.
Target (issue 4): under 1 s per Pod on a 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

from localkube.cluster import ClusterConfig, ClusterHandle, serve_cluster
from localkube.controllers.kubeapi import Kube

PODS = "/api/v1/namespaces/default/pods"
CONTAINER = {
    "name": "main",
    "image": "localkube/python",
    "args": ["-c", "import time; time.sleep(600)"],
}


def is_ready(pod: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions", [])
    )


async def time_pod(kube: Kube, name: str) -> float:
    listed = await kube.list(PODS)
    rv = listed["metadata"]["resourceVersion"]
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [CONTAINER]},
    }
    start = time.perf_counter()
    await kube.create(PODS, body)
    async for event in kube.watch(
        PODS, resource_version=rv, params={"fieldSelector": f"metadata.name={name}"}
    ):
        if is_ready(event.get("object") or {}):
            return time.perf_counter() - start
    raise RuntimeError("watch ended before the Pod became ready")


async def time_deployment(kube: Kube, replicas: int) -> float:
    path = "/apis/apps/v1/namespaces/default/deployments"
    body = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "bench"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "bench"}},
            "template": {
                "metadata": {"labels": {"app": "bench"}},
                "spec": {"containers": [CONTAINER]},
            },
        },
    }
    start = time.perf_counter()
    await kube.create(path, body)
    while True:
        d = await kube.get(f"{path}/bench")
        if ((d or {}).get("status") or {}).get("readyReplicas") == replicas:
            return time.perf_counter() - start
        await trio.sleep(0.01)


async def main(pods: int, replicas: int, report_json: str | None = None) -> None:
    with tempfile.TemporaryDirectory(prefix="localkube-bench-") as tmp:
        async with trio.open_nursery() as nursery:
            t0 = time.perf_counter()
            handle: ClusterHandle = await nursery.start(
                serve_cluster, ClusterConfig(state_dir=Path(tmp), shutdown_grace=1.0)
            )
            print(f"cluster start: {time.perf_counter() - t0:.3f} s")
            samples = []
            for i in range(pods):
                with trio.fail_after(30):
                    samples.append(await time_pod(handle.kube, f"bench-{i}"))
            samples.sort()
            print(
                f"pod start (create -> Ready), {pods} pods: "
                f"median {statistics.median(samples) * 1000:.0f} ms, "
                f"min {samples[0] * 1000:.0f} ms, max {samples[-1] * 1000:.0f} ms"
            )
            if replicas:
                with trio.fail_after(60):
                    took = await time_deployment(handle.kube, replicas)
                print(
                    f"deployment of {replicas} replicas (create -> all Ready): {took * 1000:.0f} ms"
                )
            verdict = "OK" if samples[-1] < 1.0 else "SLOWER THAN 1 s"
            print(f"target: every Pod Ready within 1 s: {verdict}")
            if report_json:
                figures = [
                    {"figure": f"Pod start median ({pods} Pods)", "unit": "ms",
                     "value": round(statistics.median(samples) * 1000, 1)},
                    {"figure": f"Pod start max ({pods} Pods)", "unit": "ms",
                     "value": round(samples[-1] * 1000, 1), "target": 1000, "target_op": "<"},
                ]  # fmt: skip
                if replicas:
                    figures.append(
                        {"figure": f"Deployment of {replicas} replicas -> all Ready",
                         "unit": "ms", "value": round(took * 1000, 1)}
                    )  # fmt: skip
                await trio.Path(report_json).write_text(json.dumps(figures))
            nursery.cancel_scope.cancel()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=10)
    parser.add_argument("--replicas", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="short run: 3 Pods, 2 replicas")
    parser.add_argument("--report-json", metavar="PATH", help="write figures for bench/report.py")
    args = parser.parse_args()
    if args.quick:  # quick defaults; explicit arguments still win
        parser.set_defaults(pods=3, replicas=2)
        args = parser.parse_args()
    trio.run(main, args.pods, args.replicas, args.report_json)
