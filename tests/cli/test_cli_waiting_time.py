"""Waiting and its deadlines on virtual time (pytest-trio's autojump_clock).

localkube serves on real sockets (and kr8s reads files in threads), so virtual-time tests use
a tiny in-memory stand-in for our own :class:`~krt.kube.client.Kube` wrapper with just the
two verbs waiting needs (``get``, ``watch``); anything else is missing and fails loudly.
"""

from __future__ import annotations

import copy
import functools
import io
import ssl
from collections.abc import AsyncGenerator
from typing import Any

import pytest
import trio
import trio.testing
import trustme

from krt.api.phases import WaitTarget
from krt.cli.exitcodes import ExitCode
from krt.cli.failures import CommandFailed
from krt.cli.waiting import Progress, RunDeleted, target_reached, time_limit, wait_with_progress
from krt.kube.errors import Gone
from krt.kube.resources import RUNS, ResourceRef


class OneRun:
    """One Run: ``get`` returns it; ``watch`` streams the changes made with :meth:`set_phase`."""

    def __init__(self) -> None:
        self.obj: dict[str, Any] = {
            "metadata": {"name": "r", "namespace": "ns", "resourceVersion": "1"},
            "spec": {"runtime": "python", "mode": {"task": {}}},
        }
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.changed = trio.Event()
        self.gets = 0
        self.watches: list[str] = []
        self.fail_next_watch_with_gone = False

    async def get(
        self, ref: ResourceRef, name: str, namespace: str | None = None
    ) -> dict[str, Any]:
        assert (ref, name, namespace) == (RUNS, "r", "ns")
        self.gets += 1
        await trio.lowlevel.checkpoint()
        return copy.deepcopy(self.obj)

    async def watch(
        self, ref: ResourceRef, namespace: str | None = None, resource_version: str = "", **kw: Any
    ) -> AsyncGenerator[tuple[str, dict[str, Any]], None]:
        assert kw["field_selector"] == "metadata.name=r"
        self.watches.append(resource_version)
        if self.fail_next_watch_with_gone:
            self.fail_next_watch_with_gone = False
            raise Gone(410, "Expired", "too old")
        seen = len(self.events)
        while True:
            while seen < len(self.events):
                yield self.events[seen]
                seen += 1
            await self.changed.wait()

    def set_phase(self, phase: str | None, kind: str = "MODIFIED") -> None:
        version = str(int(self.obj["metadata"]["resourceVersion"]) + 1)
        self.obj["metadata"]["resourceVersion"] = version
        if phase is not None:
            self.obj["status"] = {"phase": phase}
        self.events.append((kind, copy.deepcopy(self.obj)))
        self.changed.set()
        self.changed = trio.Event()


def finished(obj: dict[str, Any]) -> bool:
    return target_reached(obj, WaitTarget.COMPLETION)


async def test_time_limit_ends_the_wait_at_exactly_the_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    run = OneRun()
    progress = Progress("r", stream=io.StringIO(), tty=True)
    start = trio.current_time()
    with pytest.raises(CommandFailed) as caught, time_limit(120.0, "Run r did not finish"):
        await wait_with_progress(run, "ns", "r", finished, progress)  # type: ignore[arg-type]
    assert trio.current_time() - start == pytest.approx(120.0)
    assert caught.value.code is ExitCode.TIMED_OUT
    assert caught.value.message == "Run r did not finish within 2m"
    assert progress.stream.getvalue().endswith("\r\x1b[2K")  # type: ignore[attr-defined]


async def test_the_wait_returns_when_the_run_finishes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    run = OneRun()

    async def control_plane() -> None:
        await trio.sleep(10)
        run.set_phase("Running")
        await trio.sleep(40)
        run.set_phase("Succeeded")

    stream = io.StringIO()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(control_plane)
        start = trio.current_time()
        with time_limit(120.0, "Run r did not finish"):
            final = await wait_with_progress(
                run,
                "ns",
                "r",
                finished,
                Progress("r", stream=stream, tty=False),  # type: ignore[arg-type]
            )
    assert trio.current_time() - start == pytest.approx(50.0)
    assert final["status"]["phase"] == "Succeeded"
    assert stream.getvalue().splitlines() == ["r: Pending", "r: Running", "r: Succeeded"]


async def test_no_limit_means_no_deadline(autojump_clock: trio.testing.MockClock) -> None:
    run = OneRun()

    async def late() -> None:
        await trio.sleep(10_000)
        run.set_phase("Failed")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(late)
        with time_limit(None, "unused"):
            final = await wait_with_progress(
                run,
                "ns",
                "r",
                finished,
                Progress("r", stream=io.StringIO(), tty=False),  # type: ignore[arg-type]
            )
    assert final["status"]["phase"] == "Failed"


async def test_gone_rereads_and_watches_from_the_new_version(
    autojump_clock: trio.testing.MockClock,
) -> None:
    run = OneRun()
    run.fail_next_watch_with_gone = True

    async def later() -> None:
        await trio.sleep(5)
        run.set_phase("Succeeded")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(later)
        final = await wait_with_progress(
            run,
            "ns",
            "r",
            finished,
            Progress("r", stream=io.StringIO(), tty=False),  # type: ignore[arg-type]
        )
    assert final["status"]["phase"] == "Succeeded"
    assert run.gets == 2  # the first read, then the re-read after 410 Gone
    assert run.watches == ["1", "1"]


async def test_deletion_while_waiting_is_not_found(autojump_clock: trio.testing.MockClock) -> None:
    run = OneRun()

    async def delete() -> None:
        await trio.sleep(3)
        run.set_phase(None, kind="DELETED")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(delete)
        with pytest.raises(RunDeleted) as caught:
            await wait_with_progress(
                run,
                "ns",
                "r",
                finished,
                Progress("r", stream=io.StringIO(), tty=False),  # type: ignore[arg-type]
            )
    assert caught.value.code is ExitCode.NOT_FOUND


async def test_invoke_gives_up_after_the_timeout_plus_grace(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A gateway that takes the request and never answers: exit 7 at timeout + 5 s."""
    from krt.cli.invoking import CLIENT_GRACE_SECONDS, Invocation, post

    received = trio.Event()
    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_context)

    async def silent(stream: trio.SSLStream[trio.SocketStream]) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            data += await stream.receive_some(65536)
        received.set()
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        [listener] = await nursery.start(
            functools.partial(trio.serve_ssl_over_tcp, silent, 0, server_context, host="127.0.0.1")
        )
        port = listener.transport_listener.socket.getsockname()[1]
        start = trio.current_time()
        with pytest.raises(CommandFailed) as caught:
            await post(
                Invocation(
                    url=f"https://127.0.0.1:{port}/v1/x:invoke",
                    body=b"{}",
                    token="t",
                    ca_bundle=ca.cert_pem.bytes(),
                    timeout_seconds=30.0,
                )
            )
        elapsed = trio.current_time() - start
        nursery.cancel_scope.cancel()
    assert received.is_set()  # the request was sent; the deadline hit while awaiting the answer
    assert caught.value.code is ExitCode.TIMED_OUT
    assert "it is not retried" in caught.value.message
    assert elapsed == pytest.approx(30.0 + CLIENT_GRACE_SECONDS)
