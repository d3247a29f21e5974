"""``krt cancel NAME...``: kubectl's rule for missing names, and ``--wait`` for all together.

The command-level tests run ``krt`` against localkube (the tests play the control plane by
patching Run status). The waiting itself is tested on virtual time (pytest-trio's
``autojump_clock``) with an in-memory stand-in for our :class:`~krt.kube.client.Kube`
wrapper holding several Runs, as tests/cli/test_cli_waiting_time.py does for one.
"""

from __future__ import annotations

import copy
import io
from collections.abc import AsyncGenerator
from typing import Any

import pytest
import trio
import trio.testing

from krt.cli.exitcodes import ExitCode
from krt.cli.group_waiting import GroupProgress, wait_until_terminal
from krt.kube.client import Kube
from krt.kube.errors import NotFound
from krt.kube.resources import RUNS, ResourceRef
from localkube.apiserver import ApiServerConfig, running_apiserver

from .conftest import NS, CliRun, eventually, set_status, task_manifest

Obj = dict[str, Any]


def not_found(name: str) -> str:
    """The stderr line for a missing Run in the test namespace (as krt delete says it)."""
    return f'error: Run "{name}" not found in namespace "{NS}" (see krt list -n {NS})'


async def cancel_requested(kube: Kube, name: str) -> bool:
    return bool((await kube.get(RUNS, name, NS))["spec"].get("cancelRequested"))


# -- the requests ---------------------------------------------------------------------------


async def test_cancel_requests_every_run_found_in_order_and_reports_each_missing_one(
    kube: Kube, cli: CliRun
) -> None:
    for name in ("x1", "x2", "done"):
        await kube.create(RUNS, task_manifest(name))
    await set_status(kube, "done", {"phase": "Succeeded"})
    result = await cli("cancel", "nope1", "x2", "done", "run/x1", "x2", "nope2")
    assert result.exit_code == ExitCode.NOT_FOUND
    assert result.stdout.splitlines() == [
        "run.kruntimes.io/x2 cancel requested",
        "run.kruntimes.io/done already finished (Succeeded)",
        "run.kruntimes.io/x1 cancel requested",
    ]
    assert result.stderr.splitlines() == [not_found("nope1"), not_found("nope2")]
    assert await cancel_requested(kube, "x1")
    assert await cancel_requested(kube, "x2")
    assert not await cancel_requested(kube, "done")  # a finished Run is left alone


async def test_cancel_with_every_name_found_exits_0(kube: Kube, cli: CliRun) -> None:
    for name in ("c1", "c2"):
        await kube.create(RUNS, task_manifest(name))
    result = await cli("cancel", "c1", "c2")
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    assert result.stdout.splitlines() == [
        "run.kruntimes.io/c1 cancel requested",
        "run.kruntimes.io/c2 cancel requested",
    ]
    again = await cli("cancel", "c2", "c1")  # idempotent, and in the new order
    assert again.exit_code == 0
    assert again.stdout.splitlines() == [
        "run.kruntimes.io/c2 cancel requested",
        "run.kruntimes.io/c1 cancel requested",
    ]


async def test_cancel_on_a_cluster_without_kruntimes_is_one_line_not_one_per_name(
    cli: CliRun,
) -> None:
    async with running_apiserver(ApiServerConfig()) as bare:
        result = await cli("cancel", "a", "b", env={"KRT_KUBECONFIG": str(bare.kubeconfig_path)})
    assert result.exit_code == ExitCode.NOT_FOUND
    assert len(result.stderr.splitlines()) == 1
    assert "kruntimes is not installed" in result.stderr


# -- --wait through the command --------------------------------------------------------------


async def test_cancel_wait_waits_for_every_run_and_then_exits_3_for_the_missing_one(
    kube: Kube, cli: CliRun
) -> None:
    for name in ("w1", "w2"):
        await kube.create(RUNS, task_manifest(name))
    outcome: list[Any] = []

    async def cancel() -> None:
        outcome.append(await cli("cancel", "w1", "nope", "w2", "--wait"))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(cancel)
        await eventually(lambda: cancel_requested(kube, "w2"))
        await set_status(kube, "w2", {"phase": "Cancelled", "reason": "Cancelled"})
        await trio.sleep(0.2)
        assert not outcome  # w1 is not terminal yet: still waiting
        await set_status(kube, "w1", {"phase": "Cancelled", "reason": "Cancelled"})
    (result,) = outcome
    assert result.exit_code == ExitCode.NOT_FOUND
    lines = result.stdout.splitlines()
    assert lines[:2] == [
        "run.kruntimes.io/w1 cancel requested",
        "run.kruntimes.io/w2 cancel requested",
    ]
    assert sorted(lines[2:]) == ["run.kruntimes.io/w1 Cancelled", "run.kruntimes.io/w2 Cancelled"]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors == [not_found("nope")]
    assert "w1: Pending" in result.stderr.splitlines()  # progress, as the single-Run wait


