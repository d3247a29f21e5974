"""Scheduler benchmark on localkube: Pending -> Scheduled latency and binds per second.

Starts an in-process localkube (state in a temporary directory), installs the CRDs, creates
a Runtime with enough capacity for every Run (``--pods`` x ``--runs-per-pod``), starts the
control plane and the runtimed heartbeat double (tests/controlplane/harness.py), creates
``--runs`` Runs at once and prints, from one watch on Runs:

* Pending -> Scheduled latency per Run: the watch's arrival time of the Run's first event
  (ADDED, Pending) to the arrival of its Scheduled event (p50, p95, max);
* binds/s: Runs bound divided by the time from the first Run seen to the last bind.

Usage: ``.venv/bin/python bench/schedule.py [--runs 200] [--pods 2] [--runs-per-pod 100]``.
``--quick`` is a short run; ``--report-json PATH`` writes the figures for bench/report.py.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parents[1]
sys.path.append(str(ROOT))  # for tests.controlplane.harness

from krt.kube.client import connect  # noqa: E402
from krt.kube.informer import EventType, Informer, InformerEvent  # noqa: E402
from krt.kube.resources import NAMESPACES, RUNS, RUNTIMES  # noqa: E402
from localkube.cluster import ClusterConfig, serve_cluster  # noqa: E402
from tests.controlplane.harness import (  # noqa: E402
    NS,
    HeartbeatDouble,
    install_crds,
    run_manifest,
    running_controlplane,
    runtime_manifest,
    wait_for,
    write_image_table,
)


def percentile(values: list[float], fraction: float) -> float:
    """The ``fraction`` quantile (nearest rank) of ``values``."""
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))
    return ordered[index]


async def bench(runs: int, pods: int, runs_per_pod: int, report_json: str | None = None) -> None:
    """Run the benchmark and print its numbers."""
    with tempfile.TemporaryDirectory() as state:
        async with trio.open_nursery() as nursery:
            cluster = await nursery.start(
                serve_cluster,
                ClusterConfig(
                    state_dir=Path(state) / "s",
                    images_file=write_image_table(Path(state)),
                    backoff_initial=0.2,
                    shutdown_grace=1.0,
                ),
            )
            kube = await connect(kubeconfig=Path(cluster.apiserver.kubeconfig_path))
            await kube.create(NAMESPACES, {"metadata": {"name": NS}})
            await install_crds(kube)
            await nursery.start(HeartbeatDouble(kube).run)
            seen: dict[str, float] = {}
            bound: dict[str, float] = {}

            def on_run(event: InformerEvent) -> None:
                name = str(event.obj["metadata"]["name"])
                now = trio.current_time()
                seen.setdefault(name, now)
                phase = (event.obj.get("status") or {}).get("phase")
                if event.type is not EventType.DELETED and phase == "Scheduled":
                    bound.setdefault(name, now)

            watch = Informer(kube, RUNS, namespace=NS)
            watch.add_handler(on_run)
            await nursery.start(watch.run)
            await kube.create(RUNTIMES, runtime_manifest(replicas=pods, runs=runs_per_pod))
            async with running_controlplane(kube) as plane:

                async def pool_ready() -> bool:
                    runtime = await kube.get(RUNTIMES, "python", NS)
                    return (runtime.get("status") or {}).get("readyReplicas") == pods

                await wait_for(pool_ready, seconds=60)
                limiter = trio.CapacityLimiter(16)

                async def create(index: int) -> None:
                    async with limiter:
                        await kube.create(RUNS, run_manifest(f"bench-{index:04d}"))

                async with trio.open_nursery() as creators:
                    for index in range(runs):
                        creators.start_soon(create, index)
                await wait_for(lambda: len(bound) >= runs, seconds=300)
                latencies = [bound[name] - seen[name] for name in bound]
                span = max(bound.values()) - min(seen.values())
                print(f"runs: {runs} on {pods} Pods x {runs_per_pod}")
                print(
                    "Pending -> Scheduled: "
                    f"p50 {statistics.median(latencies) * 1000:.1f} ms, "
                    f"p95 {percentile(latencies, 0.95) * 1000:.1f} ms, "
                    f"max {max(latencies) * 1000:.1f} ms"
                )
                print(f"binds/s: {len(bound) / span:.1f} ({len(bound)} binds in {span:.2f} s)")
                print(f"bind conflicts: {plane.metrics.bind_conflicts._value.get():.0f}")  # noqa: SLF001
                unschedulable = {
                    sample.labels["reason"]: int(sample.value)
                    for metric in plane.metrics.unschedulable.collect()
                    for sample in metric.samples
                    if sample.name.endswith("_total")
                }
                print(f"decisions to stay Pending, by reason: {unschedulable or 'none'}")
                if report_json:
                    figures = [
                        {"figure": f"Pending -> Scheduled {name} ({runs} Runs, {pods} Pods)",
                         "value": round(value * 1000, 1), "unit": "ms"}
                        for name, value in (
                            ("p50", statistics.median(latencies)),
                            ("p95", percentile(latencies, 0.95)),
                            ("max", max(latencies)),
                        )
                    ]  # fmt: skip
                    figures.append(
                        {
                            "figure": "binds/s",
                            "value": round(len(bound) / span, 1),
                            "unit": "binds/s",
                        }
                    )
                    await trio.Path(report_json).write_text(json.dumps(figures))
            await kube.aclose()
            nursery.cancel_scope.cancel()


def main() -> None:
    """Parse arguments and run :func:`bench`."""
    logging.getLogger("localkube").setLevel(logging.ERROR)  # quiet Pod shutdown at the end
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--pods", type=int, default=2)
    parser.add_argument("--runs-per-pod", type=int, default=100)
    parser.add_argument("--quick", action="store_true", help="short run: 20 Runs on 2 Pods x 10")
    parser.add_argument("--report-json", metavar="PATH", help="write figures for bench/report.py")
    args = parser.parse_args()
    if args.quick:  # quick defaults; explicit arguments still win
        parser.set_defaults(runs=20, runs_per_pod=10)
        args = parser.parse_args()
    if args.pods * args.runs_per_pod < args.runs:
        parser.error("--pods x --runs-per-pod must hold every Run")
    trio.run(bench, args.runs, args.pods, args.runs_per_pod, args.report_json)


if __name__ == "__main__":
    main()
