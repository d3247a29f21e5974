"""One chaos scenario: load, one fault (or several), recovery, the promises, cleanup.

:func:`run_scenario`:

1. creates ``size.functions`` function Runs and waits until they are Ready;
2. starts the load (:class:`~.workload.InvokeLoad` on every function, a task Run every
   ``size.task_period`` seconds) and lets it run ``size.warmup`` seconds;
3. injects the fault, then keeps the load running until every function answers again (at
   most the fault's ``recovery_bound``) and ``size.observe`` seconds more;
4. stops the load, probes every function until it answers 200 (within the bound) and waits
   until every task is terminal (at most ``size.settle`` seconds);
5. checks the promises (``promises.py``) and the fault's own checks, deletes every Run, and
   checks that runtimed's accounting is back to zero and nothing is left behind (Run
   workspaces, Pod roots of deleted Pods, processes of ended containers).

It returns a :class:`ScenarioReport`: ``figures`` (printed) and ``violations`` (the test
asserts there are none).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import httpx
import trio

from krt.kube.errors import KubeError, NotFound
from krt.kube.resources import PODS, RUNS

from . import cluster as c
from . import promises
from .faults import Fault, FaultContext
from .timeline import RunTimeline
from .workload import (
    INVOKE_DEADLINE,
    InvokeLoad,
    TaskLoad,
    TokenSource,
    executions,
    function_manifest,
)


@dataclass(frozen=True)
class Size:
    """How big a scenario is (seconds unless said otherwise).

    Attributes:
        functions: function Runs invoked in parallel. warmup: load before the fault.
        observe: load after recovery. task_period: seconds between task Runs.
        task_seconds: how long each task sleeps. settle: bound for tasks to end.
        cleanup: bound for deleted Runs to disappear and accounting to return to zero.
    """

    functions: int
    warmup: float
    observe: float
    task_period: float
    task_seconds: float
    settle: float = 60.0
    cleanup: float = 30.0


FULL = Size(functions=6, warmup=3.0, observe=5.0, task_period=0.5, task_seconds=2.0)
SHORT = Size(functions=3, warmup=1.0, observe=1.0, task_period=1.0, task_seconds=0.3)


@dataclass
class ScenarioReport:
    """What a scenario measured.

    Attributes:
        name: the scenario. figures: lines to print. violations: broken promises.
    """

    name: str
    figures: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)

    def print(self) -> None:
        """Print the figures and violations, one ``chaos[<name>]`` line each."""
        for line in self.figures:
            print(f"chaos[{self.name}] {line}", flush=True)
        for line in self.violations:
            print(f"chaos[{self.name}] VIOLATION {line}", flush=True)


async def run_scenario(
    cluster: c.ChaosCluster, faults: list[Fault], size: Size, *, name: str
) -> ScenarioReport:
    """Run one scenario with ``faults`` injected together; see the module docstring."""
    report = ScenarioReport(name)
    prefix = name[:40]
    async with await cluster.connect() as kube:
        timeline = RunTimeline(kube)
        token = await c.caller_token(kube)
        tokens = TokenSource("initial", token)
        ctx = FaultContext(cluster, kube, timeline, tokens)
        async with trio.open_nursery() as nursery:
            await nursery.start(timeline.run)
            try:
                await _exercise(ctx, faults, size, prefix, report)
            finally:
                with trio.CancelScope(shield=True), trio.move_on_after(60):
                    await _cleanup(ctx, size, report, faults)
            nursery.cancel_scope.cancel()
    return report


async def _exercise(
    ctx: FaultContext, faults: list[Fault], size: Size, prefix: str, report: ScenarioReport
) -> None:
    kube = ctx.kube
    functions = [f"{prefix}-fn-{i}" for i in range(size.functions)]
    for fn in functions:
        await kube.create(RUNS, function_manifest(fn))
    endpoints: dict[str, str] = {}
    with trio.fail_after(60):
        while len(endpoints) < len(functions):
            for fn in functions:
                obj = ctx.timeline.latest.get(fn) or {}
                status = obj.get("status") or {}
                if status.get("phase") == "Ready" and (status.get("endpoint") or {}).get("url"):
                    endpoints[fn] = status["endpoint"]["url"]
            await trio.sleep(0.1)
    for fault in faults:
        await fault.prepare(ctx)
    load = InvokeLoad(ctx.cluster, ctx.tokens, endpoints)
    ctx.cluster.ledger_dir.mkdir(exist_ok=True)
    tasks = TaskLoad(
        kube,
        ctx.cluster.ledger_dir,
        f"{prefix}-task",
        period=size.task_period,
        seconds=size.task_seconds,
    )
    bound = max(f.recovery_bound for f in faults)
    async with trio.open_nursery() as nursery:
        await nursery.start(load.run)
        await nursery.start(tasks.run)
        await trio.sleep(size.warmup)
        fault_at = trio.current_time()
        async with trio.open_nursery() as inject:
            for fault in faults:
                inject.start_soon(_inject, fault, ctx, report)
        injected = trio.current_time()
        report.figures.append(f"fault applied in {injected - fault_at:.1f} s")
        with trio.move_on_after(max(bound - (injected - fault_at), 1.0)):
            while True:
                if _all_recovered(load, endpoints, fault_at, injected):
                    break
                await trio.sleep(0.25)
        await trio.sleep_until(fault_at + max(f.min_duration for f in faults))
        await trio.sleep(size.observe)
        nursery.cancel_scope.cancel()
    await _probe(load, endpoints, deadline=fault_at + bound)
    with trio.move_on_after(size.settle):
        while True:
            tasks_left = promises.stuck_runs(
                {n: ctx.timeline.last(n) for n in ctx.timeline.names("task")}, ctx.timeline.kinds
            )
            if not tasks_left:
                break
            await trio.sleep(0.25)
    _judge(ctx, load, endpoints, fault_at, bound, faults, report, size)


async def _inject(fault: Fault, ctx: FaultContext, report: ScenarioReport) -> None:
    what = await fault.inject(ctx)
    report.figures.append(f"fault {fault.name}: {what}")


def _all_recovered(
    load: InvokeLoad, endpoints: dict[str, str], fault_at: float, injected: float
) -> bool:
    if trio.current_time() < injected + 1.0:
        return False
    times = promises.recovery_times(load.records, endpoints, fault_at)
    return all(t is not None for t in times.values())


async def _probe(load: InvokeLoad, endpoints: dict[str, str], *, deadline: float) -> None:
    """Invoke every function until it answers 200 or ``deadline`` (trio clock) passes."""
    async with load.client() as client:
        for name in sorted(endpoints):
            seq = 1_000_000
            while True:
                seq += 1
                record = await load.invoke_once(client, name, seq)
                if record.status == 200 or trio.current_time() > max(deadline, 0):
                    break
                await trio.sleep(0.25)


def _judge(
    ctx: FaultContext,
    load: InvokeLoad,
    endpoints: dict[str, str],
    fault_at: float,
    bound: float,
    faults: list[Fault],
    report: ScenarioReport,
    size: Size,
) -> None:
    records = load.records
    history = ctx.timeline.history
    counts = promises.status_counts(records)
    report.figures.append(
        f"invokes: {len(records)} ({', '.join(f'{k}: {v}' for k, v in sorted(counts.items()))})"
    )
    fenced = promises.fenced_answers(records, history)
    report.figures.append(f"answers from a fenced-off owner: {len(fenced)}")
    report.violations += [f"fenced-off owner answered: {v}" for v in fenced]
    owners = {(r.run, r.pod) for r in records if r.status == 200}
    moved = sum(1 for fn in endpoints if len({p for run, p in owners if run == fn}) > 1)
    report.figures.append(f"functions served by more than one Pod over time: {moved}")
    failed = {
        fn: sum(1 for r in records if r.run == fn and r.status != 200 and r.sent >= fault_at)
        for fn in sorted(endpoints)
    }
    served_by = {fn: sorted({p[-5:] for run, p in owners if run == fn}) for fn in sorted(endpoints)}
    report.figures.append(
        "failed invokes after the fault per function (serving Pods): "
        + ", ".join(f"{fn[-4:]}: {n} {served_by[fn]}" for fn, n in failed.items())
    )
    bad = promises.undocumented_statuses(records)
    report.figures.append(f"undocumented statuses: {dict(bad) or 'none'}")
    report.violations += [f"undocumented status {code} x{n}" for code, n in bad.items()]
    silent = promises.unanswered(records)
    # A request the gateway held when it was SIGKILLed can hang on localkube's Service proxy,
    # which swallows the reset (test_chaos_findings.py); only those are tolerated.
    kill_window = (fault_at - INVOKE_DEADLINE, fault_at + 0.5)
    proxy_bug = [
        r
        for r in silent
        if any(f.kills_gateway for f in faults) and kill_window[0] <= r.sent <= kill_window[1]
    ]
    report.figures.append(
        f"requests never answered: {len(silent)}"
        + (
            f" ({len(proxy_bug)} in flight at the gateway kill: localkube proxy bug)"
            if proxy_bug
            else ""
        )
    )
    report.violations += [
        f"{r.run}: no answer within {r.answered - r.sent:.1f} s (sent {r.sent - fault_at:+.2f} s "
        "after the fault)"
        for r in silent
        if r not in proxy_bug
    ]
    task_names = ctx.timeline.names("task")
    ran = {k: v for k, v in executions(ctx.cluster.ledger_dir).items() if k in task_names}
    losses = [loss for fault in faults for loss in fault.losses]
    duplicates = promises.duplicate_executions(ran, history, losses)
    recorded = [d for d in duplicates if d.justified and not d.unrecorded]
    unrecorded = [d for d in duplicates if d.justified and d.unrecorded]
    report.figures.append(
        f"tasks: {len(task_names)} created, {sum(len(v) for v in ran.values())} executions, "
        f"{len(duplicates)} executed more than once: {len(recorded)} in a new attempt after "
        f"a lost execution, {len(unrecorded)} in the same attempt after a lost execution "
        f"the status does not show"
    )
    for d in recorded + unrecorded:
        report.figures.append(
            f"  {d.run}: {d.executions} executions, {d.attempts} attempt(s), "
            f"{d.lost} destroyed by the fault, status reasons {list(d.reasons)}"
        )
    report.violations += [
        f"task {d.run} executed {d.executions}x with {d.attempts} attempt(s), "
        f"{d.lost} lost to the fault (reasons: {list(d.reasons)})"
        for d in duplicates
        if not d.justified
    ]
    phases: dict[str, int] = {}
    for n in task_names:
        last = ctx.timeline.last(n)
        key = last.phase if last else "?"
        phases[key] = phases.get(key, 0) + 1
    report.figures.append(f"task phases: {phases}")
    report.figures.append(
        f"longest wait of a task to be scheduled: "
        f"{promises.longest_pending(history, task_names):.1f} s"
    )
    retried = {
        n: (last.attempt, last.reason)
        for n in task_names
        if (last := ctx.timeline.last(n)) is not None and last.attempt > 1
    }
    report.figures.append(f"tasks retried: {len(retried)} {retried or ''}".rstrip())
    stuck = promises.stuck_runs(
        {n: ctx.timeline.last(n) for n in [*task_names, *endpoints]}, ctx.timeline.kinds
    )
    report.figures.append(f"Runs stuck past their bounds: {len(stuck)}")
    report.violations += [f"stuck after {size.settle:g} s: {s}" for s in stuck]
    times = promises.recovery_times(records, endpoints, fault_at)
    worst = max((t for t in times.values() if t is not None), default=0.0)
    report.figures.append(
        f"recovery: every function invocable again after {worst:.2f} s (bound {bound:g} s)"
    )
    for fn, t in sorted(times.items()):
        if t is None or t > bound:
            report.violations.append(f"function {fn} not invocable within {bound:g} s ({t})")
    for fault in faults:
        figures, violations = fault.checks(records)
        report.figures += figures
        report.violations += violations


async def _cleanup(
    ctx: FaultContext, size: Size, report: ScenarioReport, faults: list[Fault]
) -> None:
    kube = ctx.kube
    uids = dict(ctx.timeline.uids)
    try:
        runs, _ = await kube.list(RUNS, c.NS, label_selector="chaos")
        for run in runs:
            try:
                await kube.delete(RUNS, run["metadata"]["name"], c.NS)
            except NotFound:
                pass
        left: list[Any] = runs
        with trio.move_on_after(size.cleanup):
            while left:
                await trio.sleep(0.25)
                left, _ = await kube.list(RUNS, c.NS, label_selector="chaos")
        if left:
            report.violations.append(
                "Runs not gone after deletion: "
                + ", ".join(
                    f"{r['metadata']['name']} ({(r.get('status') or {}).get('phase')})"
                    for r in left
                )
            )
        for fault in faults:
            await fault.restore(ctx)
        await _accounting_zero(ctx, size, report)
        await _nothing_left(ctx, size, report, uids)
    except KubeError as exc:
        report.violations.append(f"cleanup failed: {exc}")


ROUTES = "runtimed_invocations_total{"
ACCOUNTING = (
    "runtimed_local_runs",
    "runtimed_function_registrations_accepting",
    "runtimed_invocations_in_flight",
)


async def _accounting_zero(ctx: FaultContext, size: Size, report: ScenarioReport) -> None:
    """runtimed's own accounting of every python Pod returns to zero with no Run left."""
    nonzero: list[str] = []
    routes: dict[str, int] = {}
    async with httpx.AsyncClient(timeout=5) as client:
        with trio.move_on_after(size.cleanup):
            while True:
                nonzero = []
                routes = {}
                for pod in await c.python_pods(ctx.kube):
                    ip = (pod.get("status") or {}).get("podIP")
                    try:
                        text = (await client.get(f"http://{ip}:8081/metrics")).text
                    except httpx.HTTPError as exc:
                        nonzero.append(f"{pod['metadata']['name']}: metrics unreachable ({exc})")
                        continue
                    for line in text.splitlines():
                        metric, _, value = line.partition(" ")
                        if metric in ACCOUNTING and float(value) != 0.0:
                            nonzero.append(f"{pod['metadata']['name']}: {metric}={value}")
                        if metric.startswith(ROUTES):
                            route = metric.split('route="', 1)[-1].split('"', 1)[0]
                            routes[route] = routes.get(route, 0) + int(float(value))
                if not nonzero:
                    break
                await trio.sleep(0.5)
    report.figures.append(f"runtimed accounting after cleanup: {nonzero or 'all zero'}")
    report.figures.append(f"invokes by route (live runtimeds, since they started): {routes}")
    report.violations += [f"accounting not zero: {n}" for n in nonzero]


