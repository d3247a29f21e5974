"""bench/report.py: figure validation, the Markdown table, time limits and process cleanup."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import trio

ROOT = Path(__file__).resolve().parents[2]

MACHINE = {"CPU": "Test CPU 9000", "cores": "2", "memory": "4.0 GiB", "Python": "CPython 3.11"}
INVOKE_FIGURES: list[dict[str, Any]] = [
    {"figure": "gateway invoke p50", "value": 2.46, "unit": "ms",
     "baseline": "bare HTTPS echo p50", "baseline_value": 1.0, "target": 3, "target_op": "<"},
    {"figure": "gateway invokes/s (8 Runs)", "value": 438.6, "unit": "req/s",
     "baseline": "bare HTTPS echo", "baseline_value": 1138.6, "target": 500, "target_op": ">="},
    {"figure": "InvokeFunction p50", "value": 2.5, "unit": "ms", "baseline": "echo p50",
     "baseline_value": 1.0, "target": 2, "target_op": "<=", "target_of": "ratio"},
    {"figure": "Runs/s", "value": 33.2, "unit": "Runs/s", "note": "Go on kind: 11.3 Runs/s"},
]  # fmt: skip


def _render(report: ModuleType, outcomes: list[Any], load: tuple[float, ...]) -> str:
    text: str = report.render_markdown(
        machine=MACHINE,
        load_before=load,
        load_after=(0.5, 0.5, 0.5),
        outcomes=outcomes,
        quick=False,
        generated_at=datetime(2026, 11, 29, 10, 0, tzinfo=UTC),
        note="Three other helpers were running tests.",
    )
    return text


def _rows(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("| `")]


def test_table_has_value_baseline_ratio_and_target_per_figure(report: ModuleType) -> None:
    bench = report.Benchmark("invoke", "gateway invoke", 60)
    ok = report.Outcome(bench, report.Status.OK, 12.0, report.parse_figures(INVOKE_FIGURES))
    ok.load_after = 0.3
    text = _render(report, [ok], (0.4, 0.4, 0.4))
    rows = _rows(text)
    assert rows[0] == (
        "| `invoke` | gateway invoke p50 | 2.46 ms | 1 ms (bare HTTPS echo p50) | 2.46x"
        " | < 3 ms: met |"
    )
    assert rows[1] == (
        "| `invoke` | gateway invokes/s (8 Runs) | 439 req/s | 1,139 req/s (bare HTTPS echo)"
        " | 0.39x | >= 500 req/s: **missed** |"
    )
    assert rows[2].endswith("| 2.50x | ratio <= 2x: **missed** |")
    assert rows[3] == "| `invoke` | Runs/s | 33.2 Runs/s | - | - | - (Go on kind: 11.3 Runs/s) |"
    assert "- CPU: Test CPU 9000" in text
    assert "- load average (1/5/15 min) before: 0.40/0.40/0.40, after: 0.50/0.50/0.50" in text
    assert "The 1-minute load average peaked at 0.50 on 2 cores" in text
    assert "other work shared the machine" not in text
    assert "Three other helpers were running tests." in text
    assert "1 of 1 benchmarks completed." in text
    assert "| `invoke` | gateway invoke | ok | 12.0 | 0.30 |" in text


def test_load_during_a_benchmark_counts_for_the_load_note(report: ModuleType) -> None:
    bench = report.Benchmark("invoke", "gateway invoke", 60)
    busy = report.Outcome(bench, report.Status.OK, 1.0, report.parse_figures(INVOKE_FIGURES))
    busy.load_after = 3.5
    text = _render(report, [busy], (0.1, 0.1, 0.1))
    assert "The 1-minute load average peaked at 3.50 on 2 cores" in text


def test_failed_and_timed_out_benchmarks_are_rows_with_their_error(report: ModuleType) -> None:
    failed = report.Outcome(
        report.Benchmark("schedule", "scheduler", 60),
        report.Status.FAILED,
        3.2,
        error="exit status 1; stderr ends:\nTraceback (most recent call last):\nKeyError: 'x|y'",
    )
    slow = report.Outcome(
        report.Benchmark("task_runs", "task Runs", 60),
        report.Status.TIMED_OUT,
        65.0,
        error="timed out after 60 s",
    )
    text = _render(report, [failed, slow], (1.9, 1.0, 1.0))
    assert _rows(text)[:2] == [
        "| `schedule` | **failed** after 3 s: exit status 1; stderr ends: | - | - | - | - |",
        "| `task_runs` | **timed out** after 65 s: timed out after 60 s | - | - | - | - |",
    ]
    assert "0 of 2 benchmarks completed." in text
    assert "### `schedule`: failed\n\n```text\nexit status 1; stderr ends:\n" in text
    assert "KeyError: 'x|y'\n```" in text
    assert "Before the first benchmark the load was already 1.90: other work shared" in text


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"value": 1, "unit": "ms"}, "figure 0: missing field 'figure'"),
        ({"figure": "f", "unit": "ms"}, "missing field 'value'"),
        ({"figure": "f", "value": "fast", "unit": "ms"}, "field 'value' must be a number"),
        ({"figure": "f", "value": True, "unit": "ms"}, "field 'value' must be a number"),
        ({"figure": "f", "value": 1}, "missing field 'unit'"),
        ({"figure": "f", "value": 1, "unit": "ms", "target": 2}, "target and target_op go"),
        ({"figure": "f", "value": 1, "unit": "ms", "target": 2, "target_op": "=="}, "target_op"),
        ({"figure": "f", "value": 1, "unit": "ms", "colour": "red"}, "unknown fields ['colour']"),
        (
            {
                "figure": "f",
                "value": 1,
                "unit": "ms",
                "target": 2,
                "target_op": "<",
                "target_of": "ratio",
            },
            "a ratio target needs baseline_value",
        ),  # fmt: skip
    ],
)
def test_malformed_figures_are_rejected_with_the_field(
    report: ModuleType, record: dict[str, Any], message: str
) -> None:
    with pytest.raises(report.FigureError, match=message.replace("[", r"\[").replace("(", r"\(")):
        report.parse_figures([record])


@pytest.mark.parametrize("data", [[], {}, "x", None])
def test_figures_must_be_a_non_empty_list(report: ModuleType, data: object) -> None:
    with pytest.raises(report.FigureError, match="non-empty JSON list"):
        report.parse_figures(data)


@pytest.mark.parametrize(
    ("op", "value", "met"),
    [("<", 2.0, False), ("<=", 2.0, True), (">", 2.0, False), (">=", 2.0, True), ("<", 1.9, True)],
)
def test_target_operators(report: ModuleType, op: str, value: float, met: bool) -> None:
    figure = report.Figure("f", value, "ms", target=2.0, target_op=op)
    assert figure.target_met is met


def test_null_value_has_no_verdict(report: ModuleType) -> None:
    [figure] = report.parse_figures(
        [{"figure": "f", "value": None, "unit": "ms", "target": 1, "target_op": "<"}]
    )
    assert figure.target_met is None


def test_every_benchmark_script_is_in_the_report(report: ModuleType) -> None:
    # soak.py is the 10-minute reliability run of issue 10 (`make soak`, pass/fail on memory
    # growth), not a figure benchmark
    scripts = {p.stem for p in (ROOT / "bench").glob("*.py")} - {"report", "soak"}
    assert {b.name for b in report.BENCHMARKS} == scripts


def _script(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "fake_bench.py"
    path.write_text(body)
    return path


async def test_time_limit_stops_the_benchmark(
    report: ModuleType, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    script = _script(tmp_path, "import time\ntime.sleep(600)\n")
    bench = report.Benchmark("fake", "sleeps", 30, script=script)
    start = trio.current_time()
    outcome = await report.run_benchmark(bench, quick=True, limit_s=30)
    assert outcome.status is report.Status.TIMED_OUT
    assert outcome.error == "timed out after 30 s"
    assert 30 <= trio.current_time() - start < 30 + report.STOP_GRACE_S + 1


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"


async def test_processes_left_in_the_group_are_killed(report: ModuleType, tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild.pid"
    script = _script(
        tmp_path,
        "import subprocess, sys\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import signal, time;"
        " signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
        "print('boom', file=sys.stderr)\n"
        "sys.exit(3)\n",
    )
    outcome = await report.run_benchmark(
        report.Benchmark("fake", "leaks", 30, script=script), quick=False, limit_s=30
    )
    assert outcome.status is report.Status.FAILED
    assert outcome.error == "exit status 3; stderr ends:\nboom"
    grandchild = int(pid_file.read_text())
    with trio.fail_after(5):
        # not our child: only /proc shows when it is gone, so poll it
        while not _gone(grandchild):  # noqa: ASYNC110
            await trio.sleep(0.01)


async def test_exit_zero_without_figures_is_a_failure(report: ModuleType, tmp_path: Path) -> None:
    script = _script(tmp_path, "print('all good')\n")
    outcome = await report.run_benchmark(
        report.Benchmark("fake", "silent", 30, script=script), quick=False, limit_s=30
    )
    assert outcome.status is report.Status.FAILED
    assert outcome.error == "exited 0 but wrote no figures (--report-json)"


async def test_invalid_figures_are_a_failure(report: ModuleType, tmp_path: Path) -> None:
    script = _script(
        tmp_path,
        "import json, sys\n"
        "path = sys.argv[sys.argv.index('--report-json') + 1]\n"
        "json.dump([{'figure': 'f', 'value': 'x', 'unit': 'ms'}], open(path, 'w'))\n",
    )
    outcome = await report.run_benchmark(
        report.Benchmark("fake", "bad", 30, script=script), quick=False, limit_s=30
    )
    assert outcome.status is report.Status.FAILED
    assert outcome.error.startswith("invalid figures: figure 0 ('f'): field 'value' must be")


def test_quick_pod_start_end_to_end(tmp_path: Path) -> None:
    """The quickest real benchmark, through report.py as `make bench-quick` runs it."""
    output = tmp_path / "benchmarks.md"
    completed = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "report.py"), "--quick", "--only", "pod_start",
         "--output", str(output)],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
        env={k: v for k, v in os.environ.items() if not k.startswith("KRT_")},
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr
    text = output.read_text()
    assert "1 of 1 benchmarks completed." in text
    rows = _rows(text)
    assert rows[0].startswith("| `pod_start` | Pod start median (3 Pods) | ")
    assert any("< 1,000 ms: " in row for row in rows)


async def test_a_benchmarks_own_arguments_come_before_the_report_arguments(
    report: ModuleType, tmp_path: Path
) -> None:
    """The invoke benchmark's figures are the full path's (``--full``): the report must
    pass a benchmark's own arguments."""
    script = _script(
        tmp_path,
        "import json, sys\n"
        "path = sys.argv[sys.argv.index('--report-json') + 1]\n"
        "json.dump([{'figure': ' '.join(sys.argv[1:3]), 'value': 1, 'unit': 'x'}],"
        " open(path, 'w'))\n",
    )
    outcome = await report.run_benchmark(
        report.Benchmark("fake", "args", 30, script=script, args=("--full",)),
        quick=False,
        limit_s=30,
    )
    assert outcome.status is report.Status.OK
    assert outcome.figures[0].figure.startswith("--full --report-json")
    assert ("--full",) == next(b.args for b in report.BENCHMARKS if b.name == "invoke")
