"""``krt get|describe|delete NAME...`` with some names missing: kubectl's rule (finding F10).

``kubectl get|describe|delete pod a nope b`` acts on ``a`` and ``b``, reports ``nope`` on
stderr and exits non-zero; ``krt`` does the same with its own not-found line and exit 3.
"""

from __future__ import annotations

import json

import pytest
import trio
from click.testing import Result

from krt.cli.exitcodes import ExitCode
from krt.kube.client import Kube
from krt.kube.errors import NotFound
from krt.kube.resources import RUNS
from localkube.apiserver import ApiServerConfig, running_apiserver

from .conftest import NS, CliRun, eventually, task_manifest


def not_found(name: str) -> str:
    """The stderr line for a missing Run in the test namespace."""
    return f'error: Run "{name}" not found in namespace "{NS}" (see krt list -n {NS})'


async def test_get_prints_the_runs_found_and_reports_each_missing_one(
    kube: Kube, cli: CliRun
) -> None:
    for name in ("x1", "x2"):
        await kube.create(RUNS, task_manifest(name))
    result = await cli("get", "x1", "nope1", "x2", "nope2")
    assert result.exit_code == ExitCode.NOT_FOUND
    assert [line.split()[0] for line in result.stdout.splitlines()] == ["NAME", "x1", "x2"]
    assert result.stderr.splitlines() == [not_found("nope1"), not_found("nope2")]


@pytest.mark.parametrize("output", ["name", "json"])
async def test_get_in_other_formats_prints_only_the_runs_found(
    kube: Kube, cli: CliRun, output: str
) -> None:
    await kube.create(RUNS, task_manifest("x1"))
    result = await cli("get", "nope", "x1", "-o", output)
    assert result.exit_code == ExitCode.NOT_FOUND
    assert result.stderr.splitlines() == [not_found("nope")]
    if output == "name":
        assert result.stdout == "run.kruntimes.io/x1\n"
    else:
        listed = json.loads(result.stdout)
        assert listed["kind"] == "List"
        assert [item["metadata"]["name"] for item in listed["items"]] == ["x1"]


async def test_get_with_every_name_missing_prints_no_table(cli: CliRun) -> None:
    result = await cli("get", "nope1", "nope2")
    assert result.exit_code == ExitCode.NOT_FOUND
    assert result.stdout == ""
    assert result.stderr.splitlines() == [not_found("nope1"), not_found("nope2")]


async def test_get_with_all_names_found_exits_0_and_shows_a_repeated_name_once(
    kube: Kube, cli: CliRun
) -> None:
    for name in ("x1", "x2"):
        await kube.create(RUNS, task_manifest(name))
    result = await cli("get", "x2", "run/x1", "x2")
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    assert [line.split()[0] for line in result.stdout.splitlines()] == ["NAME", "x2", "x1"]


async def test_delete_deletes_every_run_found_and_reports_each_missing_one(
    kube: Kube, cli: CliRun
) -> None:
    for name in ("x1", "x2"):
        await kube.create(RUNS, task_manifest(name))
    result = await cli("delete", "nope1", "x1", "x2", "x1")
    assert result.exit_code == ExitCode.NOT_FOUND
    assert result.stdout.splitlines() == [
        'run.kruntimes.io "x1" deleted',
        'run.kruntimes.io "x2" deleted',
    ]
    assert result.stderr.splitlines() == [not_found("nope1")]
    for name in ("x1", "x2"):
        with pytest.raises(NotFound):
            await kube.get(RUNS, name, NS)


async def test_delete_wait_waits_for_the_runs_found_then_exits_3(kube: Kube, cli: CliRun) -> None:
    manifest = task_manifest("held")
    manifest["metadata"]["finalizers"] = ["kruntimes.io/registration-cleanup"]
    await kube.create(RUNS, manifest)
    outcome: list[Result] = []

    async def delete() -> None:
        outcome.append(await cli("delete", "held", "nope", "--wait"))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(delete)

        async def deleting() -> bool:
            return bool((await kube.get(RUNS, "held", NS))["metadata"].get("deletionTimestamp"))

        await eventually(deleting)
        await trio.sleep(0.2)
        assert not outcome  # still waiting for the finalizer, despite the missing name
        await kube.patch(RUNS, "held", NS, {"metadata": {"finalizers": None}})
    (result,) = outcome
    assert result.exit_code == ExitCode.NOT_FOUND
    assert result.stdout == 'run.kruntimes.io "held" deleted\n'
    assert result.stderr.splitlines() == [not_found("nope")]


async def test_describe_describes_every_run_found_and_reports_each_missing_one(
    kube: Kube, cli: CliRun
) -> None:
    for name in ("d1", "d2"):
        await kube.create(RUNS, task_manifest(name))
    result = await cli("describe", "d1", "nope", "d2")
    assert result.exit_code == ExitCode.NOT_FOUND
    names = [line.split()[1] for line in result.stdout.splitlines() if line.startswith("Name:")]
    assert names == ["d1", "d2"]
    assert "\n\nName:" in result.stdout  # a blank line between two descriptions
    assert result.stderr.splitlines() == [not_found("nope")]


@pytest.mark.parametrize("verb", ["get", "describe", "delete"])
async def test_a_cluster_without_kruntimes_is_one_line_not_one_per_name(
    cli: CliRun, verb: str
) -> None:
    async with running_apiserver(ApiServerConfig()) as bare:
        result = await cli(verb, "a", "b", env={"KRT_KUBECONFIG": str(bare.kubeconfig_path)})
    assert result.exit_code == ExitCode.NOT_FOUND
    assert len(result.stderr.splitlines()) == 1
    assert "kruntimes is not installed" in result.stderr


async def test_runtime_get_shows_the_runtimes_found_and_reports_each_missing_one(
    cli: CliRun,
) -> None:
    result = await cli("runtime", "get", "python", "nope", "bash", "-o", "name")
    assert result.exit_code == ExitCode.NOT_FOUND
    assert result.stdout.splitlines() == [
        "runtime.kruntimes.io/python",
        "runtime.kruntimes.io/bash",
    ]
    assert result.stderr.splitlines() == [
        f'error: Runtime "nope" not found in namespace "{NS}" (see krt runtime list -n {NS})'
    ]
    both = await cli("runtime", "get", "python", "bash")
    assert both.exit_code == 0, both.output
    assert [line.split()[0] for line in both.stdout.splitlines()] == ["NAME", "python", "bash"]
