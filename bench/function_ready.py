"""Function Run create -> Ready latency (issue 7): localkube API server, the real Python
Runtime Server process and runtimed's function lifecycle.

Starts an in-memory localkube API server with the chart's CRDs, one ``krt-python-runtime``
process, and runtimed's :class:`~runtimed.functions.lifecycle.FunctionLifecycle` (real
informer, conditional status writes, finalizer patches, purerpc FunctionRuntime client).
For each of ``--runs`` function Runs it creates the Run and binds it to the Runtime Pod (the
scheduler's bind patch, written by the bench so the number isolates runtimed's part), then
waits for phase Ready, observed through a watch (an informer): no polling load.

Reported (milliseconds, client wall clock):

* bind -> Ready: claim, finalizer, source preparation, digest, RegisterFunction (worker
  start and handler import in the Runtime Server), Ready write, watch delivery;
* create -> Ready: plus the create and bind requests.

With ``--cluster`` it uses the full localkube cluster instead (control plane scheduler,
Runtime Pods with real runtimed sidecars); then "bind" is the create.

Target (issue 7): create -> Ready p50 under 200 ms.

Usage: ``.venv/bin/python bench/function_ready.py [--runs 20] [--concurrency 1] [--json]``
``--quick`` is a short run; ``--report-json PATH`` writes the figures for bench/report.py.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.append(str(ROOT / "tests" / "runtimed"))

import trio  # noqa: E402
import yaml  # noqa: E402
from runtimed_servers import runtime_server  # noqa: E402

from krt.api import Run, bind_patch  # noqa: E402
from krt.api.patches import apply_merge_patch  # noqa: E402
from krt.kube.client import Kube, connect  # noqa: E402
from krt.kube.clock import SystemClock  # noqa: E402
from krt.kube.errors import NotFound  # noqa: E402
from krt.kube.informer import Informer, InformerEvent  # noqa: E402
from krt.kube.resources import NAMESPACES, PODS, RUNS, RUNTIMES, ResourceRef  # noqa: E402
from localkube.apiserver import ApiServerConfig, running_apiserver  # noqa: E402
from runtimed.functions.client import FunctionRuntimeClient  # noqa: E402
from runtimed.functions.finalizers import KubeFinalizers  # noqa: E402
from runtimed.functions.lifecycle import FunctionLifecycle  # noqa: E402
from runtimed.functions.settings import FunctionSettings  # noqa: E402
from runtimed.identity import PodIdentity  # noqa: E402
from runtimed.sources import Workspace  # noqa: E402
from runtimed.tasks import KubeStatusWriter  # noqa: E402

NS = "bench"
CRDS = ResourceRef(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", False, "CustomResourceDefinition"
)
CRD_DIR = ROOT / "charts" / "kruntimes" / "crds"
HANDLER = "def invoke(request):\n    return {'echo': request}\n"


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


def function_run(name: str, runtime: str = "python") -> dict[str, Any]:
    return {
        "apiVersion": "kruntimes.io/v1alpha1",
        "kind": "Run",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "runtime": runtime,
            "source": {"inline": HANDLER},
            "mode": {"function": {"handler": "main.invoke", "idleTimeoutSeconds": 600}},
        },
    }


class ReadyWatch:
    """Informer handler: the wall-clock time each Run name was first seen Ready/terminal."""

    def __init__(self) -> None:
        self.seen: dict[str, tuple[float, str]] = {}
        self.events: dict[str, trio.Event] = {}

    def event(self, name: str) -> trio.Event:
        return self.events.setdefault(name, trio.Event())

    def __call__(self, event: InformerEvent) -> None:
        name = event.obj["metadata"]["name"]
        phase = (event.obj.get("status") or {}).get("phase")
        if phase in ("Ready", "Failed", "Timeout", "Cancelled") and name not in self.seen:
            self.seen[name] = (time.time(), str(phase))
            self.event(name).set()


async def bench_lifecycle(runs: int, concurrency: int) -> dict[str, Any]:
    async with running_apiserver(ApiServerConfig(bookmark_interval=1.0)) as handle:
        kube = await connect(kubeconfig=handle.kubeconfig_path)
        async with kube:
            await kube.create(NAMESPACES, {"metadata": {"name": NS}})
            for path in sorted(CRD_DIR.glob("*.yaml")):
                await kube.create(CRDS, yaml.safe_load(path.read_text()))
            with trio.fail_after(10):
                while True:
                    try:
                        await kube.list(RUNS, NS)
                        break
                    except NotFound:
                        await trio.sleep(0.05)
            pod = await kube.create(
                PODS,
                {
                    "metadata": {"name": "runtime-python-bench", "namespace": NS},
                    "spec": {
                        "containers": [{"name": "runtime", "image": "kruntimes/python-runtime"}]
                    },
                },
            )
            with tempfile.TemporaryDirectory(prefix="krt-fn-bench-") as tmp:
                workspace = Path(tmp) / "ws"
                async with runtime_server("python", workspace) as (port, _process):
                    return await _measure(kube, pod, workspace, port, runs, concurrency)


async def _measure(
    kube: Kube, pod: dict[str, Any], workspace: Path, port: int, runs: int, concurrency: int
) -> dict[str, Any]:
    watch = ReadyWatch()
    creates: dict[str, float] = {}
    binds: dict[str, float] = {}
    async with trio.open_nursery() as nursery:
        client = FunctionRuntimeClient("127.0.0.1", port)
        await nursery.start(client.run)
        informer = Informer(kube, RUNS, namespace=NS)
        life = FunctionLifecycle(
            pod=PodIdentity(name=pod["metadata"]["name"], namespace=NS, uid=pod["metadata"]["uid"]),
            cache=informer,
            writer=KubeStatusWriter(kube),
            finalizers=KubeFinalizers(kube),
            server=client,
            workspace=Workspace(workspace),
            clock=SystemClock(),
            settings=FunctionSettings(),
        )
        informer.add_handler(life.on_run_event)
        informer.add_handler(watch)
        await nursery.start(informer.run)
        await nursery.start(life.run)
        limiter = trio.CapacityLimiter(concurrency)

        async def one(name: str) -> None:
            async with limiter:
                creates[name] = time.time()
                obj = await kube.create(RUNS, function_run(name))
                patch = bind_patch(
                    Run.from_dict(obj),
                    pod_name=pod["metadata"]["name"],
                    pod_uid=pod["metadata"]["uid"],
                    now=datetime.now(UTC),
                )
                obj["status"] = apply_merge_patch(obj.get("status"), patch)
                binds[name] = time.time()
                await kube.replace_status(RUNS, obj)
                with trio.fail_after(60):
                    await watch.event(name).wait()

        names = [f"fn-{i:04d}" for i in range(runs)]
        async with trio.open_nursery() as workers:
            for name in names:
                workers.start_soon(one, name)
        nursery.cancel_scope.cancel()
    return _summary(names, creates, binds, watch)


def _summary(
    names: list[str], creates: dict[str, float], binds: dict[str, float], watch: ReadyWatch
) -> dict[str, Any]:
    ready = [n for n in names if watch.seen[n][1] == "Ready"]
    create_ms = [(watch.seen[n][0] - creates[n]) * 1000 for n in ready]
    bind_ms = [(watch.seen[n][0] - binds[n]) * 1000 for n in ready]
    return {
        "runs": len(names),
        "ready": len(ready),
        "not_ready": {n: watch.seen[n][1] for n in names if n not in ready},
        "create_to_ready_ms": {
            "p50": round(statistics.median(create_ms), 1) if create_ms else None,
            "p95": round(percentile(create_ms, 0.95), 1) if create_ms else None,
            "max": round(max(create_ms), 1) if create_ms else None,
        },
        "bind_to_ready_ms": {
            "p50": round(statistics.median(bind_ms), 1) if bind_ms else None,
            "p95": round(percentile(bind_ms, 0.95), 1) if bind_ms else None,
        },
        "target_p50_ms": 200,
    }


async def bench_cluster(runs: int, concurrency: int) -> dict[str, Any]:
    from runtimed_cluster import running_cluster, runtime_manifest, wait_runtime_ready

    with tempfile.TemporaryDirectory(prefix="krt-fn-bench-") as tmp:
        async with running_cluster(Path(tmp) / "state") as cluster:
            kube = cluster.kube
            await kube.create(RUNTIMES, runtime_manifest("python", kind="python", runs=runs))
            await wait_runtime_ready(kube, "python", 1)
            watch = ReadyWatch()
            creates: dict[str, float] = {}
            async with trio.open_nursery() as nursery:
                informer = Informer(kube, RUNS, namespace="demo")
                informer.add_handler(watch)
                await nursery.start(informer.run)
                limiter = trio.CapacityLimiter(concurrency)

                async def one(name: str) -> None:
                    async with limiter:
                        creates[name] = time.time()
                        manifest = function_run(name)
                        manifest["metadata"]["namespace"] = "demo"
                        await kube.create(RUNS, manifest)
                        with trio.fail_after(60):
                            await watch.event(name).wait()

                names = [f"fn-{i:04d}" for i in range(runs)]
                async with trio.open_nursery() as workers:
                    for name in names:
                        workers.start_soon(one, name)
                nursery.cancel_scope.cancel()
            return _summary(names, creates, creates, watch)


def _figures(result: dict[str, Any], *, cluster: bool) -> list[dict[str, Any]]:
    """The figures for bench/report.py (its ``--report-json`` record format)."""
    c, b = result["create_to_ready_ms"], result["bind_to_ready_ms"]
    shape = f"{result['ready']}/{result['runs']} Ready" + (", full cluster" if cluster else "")
    figures: list[dict[str, Any]] = [
        {"figure": f"function Run create -> Ready p50 ({shape})", "value": c["p50"],
         "unit": "ms", "target": result["target_p50_ms"], "target_op": "<"},
        {"figure": "function Run create -> Ready p95", "value": c["p95"], "unit": "ms"},
    ]  # fmt: skip
    if not cluster:
        figures.append(
            {"figure": "function Run bind -> Ready p50", "value": b["p50"], "unit": "ms"}
        )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--cluster", action="store_true", help="full localkube cluster")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true", help="short run: 5 Runs")
    parser.add_argument("--report-json", metavar="PATH", help="write figures for bench/report.py")
    args = parser.parse_args()
    if args.quick:  # quick defaults; explicit arguments still win
        parser.set_defaults(runs=5)
        args = parser.parse_args()
    if args.runs < 1 or args.concurrency < 1:
        parser.error("--runs and --concurrency must be >= 1")
    bench = bench_cluster if args.cluster else bench_lifecycle
    result = trio.run(bench, args.runs, args.concurrency)
    if args.report_json:
        Path(args.report_json).write_text(json.dumps(_figures(result, cluster=args.cluster)))
    if args.json:
        print(json.dumps(result))
        return
    c = result["create_to_ready_ms"]
    b = result["bind_to_ready_ms"]
    print(f"function Runs: {result['runs']} created, {result['ready']} Ready")
    print(
        f"create -> Ready: p50 {c['p50']} ms  p95 {c['p95']} ms  max {c['max']} ms (target p50 < 200 ms)"
    )
    print(f"bind   -> Ready: p50 {b['p50']} ms  p95 {b['p95']} ms")
    if result["not_ready"]:
        print(f"not Ready: {result['not_ready']}")


if __name__ == "__main__":
    main()
