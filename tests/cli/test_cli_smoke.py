"""Smoke: get against localkube through the thread harness."""

from __future__ import annotations

from krt.kube.client import Kube
from krt.kube.resources import RUNS

from .conftest import CliRun, task_manifest


async def test_get_lists_a_run(kube: Kube, cli: CliRun) -> None:
    await kube.create(RUNS, task_manifest("hello"))
    result = await cli("get")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines()[0].split() == [
        "NAME",
        "PHASE",
        "RUNTIME",
        "POD",
        "ATTEMPT",
        "AGE",
    ]
    assert result.stdout.splitlines()[1].split()[:5] == [
        "hello",
        "Pending",
        "python",
        "<none>",
        "0",
    ]
