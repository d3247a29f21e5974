"""Run every benchmark in bench/ and write one Markdown report (issue 10).

Each benchmark runs as its own subprocess, one after another (they would disturb each
other's figures if run together), with ``--report-json PATH`` so that it writes its figures
as a JSON list of records (below) besides printing its usual text, and with ``--quick`` for
a short run. Every benchmark has a time limit (seconds); at the limit its whole process
group gets SIGTERM, then SIGKILL after a grace period. A benchmark that fails, times out or
writes no valid figures becomes a row saying so, with the end of its stderr.

The report (default ``docs/benchmarks.md``) has the machine description (CPU model, cores,
memory, Python version, load average before and after) and one table: figure, this run,
the baseline measured in the same run, their ratio, the target and whether it is met.

Figure record (one JSON object per figure; only ``figure``, ``value`` and ``unit`` are
required)::

    {"figure": str, "value": number | null, "unit": str,
     "baseline": str, "baseline_value": number,      # a comparison measured in the same run
     "target": number, "target_op": "<" | "<=" | ">" | ">=",
     "target_of": "value" | "ratio",                  # what the target bounds (default value)
     "note": str}

Why our own runner instead of a benchmark framework (pytest-benchmark, pyperf): the
benchmarks are whole-system scripts that start clusters and processes, each with its own
baseline; those frameworks time Python callables and would not run them unchanged.

Usage: ``.venv/bin/python bench/report.py [--quick] [--only NAME ...] [--output PATH|-]
[--note TEXT]``. ``make bench`` writes docs/benchmarks.md; ``make bench-quick`` prints the
short-run report to stdout so it never replaces the committed figures.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path
from typing import Any

import trio

ROOT = Path(__file__).resolve().parents[1]
BENCH_DIR = ROOT / "bench"
DEFAULT_OUTPUT = ROOT / "docs" / "benchmarks.md"
STOP_GRACE_S = 5.0
"""Seconds between SIGTERM and SIGKILL for a benchmark past its time limit."""
QUICK_LIMIT_S = 90.0
"""Time limit (seconds) of every benchmark in a ``--quick`` run."""
ERROR_TAIL_LINES = 12
TARGET_OPS = ("<", "<=", ">", ">=")


@dataclass(frozen=True)
class Benchmark:
    """One benchmark script.

    Attributes:
        name: short name, the script's stem (``--only`` takes it).
        title: what it measures, for the report.
        limit_s: time limit of a full run, in seconds.
        script: the script path; defaults to ``bench/<name>.py``.
        args: extra command-line arguments for the script.
    """

    name: str
    title: str
    limit_s: float
    script: Path | None = None
    args: tuple[str, ...] = ()

    @property
    def path(self) -> Path:
        """The script to run."""
        return self.script or BENCH_DIR / f"{self.name}.py"


BENCHMARKS: tuple[Benchmark, ...] = (
    Benchmark("runtime_server", "Python Runtime Server vs bare purerpc echo (issue 2)", 180),
    Benchmark("localkube_api", "localkube API server writes and watch delay (issue 3)", 180),
    Benchmark("pod_start", "localkube Pod start (issue 4)", 180),
    Benchmark("schedule", "scheduler Pending -> Scheduled (issue 5)", 400),
    Benchmark(
        "task_runs", "task Runs end to end on localkube (issue 6)", 500, args=("--repeat", "5")
    ),
    Benchmark("function_ready", "function Run create -> Ready (issue 7)", 300),
    Benchmark(
        "invoke",
        "invoke through gateway, runtimed and the Python Runtime Server vs bare HTTPS echo "
        "(issue 8)",
        300,
        args=("--full",),
    ),
    Benchmark("kube_client", "Kubernetes client CPU per request vs kr8s path (issues 6, 8)", 180),
)


class FigureError(ValueError):
    """A benchmark's figure record is malformed (the message names the record and field)."""


