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
   Runtime Server) after the warm-up (``--warmup`` seconds, default a fifth of the soak)
   and at the end. A process a fault restarted is new at the end and is listed, not
   compared; every process alive at both samples must not have grown more than
   ``--max-growth`` (10%).

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


def print_rss(title: str, sample: dict[Daemon, int]) -> None:
    """One line per daemon: role, pid, RSS in MiB."""
    print(title, flush=True)
    for daemon, rss in sorted(sample.items(), key=lambda kv: (kv[0].role, kv[0].pid)):
        print(f"  {daemon.role:15} pid {daemon.pid:7}  RSS {rss / 2**20:7.1f} MiB", flush=True)


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
        warmup = args.warmup if args.warmup is not None else duration / 5
        every = min(args.fault_every, duration / 2)
        start = trio.current_time()
        before: dict[Daemon, int] = {}
        async with trio.open_nursery() as soaking:
            await soaking.start(load.run)
            next_fault = start + every
            sampled = False
            fault_index = 0
            while trio.current_time() < start + duration:
                now = trio.current_time()
                if not sampled and now >= start + warmup:
                    before = daemons(cluster)
                    print_rss(f"RSS after warm-up ({warmup:.0f} s):", before)
                    sampled = True
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
        after = daemons(cluster)
        print_rss(f"RSS at the end ({duration:.0f} s):", after)
        for daemon, rss in sorted(before.items(), key=lambda kv: (kv[0].role, kv[0].pid)):
            if daemon not in after:
                print(f"  {daemon.role} pid {daemon.pid}: restarted by a fault, not compared")
                continue
            growth = after[daemon] / rss - 1
            line = f"  {daemon.role:15} pid {daemon.pid:7}  growth {growth * 100:+6.1f}%"
            print(line, flush=True)
            if growth > args.max_growth:
                failures.append(f"{daemon.role} pid {daemon.pid} grew {growth * 100:.1f}%")
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
    parser.add_argument("--warmup", type=float, default=None, help="seconds (default 1/5)")
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
