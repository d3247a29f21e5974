"""``follow_run`` (``krt wait``, ``run --wait``) says when it lost the API server and when it is back.

Before, a wait whose API server went away retried silently until ``--timeout`` and then
reported the last phase it had seen as if the Run were still in it.
"""

from __future__ import annotations

import io
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any, cast

import trio

from krt.cli.waiting import RECONNECT_PAUSE, follow_run
from krt.kube.errors import ConnectionFailed, Gone
from krt.kube.interface import KubeClient
from krt.kube.resources import ResourceRef

Obj = dict[str, Any]


def run_obj(phase: str, version: str) -> Obj:
    return {
        "metadata": {"name": "job", "namespace": "default", "resourceVersion": version},
        "status": {"phase": phase},
    }


class FlakyWatch:
    """A client whose first ``failures`` watches fail to connect, then one event arrives.

    With ``gone``, the first watch after the failures gets 410 Gone instead (a restarted
    API server whose history starts after our resourceVersion) and the re-read object is
    the terminal one.
    """

    def __init__(self, failures: int, *, gone: bool = False) -> None:
        self.failures = failures
        self.gone = gone
        self.watches: list[str] = []
        self.gets = 0

    async def get(self, ref: ResourceRef, name: str, namespace: str | None = None) -> Obj:
        self.gets += 1
        return run_obj("Running", "5") if self.gets == 1 else run_obj("Succeeded", "9")

    async def watch(
        self, ref: ResourceRef, namespace: str | None = None, resource_version: str = "", **_: Any
    ) -> AsyncGenerator[tuple[str, Obj], None]:
        self.watches.append(resource_version)
        if len(self.watches) <= self.failures:
            raise ConnectionFailed("cannot connect to 127.0.0.1:1: refused")
        if self.gone:
            raise Gone(410, "Expired", "too old resource version: 5 (704)")
        yield "MODIFIED", run_obj("Succeeded", "9")


async def collect(kube: FlakyWatch, notices: io.StringIO) -> list[str]:
    phases: list[str] = []
    async with aclosing(
        follow_run(cast(KubeClient, kube), "default", "job", notices=notices)
    ) as versions:
        async for obj in versions:
            phases.append(obj["status"]["phase"])
            if obj["status"]["phase"] == "Succeeded":
                break
    return phases


async def test_lost_connection_is_reported_once_and_the_return(autojump_clock: Any) -> None:
    kube = FlakyWatch(failures=3)
    notices = io.StringIO()
    started = trio.current_time()
    phases = await collect(kube, notices)
    assert phases == ["Running", "Succeeded"]
    assert kube.watches == ["5", "5", "5", "5"]  # resumed from the last version each time
    assert trio.current_time() - started == 3 * RECONNECT_PAUSE
    lines = notices.getvalue().splitlines()
    assert lines == [
        "krt: lost the connection to the API server (cannot connect to 127.0.0.1:1: refused); "
        "retrying every 1s",
        "krt: reconnected to the API server",
    ]


async def test_no_notice_when_the_connection_holds(autojump_clock: Any) -> None:
    notices = io.StringIO()
    assert await collect(FlakyWatch(failures=0), notices) == ["Running", "Succeeded"]
    assert notices.getvalue() == ""


async def test_reconnect_answered_with_gone_is_reported_too(autojump_clock: Any) -> None:
    kube = FlakyWatch(failures=2, gone=True)
    notices = io.StringIO()
    assert await collect(kube, notices) == ["Running", "Succeeded"]
    assert kube.gets == 2  # the 410 made it read the Run again
    assert notices.getvalue().splitlines()[1:] == ["krt: reconnected to the API server"]
