"""Soak: invokes at 80% of the measured peak for N minutes, a fault every minute, RSS per daemon.

Issue 10 (acceptance): "a soak of 10 minutes at 80% of measured peak invoke throughput with
a fault every minute shows no memory growth beyond 10% after warm-up in any daemon".

1. Start the chaos suite's cluster (``tests/chaos/cluster.py``: localkube with kruntimes,
   three python Runtime Pods) and ``--functions`` function Runs.
2. Measure the peak: every function invoked back to back for ``--peak-seconds``.
3. Soak: the same functions paced to ``--load`` (0.8) of that peak, for ``--minutes``; a
   fault every ``--fault-every`` seconds (at most half the soak), cycling through the chaos
   suite's quick faults (Runtime Server, runtimed, gateway, Pod deletion, control plane, API
   server, a whole Pod's processes).
4. RSS of every daemon process (localkube, control plane, gateway, each runtimed, each
   Runtime Server), sampled every 10 s. Faults restart daemons, so each process is judged
   on its own life: its RSS ``--warmup`` seconds after it was first seen (default a fifth
   of the soak, at most 2 minutes) against its last sample, when at least ``--min-span``
   seconds (default a quarter of the soak) separate them; none may grow more than
   ``--max-growth`` (10%). Shorter-lived processes are listed, not compared. localkube
   (API server, node and proxy in one process: the stand-in for Kubernetes, not a
   kruntimes daemon) is printed but not judged.

Also checked over the whole soak: no undocumented status and no answer from a fenced-off
owner. Exit status 1 when a check fails.

Usage: ``python bench/soak.py [--minutes 10]`` (``make soak``); ``--minutes 1`` for a try.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import trio

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from krt.kube.resources import RUNS  # noqa: E402
from tests.chaos import cluster as c  # noqa: E402
from tests.chaos import promises  # noqa: E402
from tests.chaos.faults import (  # noqa: E402
    DeletePod,
    Fault,
    FaultContext,
    KillPodProcesses,
    KillRuntimed,
    KillRuntimeServer,
    RestartApiServer,
    RestartControlPlane,
    RestartGateway,
)
from tests.chaos.timeline import RunTimeline  # noqa: E402
from tests.chaos.workload import InvokeLoad, TokenSource, function_manifest  # noqa: E402

SOAK_FAULTS: tuple[type[Fault], ...] = (
    KillRuntimeServer,
    RestartGateway,
    KillRuntimed,
    DeletePod,
    RestartControlPlane,
    RestartApiServer,
    KillPodProcesses,
)
PAGE = os.sysconf("SC_PAGE_SIZE")
#: The kruntimes daemons the growth bound applies to (localkube stands in for Kubernetes).
JUDGED_ROLES = frozenset({"controlplane", "gateway", "runtimed", "runtime-server"})
#: Seconds between RSS samples of every daemon.
SAMPLE_SECONDS = 10.0


@dataclass(frozen=True)
class Daemon:
    """One daemon process: role, pid and start time (to tell a restarted one)."""

    role: str
    pid: int
    ticks: int


def daemons(cluster: c.ChaosCluster) -> dict[Daemon, int]:
    """Every daemon process of the cluster -> its RSS in bytes."""
    roles = {
        "krt-controlplane": "controlplane",
        "krt-gateway": "gateway",
        "krt-runtimed": "runtimed",
        "krt-python-runtime": "runtime-server",
        "localkube_runner.py": "localkube",
    }
    found: dict[Daemon, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            statm = (entry / "statm").read_text().split()
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        role = next(
            (
                name
                for marker, name in roles.items()
                for arg in cmdline[:3]
                if arg.decode(errors="replace").endswith(marker)
            ),
            None,
        )
        if role is None:
            continue
        if role == "localkube" and str(cluster.state_dir).encode() not in b" ".join(cmdline):
            continue
        if role != "localkube" and not _ours(entry, cluster):
            continue
        ticks = int(stat[stat.rfind(")") + 2 :].split()[19])
        found[Daemon(role, int(entry.name), ticks)] = int(statm[1]) * PAGE
    return found


def _ours(entry: Path, cluster: c.ChaosCluster) -> bool:
    try:
        return os.readlink(entry / "cwd").startswith(str(cluster.state_dir))
    except OSError:
        return False


def compare_rss(
    samples: dict[Daemon, list[tuple[float, int]]], *, warmup: float, span: float, max_growth: float
) -> list[str]:
    """Print each daemon's RSS after its warm-up and at its last sample; return the failures.

    A daemon's warm-up starts when it was first seen (a fault may have restarted it); it is
    compared when at least ``span`` seconds separate its warm-up sample from its last one.
    """
    failures = []
    print(
        f"RSS per daemon (MiB) {warmup:.0f} s after it was first seen, and at its last sample; "
        f"compared over at least {span:.0f} s:",
        flush=True,
    )
    for daemon, seen in sorted(samples.items(), key=lambda kv: (kv[0].role, kv[1][0][0])):
        first = seen[0][0]
        warm = next(((t, rss) for t, rss in seen if t >= first + warmup), None)
        last_t, last_rss = seen[-1]
        head = f"  {daemon.role:15} pid {daemon.pid:7} seen {first:5.0f}-{last_t:5.0f} s"
        if warm is None or last_t - warm[0] < span:
            print(f"{head}  lived too short after warm-up: not compared", flush=True)
            continue
        growth = last_rss / warm[1] - 1
        judged = daemon.role in JUDGED_ROLES
        print(
            f"{head}  {warm[1] / 2**20:6.1f} -> {last_rss / 2**20:6.1f}  ({growth * 100:+5.1f}%)"
            + ("" if judged else "  (the test cluster itself: printed, not judged)"),
            flush=True,
        )
        if judged and growth > max_growth:
            failures.append(
                f"{daemon.role} pid {daemon.pid} grew {growth * 100:.1f}% after warm-up"
            )
    return failures


async def soak(args: argparse.Namespace, cluster: c.ChaosCluster) -> int:
    """Run the soak on ``cluster``; return the exit status."""
    failures: list[str] = []
    async with await cluster.connect() as kube, trio.open_nursery() as nursery:
        timeline = RunTimeline(kube)
        await nursery.start(timeline.run)
        names = [f"soak-fn-{i}" for i in range(args.functions)]
        for name in names:
            await kube.create(RUNS, function_manifest(name))
        endpoints: dict[str, str] = {}
        with trio.fail_after(60):
            while len(endpoints) < len(names):
                for name in names:
                    status = (timeline.latest.get(name) or {}).get("status") or {}
                    if status.get("phase") == "Ready":
                        endpoints[name] = status["endpoint"]["url"]
                await trio.sleep(0.1)
        tokens = TokenSource("soak", await c.caller_token(kube))

        peak_load = InvokeLoad(cluster, tokens, endpoints)
        with trio.move_on_after(args.peak_seconds):
            await peak_load.run()
        peak = sum(1 for r in peak_load.records if r.status == 200) / args.peak_seconds
        rate = peak * args.load
        print(f"peak: {peak:.0f} invokes/s over {len(names)} functions; soak at {rate:.0f}/s")

        load = InvokeLoad(cluster, tokens, endpoints, interval=len(names) / rate)
        ctx = FaultContext(cluster, kube, timeline, tokens)
        duration = args.minutes * 60.0
        warmup = args.warmup if args.warmup is not None else min(duration / 5, 120.0)
        span = args.min_span if args.min_span is not None else duration / 4
        every = min(args.fault_every, duration / 2)
        start = trio.current_time()
        samples: dict[Daemon, list[tuple[float, int]]] = {}
        async with trio.open_nursery() as soaking:
            await soaking.start(load.run)
            next_fault = start + every
            next_sample = start
            fault_index = 0
            while trio.current_time() < start + duration:
                now = trio.current_time()
                if now >= next_sample:
                    for daemon, rss in daemons(cluster).items():
                        samples.setdefault(daemon, []).append((now - start, rss))
                    next_sample += SAMPLE_SECONDS
                if now >= next_fault:
                    fault = SOAK_FAULTS[fault_index % len(SOAK_FAULTS)]()
                    fault_index += 1
                    try:
                        what = await fault.inject(ctx)
                    except (LookupError, OSError) as exc:
                        what = f"skipped ({exc})"
                    print(f"{now - start:6.0f} s  fault {fault.name}: {what}", flush=True)
                    next_fault += every
                await trio.sleep(0.5)
            soaking.cancel_scope.cancel()
        for daemon, rss in daemons(cluster).items():
            samples.setdefault(daemon, []).append((duration, rss))
        failures += compare_rss(samples, warmup=warmup, span=span, max_growth=args.max_growth)
        ok = sum(1 for r in load.records if r.status == 200)
        counts = promises.status_counts(load.records)
        print(f"soak invokes: {len(load.records)} ({dict(counts)}), {ok / duration:.0f} ok/s")
        bad = promises.undocumented_statuses(load.records)
        failures += [f"undocumented status {code} x{n}" for code, n in bad.items()]
        failures += promises.fenced_answers(load.records, timeline.history)
        for name in names:
            await kube.delete(RUNS, name, c.NS)
        nursery.cancel_scope.cancel()
    for failure in failures:
        print(f"FAIL {failure}")
    print("soak: OK" if not failures else f"soak: {len(failures)} failure(s)")
    return 1 if failures else 0


def main() -> None:
    """Parse arguments, start the cluster, soak, stop the cluster."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--functions", type=int, default=6)
    parser.add_argument("--load", type=float, default=0.8, help="fraction of the peak")
    parser.add_argument("--peak-seconds", type=float, default=10.0)
    parser.add_argument("--fault-every", type=float, default=60.0, help="seconds")
    parser.add_argument(
        "--warmup", type=float, default=None, help="seconds after a daemon starts (default 1/5)"
    )
    parser.add_argument(
        "--min-span", type=float, default=None, help="seconds compared at least (default 1/4)"
    )
    parser.add_argument("--max-growth", type=float, default=0.10)
    parser.add_argument("--state-dir", type=Path, default=None)
    args = parser.parse_args()
    state = args.state_dir or Path(tempfile.mkdtemp(prefix="krt-soak-")) / "dev"
    print(f"starting the cluster on {state}", flush=True)
    cluster = c.start_cluster(state)
    try:
        status = trio.run(soak, args, cluster)
    finally:
        left = c.stop_cluster(cluster)
        if left:
            print(f"processes left after krt dev down: {left}")
    sys.exit(status)


if __name__ == "__main__":
    main()