async def _nothing_left(
    ctx: FaultContext, size: Size, report: ScenarioReport, uids: dict[str, str]
) -> None:
    """No Run workspace, Pod root of a deleted Pod, or process of an ended container."""
    files: list[str] = []
    orphans: list[str] = []
    with trio.move_on_after(size.cleanup):
        while True:
            pods, _ = await ctx.kube.list(PODS)
            live = {p["metadata"]["uid"] for p in pods}
            files = []
            for root in ctx.cluster.pods_dir.iterdir():
                if root.name.rsplit("_", 1)[-1] not in live:
                    files.append(f"Pod root of a deleted Pod: {root.name}")
                    continue
                for uid in uids.values():
                    if (root / "workspace" / "runs" / uid).exists():
                        files.append(
                            f"workspace of a deleted Run: {root.name}/workspace/runs/{uid}"
                        )
            orphans = c.orphan_processes(ctx.cluster)
            if not files and not orphans:
                break
            await trio.sleep(0.5)
    report.figures.append(
        f"left behind after cleanup: {len(files)} files, {len(orphans)} processes"
    )
    report.violations += [f"left behind: {f}" for f in files]
    report.violations += [f"orphan process: {o}" for o in orphans]
    if os.environ.get("KRT_CHAOS_DEBUG"):
        print(f"debug: {files} {orphans}")
