"""A FunctionLifecycle over the fakes, on trio's virtual clock."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio
from fn_builders import NOW, POD_NAME, POD_UID
from fn_fakes import FakeFunctionServer, FakeRuns

from krt.api.run import Source
from krt.kube.clock import TrioLinkedClock
from runtimed.functions.lifecycle import FunctionLifecycle
from runtimed.functions.settings import FunctionSettings, FunctionTimings
from runtimed.identity import PodIdentity
from runtimed.sources import PreparationError, RunFiles, Workspace

GATEWAY = "https://gw.example"


class FastFiles:
    """The lifecycle's file steps without worker threads (autojump would race a thread)."""

    async def prepare(self, source: Source | None, files: RunFiles) -> None:
        shutil.rmtree(files.root, ignore_errors=True)
        files.work.mkdir(parents=True)  # noqa: ASYNC240 - tiny, test only
        if source is not None and source.inline is not None:
            if source.inline == "BROKEN-SOURCE":
                shutil.rmtree(files.root, ignore_errors=True)
                raise PreparationError("cannot write inline source: disk full")
            (files.work / source.effective_inline_path).write_text(source.inline)  # noqa: ASYNC240

    async def has_work_dir(self, files: RunFiles) -> bool:
        return files.work.is_dir()  # noqa: ASYNC240

    async def ensure_work_dir(self, files: RunFiles) -> None:
        files.work.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240

    async def remove(self, files: RunFiles) -> None:
        shutil.rmtree(files.root, ignore_errors=True)


@dataclass
class Harness:
    runs: FakeRuns
    server: FakeFunctionServer
    life: FunctionLifecycle
    workspace: Workspace
    clock: TrioLinkedClock

    def create(self, obj: dict[str, Any]) -> str:
        self.runs.create(obj)
        return f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"

    def status(self, key: str) -> dict[str, Any]:
        return self.runs.status(key)

    async def wait_phase(self, key: str, *phases: str, within: float = 120) -> dict[str, Any]:
        with trio.fail_after(within):
            while self.status(key).get("phase") not in phases:  # noqa: ASYNC110 - virtual time
                await trio.sleep(0.01)
        return self.status(key)


@asynccontextmanager
async def harness(
    tmp_path: Path,
    *,
    runs: FakeRuns | None = None,
    server: FakeFunctionServer | None = None,
    **timings: float,
) -> AsyncIterator[Harness]:
    """A running lifecycle; pass ``runs``/``server`` of an earlier one to model a restart."""
    clock = TrioLinkedClock(NOW)
    runs = runs or FakeRuns()
    server = server or FakeFunctionServer(clock)
    workspace = Workspace(tmp_path / "ws")
    life = FunctionLifecycle(
        pod=PodIdentity(name=POD_NAME, namespace="ns", uid=POD_UID),
        cache=runs,
        writer=runs,
        finalizers=runs,
        server=server,
        workspace=workspace,
        clock=clock,
        settings=FunctionSettings(gateway_url=GATEWAY, timings=FunctionTimings(**timings)),
        files=FastFiles(),
    )
    runs.handlers[:] = [life.on_run_event]
    async with trio.open_nursery() as nursery:
        await nursery.start(life.run)
        life.adopt(runs.objects.values())
        yield Harness(runs, server, life, workspace, clock)
        nursery.cancel_scope.cancel()