@dataclass(frozen=True)
class Figure:
    """One measured figure, as a benchmark reports it (see the module docstring)."""

    figure: str
    value: float | None
    unit: str
    baseline: str | None = None
    baseline_value: float | None = None
    target: float | None = None
    target_op: str | None = None
    target_of: str = "value"
    note: str | None = None

    @property
    def ratio(self) -> float | None:
        """``value / baseline_value``, or None when either is missing or the baseline is 0."""
        if self.value is None or not self.baseline_value:
            return None
        return self.value / self.baseline_value

    @property
    def target_met(self) -> bool | None:
        """Whether the target holds; None when there is no target or nothing to compare."""
        if self.target is None or self.target_op is None:
            return None
        subject = self.ratio if self.target_of == "ratio" else self.value
        if subject is None or math.isnan(subject):
            return None
        return {
            "<": subject < self.target,
            "<=": subject <= self.target,
            ">": subject > self.target,
            ">=": subject >= self.target,
        }[self.target_op]


def _number(record: dict[str, Any], key: str, where: str, *, required: bool) -> float | None:
    value = record.get(key)
    if value is None:
        if required and key not in record:
            raise FigureError(f"{where}: missing field {key!r}")
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise FigureError(f"{where}: field {key!r} must be a number, got {value!r}")
    return float(value)


def _text(record: dict[str, Any], key: str, where: str, *, required: bool) -> str | None:
    value = record.get(key)
    if value is None:
        if required:
            raise FigureError(f"{where}: missing field {key!r}")
        return None
    if not isinstance(value, str) or not value.strip():
        raise FigureError(f"{where}: field {key!r} must be a non-empty string, got {value!r}")
    return value


def parse_figures(data: object) -> list[Figure]:
    """Validate a benchmark's figure list.

    Args:
        data: the decoded JSON a benchmark wrote with ``--report-json``.

    Returns:
        The figures, in order.

    Raises:
        FigureError: ``data`` is not a non-empty list of records, or a record lacks a
            required field, has a field of the wrong type, an unknown ``target_op`` or
            ``target_of``, a target without an operator (or the reverse), or a ratio target
            without a baseline value.
    """
    if not isinstance(data, list) or not data:
        raise FigureError(f"figures must be a non-empty JSON list, got {type(data).__name__}")
    figures = []
    for index, record in enumerate(data):
        where = f"figure {index}"
        if not isinstance(record, dict):
            raise FigureError(f"{where}: must be a JSON object, got {type(record).__name__}")
        name = _text(record, "figure", where, required=True)
        assert name is not None
        where = f"figure {index} ({name!r})"
        unknown = set(record) - set(Figure.__dataclass_fields__)
        if unknown:
            raise FigureError(f"{where}: unknown fields {sorted(unknown)}")
        target = _number(record, "target", where, required=False)
        target_op = record.get("target_op")
        if target_op is not None and target_op not in TARGET_OPS:
            raise FigureError(f"{where}: target_op must be one of {TARGET_OPS}, got {target_op!r}")
        if (target is None) != (target_op is None):
            raise FigureError(f"{where}: target and target_op go together")
        target_of = record.get("target_of", "value")
        if target_of not in ("value", "ratio"):
            raise FigureError(f"{where}: target_of must be 'value' or 'ratio', got {target_of!r}")
        baseline_value = _number(record, "baseline_value", where, required=False)
        if target_of == "ratio" and baseline_value is None:
            raise FigureError(f"{where}: a ratio target needs baseline_value")
        unit = _text(record, "unit", where, required=True)
        assert unit is not None
        figures.append(
            Figure(
                figure=name,
                value=_number(record, "value", where, required=True),
                unit=unit,
                baseline=_text(record, "baseline", where, required=False),
                baseline_value=baseline_value,
                target=target,
                target_op=target_op,
                target_of=target_of,
                note=_text(record, "note", where, required=False),
            )
        )
    return figures