async def test_cancel_wait_of_finished_runs_only_returns_at_once(kube: Kube, cli: CliRun) -> None:
    await kube.create(RUNS, task_manifest("f1"))
    await set_status(kube, "f1", {"phase": "Failed"})
    result = await cli("cancel", "f1", "--wait")
    assert result.exit_code == 0, result.output
    assert result.stdout == "run.kruntimes.io/f1 already finished (Failed)\n"


async def test_ctrl_c_during_the_wait_says_the_requests_stand(
    kube: Kube, cli: CliRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    import krt.cli.runs_cmd as runs_cmd_module

    async def interrupted(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(runs_cmd_module, "wait_until_terminal", interrupted)
    for name in ("i1", "i2"):
        await kube.create(RUNS, task_manifest(name))
    result = await cli("cancel", "i1", "i2", "nope", "--wait")
    assert result.exit_code == ExitCode.INTERRUPTED
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "error: interrupted; cancellation stays requested for i1, i2 (krt get i1 i2 -n default "
    )
    assert last.endswith(" shows them)")
    assert await cancel_requested(kube, "i1")


def test_cancel_help_shows_several_names() -> None:
    from click.testing import CliRunner

    from krt.cli.main import krt

    result = CliRunner().invoke(krt, ["cancel", "--help"])
    assert result.exit_code == 0
    assert "NAMES..." in result.output
    assert "krt cancel a b c" in result.output
    assert "together" in result.output


# -- the wait on virtual time ------------------------------------------------------------------


class SomeRuns:
    """Several Runs: ``get`` returns one; ``watch`` streams the changes :meth:`set_phase` makes.

    Just the two verbs waiting needs; any other attribute is missing and fails loudly.
    """

    def __init__(self, *names: str) -> None:
        self.objs: dict[str, Obj] = {
            name: {
                "metadata": {"name": name, "namespace": "ns", "resourceVersion": "1"},
                "spec": {"runtime": "python", "mode": {"task": {}}, "cancelRequested": True},
            }
            for name in names
        }
        self.events: dict[str, list[tuple[str, Obj]]] = {name: [] for name in names}
        self.changed = trio.Event()

    async def get(self, ref: ResourceRef, name: str, namespace: str | None = None) -> Obj:
        assert (ref, namespace) == (RUNS, "ns")
        await trio.lowlevel.checkpoint()
        if name not in self.objs:
            raise NotFound(404, "NotFound", f'runs "{name}" not found', details={"name": name})
        return copy.deepcopy(self.objs[name])

    async def watch(
        self, ref: ResourceRef, namespace: str | None = None, resource_version: str = "", **kw: Any
    ) -> AsyncGenerator[tuple[str, Obj], None]:
        name = kw["field_selector"].removeprefix("metadata.name=")
        seen = len(self.events[name])
        while True:
            while seen < len(self.events[name]):
                yield self.events[name][seen]
                seen += 1
            await self.changed.wait()

    def set_phase(
        self, name: str, phase: str | None, kind: str = "MODIFIED", **status: Any
    ) -> None:
        obj = self.objs[name]
        obj["metadata"]["resourceVersion"] = str(int(obj["metadata"]["resourceVersion"]) + 1)
        if phase is not None:
            obj["status"] = {"phase": phase, **status}
        self.events[name].append((kind, copy.deepcopy(obj)))
        self.changed.set()
        self.changed = trio.Event()


async def test_the_runs_are_waited_for_together_each_reported_as_it_ends(
    autojump_clock: trio.testing.MockClock,
) -> None:
    runs = SomeRuns("a", "b")
    ended: list[tuple[str, float]] = []
    start = trio.current_time()

    async def control_plane() -> None:
        await trio.sleep(10)
        runs.set_phase("b", "Cancelled")  # the second named ends first
        await trio.sleep(40)
        runs.set_phase("a", "Running")
        await trio.sleep(10)
        runs.set_phase("a", "Cancelled")

    def final(obj: Obj) -> None:
        ended.append((obj["metadata"]["name"], trio.current_time() - start))

    stream = io.StringIO()
    progress = GroupProgress(["a", "b"], stream=stream, tty=False)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(control_plane)
        failures = await wait_until_terminal(runs, "ns", progress, final)  # type: ignore[arg-type]
    assert failures == []
    assert [name for name, _ in ended] == ["b", "a"]
    assert [at for _, at in ended] == pytest.approx([10.0, 60.0])
    assert progress.waiting == []
    lines = stream.getvalue().splitlines()
    assert [line for line in lines if line.startswith("a: ")] == [
        "a: Pending",
        "a: Running",
        "a: Cancelled",
    ]
    assert [line for line in lines if line.startswith("b: ")] == ["b: Pending", "b: Cancelled"]
    assert lines.index("b: Cancelled") < lines.index("a: Running")


async def test_the_timeout_names_only_the_runs_still_not_terminal(
    autojump_clock: trio.testing.MockClock,
) -> None:
    runs = SomeRuns("a", "b", "c")
    ended: list[str] = []

    async def control_plane() -> None:
        await trio.sleep(5)
        runs.set_phase("b", "Cancelled")
        runs.set_phase("a", "Running", assignedPod="runtime-python-1")
        runs.set_phase("c", "Pending", reason="NoReadyPod")

    progress = GroupProgress(["a", "b", "c"], stream=io.StringIO(), tty=False)
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(control_plane)
        with trio.move_on_after(60) as limit:
            await wait_until_terminal(
                runs,  # type: ignore[arg-type]
                "ns",
                progress,
                lambda obj: ended.append(obj["metadata"]["name"]),
            )
    assert limit.cancelled_caught
    assert trio.current_time() - start == pytest.approx(60.0)
    assert ended == ["b"]
    assert progress.waiting == ["a", "c"]
    assert progress.timeout_message(60) == (
        "Runs a, c did not finish within 1m: a still Running; "
        "c still Pending (NoReadyPod): Runtime python has no ready Pod: kubectl get pods -n ns "
        "-l kruntimes.io/runtime=python; see krt describe a c"
    )


def test_the_timeout_for_one_run_left_is_worded_as_the_single_run_wait() -> None:
    progress = GroupProgress(["a", "b"], stream=io.StringIO(), tty=False)
    progress.update("a", {"metadata": {"name": "a", "namespace": "ns"}, "status": {}})
    progress.finished("b")
    assert progress.timeout_message(90) == (
        "Run a did not finish within 1m30s; still Pending; see krt describe a"
    )


async def test_a_run_deleted_while_waited_for_is_reported_and_the_others_still_waited_for(
    autojump_clock: trio.testing.MockClock,
    capsys: pytest.CaptureFixture[str],
) -> None:
    runs = SomeRuns("a", "b")
    ended: list[str] = []

    async def control_plane() -> None:
        await trio.sleep(5)
        runs.set_phase("a", None, kind="DELETED")
        await trio.sleep(20)
        runs.set_phase("b", "Cancelled")

    progress = GroupProgress(["a", "b", "gone"], stream=io.StringIO(), tty=False)
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(control_plane)
        failures = await wait_until_terminal(
            runs,  # type: ignore[arg-type]
            "ns",
            progress,
            lambda obj: ended.append(obj["metadata"]["name"]),
        )
    assert trio.current_time() - start == pytest.approx(25.0)
    assert ended == ["b"]
    assert [(f.code, f.message) for f in failures] == [
        (ExitCode.NOT_FOUND, "Run ns/gone was deleted"),  # gone before the first read
        (ExitCode.NOT_FOUND, "Run ns/a was deleted"),
    ]
    assert capsys.readouterr().err.splitlines() == [
        "error: Run ns/gone was deleted",
        "error: Run ns/a was deleted",
    ]


async def test_on_a_terminal_one_spinner_line_shows_the_runs_still_waited_for(
    autojump_clock: trio.testing.MockClock,
) -> None:
    runs = SomeRuns("a", "b")
    stream = io.StringIO()
    progress = GroupProgress(["a", "b"], stream=stream, tty=True)
    seen: list[str] = []

    async def control_plane() -> None:
        await trio.sleep(1)
        seen.append(progress.line())
        runs.set_phase("b", "Cancelled")
        await trio.sleep(1)
        seen.append(progress.line())
        runs.set_phase("a", "Cancelled")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(control_plane)
        await wait_until_terminal(runs, "ns", progress, lambda obj: None)  # type: ignore[arg-type]
    assert seen == ["a: Pending; b: Pending", "a: Pending"]
    text = stream.getvalue()
    assert " a: Pending; b: Pending [0s]" in text
    assert "a: Pending [1s]" in text
    assert "\n" not in text  # no per-change lines on a terminal: the spinner says it
    assert text.endswith("\r\x1b[2K")  # erased when the wait ends
