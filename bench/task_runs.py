"""Task Run benchmark on localkube: real control plane, real runtimed, real Bash Runtime Servers.

Starts an in-process localkube (state in a temporary directory) with the CRDs, runs the
control plane as its own ``krt-controlplane`` process (as in production; or in-process with
``--inprocess-controlplane``), creates a Runtime of ``--pods`` Pods x ``--capacity`` runs whose Runtime Server
is ``kruntimes/bash-runtime`` (runtimed is the injected sidecar, a real process per Pod),
waits until every Pod is Ready, then creates ``--runs`` trivial task Runs (``exit 0``) with
at most ``--concurrency`` creates in flight, and waits until all are terminal.

Completion is observed with a watch (an informer) of terminal Runs only (the field selector
``krt.api.phases.TERMINAL_RUNS_SELECTOR`` on the Run CRD's selectable ``status.phase``), so the
benchmark adds no polling load to the in-process API server, and the API server sends it one
event per Run rather than one per write. Latencies come from status timestamps (microsecond RFC 3339, written by the scheduler and
runtimed) and from the client's wall clock just before each create (``creationTimestamp``
has whole-second precision, too coarse for these numbers):

* schedule: create -> ``Scheduled`` condition ``lastTransitionTime`` (scheduler bind);
* dispatch: bind -> ``startTime`` (runtimed claimed the Run);
* execution: ``startTime`` -> ``completionTime`` (prepare, Execute, run, observe, write);
* complete: create -> ``completionTime``;
* Runs/s: runs / (last ``completionTime`` - first create).

It then prints where the time goes: a per-stage breakdown (p50/p95) from the client's create
time, the ``Scheduled`` condition, and runtimed's own
timeline of each Run (``stages_ms`` on its terminal log line, read back from the container
logs: informer delivery ``seen``, claim write, source preparation, Status NOT_FOUND and the
start worker, Execute, the first sighting of the finished execution, the terminal write; see
``runtimed.timeline``), and the CPU milliseconds per Run that each process of the cluster
used during the burst (``/proc``; ``localkube+bench`` is this process: API server, node and
client together), and how many Runtime Server calls (Status, Execute, List, Forget, ...) each
runtimed's task lifecycle made per Run (its ``/metrics``). Every client (this one included) keeps its idle connections alive
(``krt.kube.client``), and this one opens ``--concurrency`` connections, plus one for its own
informer's watch, before the burst, so its creates pay no TLS handshake at the API server.

Targets (issue 6): complete p50 under 150 ms and over 40 Runs/s on this machine (published
Go kruntimes figure on kind: p50 580 ms, 11.3 Runs/s).

Usage: ``.venv/bin/python bench/task_runs.py [--runs 50] [--pods 2] [--capacity 64]
[--concurrency 25] [--json]``
``--repeat N`` runs N bursts, each on a fresh cluster, and reports the one whose complete p50
is the median (with every burst's p50): the host's speed varies from burst to burst, so one
burst says little about a target. ``--quick`` is a short run; ``--sequential`` creates each Run only once the previous one has
ended (with ``--concurrency 1``: the latency of one Run on an idle, warm cluster, without the
first Run's one-off costs); ``--report-json PATH`` writes the figures for bench/report.py;
``--mark-burst PATH`` writes the burst's start time for an external profiler.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.append(str(ROOT / "tests" / "runtimed"))

import httpx  # noqa: E402
import trio  # noqa: E402
from runtimed_cluster import (  # noqa: E402
    NS,
    running_cluster,
    runtime_manifest,
    task_run,
    wait_runtime_ready,
)

from krt.api.naming import RUNTIMED_HTTP_PORT  # noqa: E402
from krt.api.phases import TERMINAL_RUNS_SELECTOR  # noqa: E402
from krt.api.times import parse_time  # noqa: E402
from krt.gc_tuning import freeze_startup_heap  # noqa: E402
from krt.kube.informer import Informer, InformerEvent  # noqa: E402
from krt.kube.resources import RUNS, RUNTIMES  # noqa: E402

TERMINAL = {"Succeeded", "Failed", "Timeout", "Cancelled"}


def percentile(values: list[float], fraction: float) -> float:
    """The ``fraction`` quantile (nearest rank) of ``values``."""
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))
    return ordered[index]


async def warm_client_pool(kube: Any, connections: int) -> None:
    """Open ``connections`` keep-alive connections of the benchmark's own client first.

    The creates then reuse them instead of paying TLS handshakes at the API server during the
    burst (a long-running client, like kruntimes' Go benchmark on client-go's one multiplexed
    HTTP/2 connection, has none to pay).
    """
    async with trio.open_nursery() as nursery:
        for _ in range(connections):
            nursery.start_soon(kube.get, RUNTIMES, "bash", NS)


def _scheduled_at(status: dict[str, Any]) -> datetime:
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Scheduled" and condition.get("status") == "True":
            return parse_time(condition["lastTransitionTime"])
    raise ValueError("no Scheduled=True condition")


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="krt-bench-") as tmp:
        async with running_cluster(
            Path(tmp) / "state", controlplane_process=not args.inprocess_controlplane
        ) as cluster:
            kube = cluster.kube
            freeze_startup_heap()  # as `localkube apiserver` and `krt dev up` do once serving
            await kube.create(
                RUNTIMES,
                runtime_manifest("bash", kind="bash", replicas=args.pods, runs=args.capacity),
            )
            pods = await wait_runtime_ready(kube, "bash", args.pods, within=120)
            await trio.sleep(1.0)  # let heartbeats and the scheduler's caches settle
            # one more for the informer's watch, which holds a connection for the whole burst
            await warm_client_pool(kube, args.concurrency + 1)
            calls_before = await server_calls(pods)
            cpu_before = cpu_by_program()
            if args.mark_burst:  # for external profilers: the burst starts now
                await trio.Path(args.mark_burst).write_text(str(datetime.now(UTC).timestamp()))
            created: dict[str, datetime] = {}
            finished: dict[str, dict[str, Any]] = {}
            all_done = trio.Event()
            run_ended: dict[str, trio.Event] = {}  # --sequential: each create waits for its end
            # terminal Runs only: the API server sends this client one event per Run
            informer = Informer(kube, RUNS, namespace=NS, field_selector=TERMINAL_RUNS_SELECTOR)

            def on_run(event: InformerEvent) -> None:
                status = event.obj.get("status") or {}
                name = event.obj["metadata"]["name"]
                if status.get("phase") in TERMINAL:
                    finished[event.obj["metadata"]["name"]] = event.obj
                    ended = run_ended.get(name)
                    if ended is not None:
                        ended.set()
                    if len(finished) >= args.runs:
                        all_done.set()

            informer.add_handler(on_run)
            limiter = trio.CapacityLimiter(args.concurrency)

            async def create(index: int) -> None:
                async with limiter:
                    name = f"bench-{index:04d}"
                    run_ended[name] = trio.Event()
                    created[name] = datetime.now(UTC)
                    await kube.create(RUNS, task_run(name, "bash", "exit 0\n"))
                    if args.sequential:
                        await run_ended[name].wait()

            async with trio.open_nursery() as nursery:
                await nursery.start(informer.run)
                async with trio.open_nursery() as creators:
                    for index in range(args.runs):
                        creators.start_soon(create, index)
                with trio.fail_after(300):
                    await all_done.wait()
                nursery.cancel_scope.cancel()
            cpu_after = cpu_by_program()
            calls_after = await server_calls(pods)
            items = list(finished.values())
            # runtimed's per-Run stage timelines, read before the state directory goes (the
            # node writes container logs a moment after runtimed prints them)
            timelines: dict[str, dict[str, Any]] = {}
            with trio.move_on_after(3):
                while len(timelines := read_timelines(cluster.pod_roots())) < len(items):  # noqa: ASYNC110 - files another process writes
                    await trio.sleep(0.1)
    phases: dict[str, int] = {}
    schedule, dispatch, execution, complete = [], [], [], []
    completions = []
    for run in items:
        status = run["status"]
        phases[status["phase"]] = phases.get(status["phase"], 0) + 1
        created_at = created[run["metadata"]["name"]]
        bound = _scheduled_at(status)
        started = parse_time(status["startTime"])
        finished = parse_time(status["completionTime"])
        completions.append(finished)
        schedule.append((bound - created_at).total_seconds() * 1000)
        dispatch.append((started - bound).total_seconds() * 1000)
        execution.append((finished - started).total_seconds() * 1000)
        complete.append((finished - created_at).total_seconds() * 1000)
    span = (max(completions) - min(created.values())).total_seconds()
    stages: dict[str, list[float]] = {}
    for run in items:
        uid = run["metadata"]["uid"]
        created_at = created[run["metadata"]["name"]]
        bound = _scheduled_at(run["status"])
        marks = timelines.get(uid, {})
        row = {"create->bind": (bound - created_at).total_seconds() * 1000}
        if "seen" in marks:
            row["bind->seen"] = (marks["seen"] - bound.timestamp()) * 1000
        for key, value in marks.get("stages_ms", {}).items():
            row[key] = value
        for key, value in row.items():
            stages.setdefault(key, []).append(value)

    def summary(values: list[float]) -> dict[str, float]:
        return {
            "p50_ms": round(statistics.median(values), 1),
            "p95_ms": round(percentile(values, 0.95), 1),
        }

    return {
        "runs": args.runs,
        "pods": args.pods,
        "capacity": args.capacity,
        "concurrency": args.concurrency,
        "phases": phases,
        "schedule": summary(schedule),
        "dispatch": summary(dispatch),
        "execution": summary(execution),
        "complete": summary(complete),
        "runs_per_second": round(args.runs / span, 1),
        "cpu_ms_per_run": {
            program: round(
                (cpu_after[program] - cpu_before.get(program, 0.0)) * 1000 / args.runs, 1
            )
            for program in sorted(cpu_after)
        },
        "stages": {key: summary(values) | {"n": len(values)} for key, values in stages.items()},
        "server_calls_per_run": {
            method: round((count - calls_before.get(method, 0.0)) / args.runs, 2)
            for method, count in sorted(calls_after.items())
        },
    }


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
SERVER_CALLS_METRIC = "runtimed_task_server_calls_total"


async def server_calls(pods: list[dict[str, Any]]) -> dict[str, float]:
    """Runtime Server calls of the task lifecycles so far, by method, summed over ``pods``.

    Read from each runtimed's ``/metrics`` (``runtimed_task_server_calls_total``); a Pod
    that does not answer counts nothing.
    """
    totals: dict[str, float] = {}
    async with httpx.AsyncClient(timeout=5.0) as client:
        for pod in pods:
            address = (pod.get("status") or {}).get("podIP")
            try:
                response = await client.get(f"http://{address}:{RUNTIMED_HTTP_PORT}/metrics")
            except httpx.HTTPError:
                continue
            for line in response.text.splitlines():
                if line.startswith(SERVER_CALLS_METRIC + "{"):
                    labels, _, value = line.rpartition(" ")
                    method = labels.split('method="', 1)[1].split('"', 1)[0]
                    totals[method] = totals.get(method, 0.0) + float(value)
    return totals


def cpu_by_program() -> dict[str, float]:
    """CPU seconds (user + system) used so far by this process and its descendants, by program.

    The program is the basename of the first argument that is not the interpreter (so the
    console scripts ``krt-runtimed``, ``krt-bash-runtime``, ``krt-controlplane`` are told
    apart); this process counts as ``localkube+bench`` (the API server, the node and this
    client share it). Reads ``/proc`` (Linux).
    """
    children: dict[int, list[int]] = {}
    ticks: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        children.setdefault(int(fields[1]), []).append(int(entry))
        ticks[int(entry)] = int(fields[11]) + int(fields[12])
    me = os.getpid()
    out: dict[str, float] = {"localkube+bench": ticks.get(me, 0) / CLOCK_TICKS}
    stack = list(children.get(me, []))
    while stack:
        pid = stack.pop()
        stack.extend(children.get(pid, []))
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        words = [a.decode(errors="replace") for a in argv if a]
        program = next((Path(w).name for w in words[1:] if not w.startswith("-")), "?")
        if words and "python" not in Path(words[0]).name:
            program = Path(words[0]).name
        out[program] = out.get(program, 0.0) + ticks.get(pid, 0) / CLOCK_TICKS
    return out


def read_timelines(pod_roots: list[Path]) -> dict[str, dict[str, Any]]:
    """Run UID -> ``{"seen": epoch seconds, "stages_ms": {...}}`` from runtimed's logs.

    runtimed's terminal line of each Run (``task succeeded`` / ``failed`` / ``ended``)
    carries ``stages_ms`` and ``seen_at`` (``runtimed.timeline``); the container logs are CRI lines (``<time> <stream> <F|P> <json>``) under each Pod root.
    ``seen`` puts the informer delivery on the status timestamps' clock (bind -> seen).
    """
    out: dict[str, dict[str, Any]] = {}
    for root in pod_roots:
        for path in sorted((root / "logs" / "runtimed").glob("*.log")):
            for line in path.read_text(errors="replace").splitlines():
                if '"stages_ms"' not in line:
                    continue
                try:
                    record = json.loads(line.split(" ", 3)[3])
                except (IndexError, ValueError):
                    continue
                entry: dict[str, Any] = {"stages_ms": record.get("stages_ms") or {}}
                if "seen_at" in record:
                    entry["seen"] = float(record["seen_at"])
                out[str(record.get("run_uid"))] = entry
    return out


def median_burst(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The burst whose complete p50 is the median (the lower one for an even count), with
    ``repeats``: every burst's complete p50 (ms), in order."""
    ranked = sorted(results, key=lambda r: r["complete"]["p50_ms"])
    chosen = dict(ranked[(len(ranked) - 1) // 2])
    chosen["repeats"] = [r["complete"]["p50_ms"] for r in results]
    return chosen


def _figures(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The figures for bench/report.py (its ``--report-json`` record format)."""
    shape = f"{result['runs']} Runs, {result['pods']} Pods"
    repeats = result.get("repeats") or []
    if len(repeats) > 1:
        shape += f"; median of {len(repeats)} bursts"
    go = "Go kruntimes on kind, published, other machine: "
    figures: list[dict[str, Any]] = [
        {"figure": f"task Run {field} p50 ({shape})", "value": result[field]["p50_ms"],
         "unit": "ms"}
        for field in ("schedule", "dispatch", "execution")
    ]  # fmt: skip
    figures += [
        {"figure": f"task Run create -> complete p50 ({shape})",
         "value": result["complete"]["p50_ms"], "unit": "ms", "target": 150, "target_op": "<",
         "note": (f"bursts: {', '.join(f'{p:.0f}' for p in repeats)} ms; " if len(repeats) > 1
                  else "") + go + "580 ms"},
        {"figure": "task Run create -> complete p95", "value": result["complete"]["p95_ms"],
         "unit": "ms"},
        {"figure": "task Runs/s", "value": result["runs_per_second"], "unit": "Runs/s",
         "target": 40, "target_op": ">", "note": go + "11.3 Runs/s"},
    ]  # fmt: skip
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--pods", type=int, default=2)
    parser.add_argument("--capacity", type=int, default=64)
    parser.add_argument("--concurrency", type=int, default=25)
    parser.add_argument(
        "--inprocess-controlplane",
        action="store_true",
        help="run the control plane inside the benchmark process (default: its own process)",
    )
    parser.add_argument(
        "--sequential",
        action="store_true",
        help="create each Run only once the one before has ended (warm, idle per-Run latency)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        metavar="N",
        help="run N bursts (a fresh cluster each) and report the median one",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="short run: 10 Runs, capacity 16")
    parser.add_argument("--report-json", metavar="PATH", help="write figures for bench/report.py")
    parser.add_argument(
        "--mark-burst", metavar="PATH", help="write the burst's start (epoch seconds) here"
    )
    args = parser.parse_args()
    if args.quick:  # quick defaults; explicit arguments still win
        parser.set_defaults(runs=10, capacity=16, concurrency=5)
        args = parser.parse_args()
    if args.repeat < 1:
        parser.error(f"--repeat must be at least 1, got {args.repeat}")
    result = median_burst([trio.run(bench, args) for _ in range(args.repeat)])
    if args.report_json:
        Path(args.report_json).write_text(json.dumps(_figures(result)))
    if args.json:
        print(json.dumps(result))
        return
    print(
        f"{result['runs']} task Runs on {result['pods']} Runtime Pods x capacity "
        f"{result['capacity']}, {result['concurrency']} concurrent creates: {result['phases']}"
    )
    for field in ("schedule", "dispatch", "execution", "complete"):
        print(
            f"  {field:<10} p50 {result[field]['p50_ms']:>8.1f} ms   p95 {result[field]['p95_ms']:>8.1f} ms"
        )
    print(f"  throughput {result['runs_per_second']:.1f} Runs/s")
    if len(result["repeats"]) > 1:
        bursts = ", ".join(f"{p:.1f}" for p in result["repeats"])
        print(f"  median of {len(result['repeats'])} bursts; complete p50 of each: {bursts} ms")
    cpu = ", ".join(f"{k} {v:.1f}" for k, v in result["cpu_ms_per_run"].items())
    print(f"  CPU ms per Run during the burst: {cpu}")
    calls = ", ".join(f"{k} {v:.2f}" for k, v in result["server_calls_per_run"].items())
    print(f"  Runtime Server calls per Run (runtimed task lifecycle): {calls}")
    print(
        "  per-stage breakdown (create->bind from the client, the rest from runtimed's timeline):"
    )
    for key, value in result["stages"].items():
        print(
            f"    {key:<20} p50 {value['p50_ms']:>8.1f} ms   p95 {value['p95_ms']:>8.1f} ms"
            f"   (n={value['n']})"
        )
    print(
        "  targets: complete p50 < 150 ms, > 40 Runs/s (Go kruntimes on kind: 580 ms, 11.3 Runs/s)"
    )


if __name__ == "__main__":
    main()