class Status(Enum):
    """How a benchmark run ended."""

    OK = "ok"
    FAILED = "failed"
    TIMED_OUT = "timed out"


@dataclass
class Outcome:
    """The result of running one benchmark.

    Attributes:
        benchmark: which one.
        status: how it ended.
        seconds: wall-clock run time, in seconds.
        figures: its figures (empty unless ``status`` is OK).
        error: why it failed or timed out (exit status, figure error, stderr tail).
        load_after: the 1-minute load average right after it ended, if sampled.
    """

    benchmark: Benchmark
    status: Status
    seconds: float
    figures: list[Figure] = field(default_factory=list)
    error: str = ""
    load_after: float | None = None


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def _tail(path: Path) -> str:
    """The last :data:`ERROR_TAIL_LINES` non-blank lines of a file ("" if unreadable)."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join([line for line in lines if line.strip()][-ERROR_TAIL_LINES:])


async def _run_in_group(argv: list[str], *, stdout: Path, stderr: Path) -> int:
    """Run ``argv`` in its own process group until it exits; return its exit status.

    On cancellation (the caller's time limit) the group gets SIGTERM, then SIGKILL after
    :data:`STOP_GRACE_S` seconds; whatever is left in the group is killed after a normal
    exit too, so no benchmark leaves processes behind.
    """
    with stdout.open("wb") as out, stderr.open("wb") as err:
        process = await trio.lowlevel.open_process(
            argv, stdout=out, stderr=err, cwd=ROOT, start_new_session=True
        )
    try:
        return await process.wait()
    finally:
        with trio.CancelScope(shield=True):
            if process.returncode is None:
                _signal_group(process.pid, signal.SIGTERM)
                with trio.move_on_after(STOP_GRACE_S):
                    await process.wait()
            _signal_group(process.pid, signal.SIGKILL)
            await process.wait()


async def run_benchmark(benchmark: Benchmark, *, quick: bool, limit_s: float) -> Outcome:
    """Run one benchmark as a subprocess and collect its figures.

    Args:
        benchmark: the benchmark to run.
        quick: pass ``--quick`` (a short run).
        limit_s: the benchmark's time limit, in seconds (data about the benchmark, applied
            here with ``trio.move_on_after``; past it the process group is stopped).

    Returns:
        The outcome; never raises for a failing benchmark (its failure is the outcome).
    """
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"krt-bench-{benchmark.name}-") as tmp:
        figures_path = Path(tmp) / "figures.json"
        stderr_path = Path(tmp) / "stderr.txt"
        argv = [
            sys.executable,
            str(benchmark.path),
            *benchmark.args,
            "--report-json",
            str(figures_path),
        ]
        if quick:
            argv.append("--quick")
        with trio.move_on_after(limit_s) as scope:
            code = await _run_in_group(argv, stdout=Path(tmp) / "stdout.txt", stderr=stderr_path)
        seconds = time.monotonic() - start
        tail = _tail(stderr_path)
        if scope.cancelled_caught:
            error = f"timed out after {limit_s:g} s"
            return Outcome(benchmark, Status.TIMED_OUT, seconds, error=_join(error, tail))
        if code != 0:
            error = f"exit status {code}"
            return Outcome(benchmark, Status.FAILED, seconds, error=_join(error, tail))
        try:
            figures = parse_figures(json.loads(await trio.Path(figures_path).read_text()))
        except FileNotFoundError:
            error = "exited 0 but wrote no figures (--report-json)"
            return Outcome(benchmark, Status.FAILED, seconds, error=_join(error, tail))
        except (json.JSONDecodeError, FigureError) as exc:
            error = f"invalid figures: {exc}"
            return Outcome(benchmark, Status.FAILED, seconds, error=_join(error, tail))
    return Outcome(benchmark, Status.OK, seconds, figures=figures)


def _join(error: str, tail: str) -> str:
    return f"{error}; stderr ends:\n{tail}" if tail else error


def describe_machine() -> dict[str, str]:
    """CPU model, cores, memory, OS, Python version and git commit of this machine (Linux).

    The Python entry names the interpreter behind the virtualenv: builds differ (an
    optimised distribution build against pyenv's default build: 10-17% CPU per task Run).
    """
    cpu = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    memory = "unknown"
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
                break
    commit = "unknown"
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    return {
        "CPU": cpu,
        "cores": str(os.cpu_count()),
        "memory": memory,
        "OS": f"{platform.system()} {platform.release()} ({platform.machine()})",
        "Python": (
            f"{platform.python_implementation()} {platform.python_version()}"
            f" ({getattr(sys, '_base_executable', sys.executable)})"
        ),
        "commit": commit,
    }


def load_average() -> tuple[float, float, float]:
    """The 1, 5 and 15 minute load averages."""
    return os.getloadavg()


def _number_text(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "-"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " / ")


def _target_text(figure: Figure) -> str:
    if figure.target is None or figure.target_op is None:
        return "-"
    if figure.target_of == "ratio":
        bound = f"ratio {figure.target_op} {figure.target:,g}x"
    else:
        bound = f"{figure.target_op} {figure.target:,g} {figure.unit}"
    met = figure.target_met
    verdict = "met" if met else "**missed**" if met is False else "n/a"
    return f"{bound}: {verdict}"


def render_markdown(
    *,
    machine: dict[str, str],
    load_before: Sequence[float],
    load_after: Sequence[float],
    outcomes: Sequence[Outcome],
    quick: bool,
    generated_at: datetime,
    note: str = "",
) -> str:
    """Render the benchmark report.

    Args:
        machine: ``describe_machine()``'s description.
        load_before: 1/5/15 minute load averages before the first benchmark.
        load_after: the same after the last one.
        outcomes: one per benchmark run, in order.
        quick: whether the benchmarks ran with ``--quick``.
        generated_at: when the run started (UTC).
        note: free text about the conditions of the run (e.g. other work on the machine).

    Returns:
        The Markdown document.
    """
    cores = machine.get("cores", "?")
    lines = [
        "# Benchmarks",
        "",
        f"Generated by `bench/report.py` ({'`make bench-quick`, short runs' if quick else '`make bench`'})"
        f" on {generated_at:%Y-%m-%d %H:%M} UTC. Do not edit by hand: re-run it.",
        'Each benchmark ran as its own process, one after another; "baseline" is a comparison',
        "the benchmark measured in the same run on the same machine, and ratio is this run /",
        "baseline. The benchmark scripts' docstrings say exactly what each figure measures.",
        "",
        "## Machine",
        "",
    ]
    lines += [f"- {key}: {value}" for key, value in machine.items()]
    lines += [
        f"- load average (1/5/15 min) before: {'/'.join(f'{v:.2f}' for v in load_before)},"
        f" after: {'/'.join(f'{v:.2f}' for v in load_after)}",
        "",
        "## Load at the time",
        "",
    ]
    sampled = [o.load_after for o in outcomes if o.load_after is not None]
    peak = max([*load_before[:1], *load_after[:1], *sampled], default=0.0)
    lines.append(
        f"The 1-minute load average peaked at {peak:.2f} on {cores} cores; that includes the"
        " benchmarks' own processes (a benchmark and the servers it starts keep up to two"
        " cores busy)."
    )
    if cores.isdigit() and load_before[:1] and load_before[0] > int(cores) / 2:
        lines.append(
            f"Before the first benchmark the load was already {load_before[0]:.2f}: other work"
            " shared the machine, so latencies are inflated and throughputs deflated by an"
            " unknown amount. Compare each figure with its same-run baseline rather than"
            " across runs."
        )
    if note:
        lines += ["", note]
    failed = [o for o in outcomes if o.status is not Status.OK]
    lines += [
        "",
        "## Figures",
        "",
        f"{len(outcomes) - len(failed)} of {len(outcomes)} benchmarks completed.",
        "",
        "| benchmark | figure | this run | baseline (same run) | ratio | target |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for outcome in outcomes:
        name = f"`{outcome.benchmark.name}`"
        if outcome.status is not Status.OK:
            first = outcome.error.splitlines()[0] if outcome.error else ""
            lines.append(
                f"| {name} | **{outcome.status.value}** after {outcome.seconds:.0f} s:"
                f" {_cell(first)} | - | - | - | - |"
            )
            continue
        for figure in outcome.figures:
            value = f"{_number_text(figure.value)} {figure.unit}"
            baseline = "-"
            if figure.baseline is not None or figure.baseline_value is not None:
                baseline = f"{_number_text(figure.baseline_value)} {figure.unit}"
                if figure.baseline:
                    baseline += f" ({figure.baseline})"
            ratio = "-" if figure.ratio is None else f"{figure.ratio:.2f}x"
            target = _target_text(figure)
            if figure.note:
                target += f" ({figure.note})"
            lines.append(
                f"| {name} | {_cell(figure.figure)} | {_cell(value)} | {_cell(baseline)}"
                f" | {ratio} | {_cell(target)} |"
            )
    lines += [
        "",
        "## Runs",
        "",
        "| benchmark | what | status | seconds | 1-minute load after |",
        "| --- | --- | --- | --- | --- |",
    ]
    lines += [
        f"| `{o.benchmark.name}` | {_cell(o.benchmark.title)} | {o.status.value}"
        f" | {o.seconds:.1f} | {'-' if o.load_after is None else f'{o.load_after:.2f}'} |"
        for o in outcomes
    ]
    for outcome in failed:
        lines += ["", f"### `{outcome.benchmark.name}`: {outcome.status.value}", "", "```text"]
        lines += [outcome.error.replace("```", "'''"), "```"]
    return "\n".join(lines) + "\n"


async def run_all(benchmarks: Sequence[Benchmark], *, quick: bool) -> list[Outcome]:
    """Run ``benchmarks`` one after another, printing progress to stderr."""
    outcomes = []
    for benchmark in benchmarks:
        limit = min(benchmark.limit_s, QUICK_LIMIT_S) if quick else benchmark.limit_s
        print(f"bench/report.py: running {benchmark.name} (limit {limit:g} s)", file=sys.stderr)
        outcome = await run_benchmark(benchmark, quick=quick, limit_s=limit)
        outcome.load_after = load_average()[0]
        print(
            f"bench/report.py: {benchmark.name}: {outcome.status.value} in {outcome.seconds:.1f} s",
            file=sys.stderr,
        )
        outcomes.append(outcome)
    return outcomes


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmarks and write the report; exit status 1 if any benchmark failed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short runs (each script's --quick)")
    parser.add_argument(
        "--only",
        action="append",
        choices=[b.name for b in BENCHMARKS],
        help="run only this benchmark (repeatable)",
    )
    parser.add_argument(
        "--output", default=str(DEFAULT_OUTPUT), help="Markdown file, or - for stdout"
    )
    parser.add_argument("--note", default="", help="a paragraph about the run's conditions")
    args = parser.parse_args(argv)
    selected = [b for b in BENCHMARKS if not args.only or b.name in args.only]
    generated_at = datetime.now(UTC)
    machine = describe_machine()
    before = load_average()
    outcomes = trio.run(lambda: run_all(selected, quick=args.quick))
    after = load_average()
    text = render_markdown(
        machine=machine,
        load_before=before,
        load_after=after,
        outcomes=outcomes,
        quick=args.quick,
        generated_at=generated_at,
        note=args.note,
    )
    if args.output == "-":
        sys.stdout.write(text)
    else:
        output = Path(args.output)
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text)
        print(f"bench/report.py: wrote {output}", file=sys.stderr)
    return 0 if all(o.status is Status.OK for o in outcomes) else 1


if __name__ == "__main__":
    raise SystemExit(main())
