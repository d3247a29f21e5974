"""Minimal reproductions of bugs the chaos suite found (strict xfail until fixed).

Each test fails today for the reason it names; once the bug is fixed it passes, the strict
``xfail`` turns that into a failure, and the marker must go (the test then guards the fix).
"""

from __future__ import annotations

import socket
import struct
from datetime import UTC, datetime

import pytest
import trio

from krt.api import Retry, Run
from localkube.proxy import ServiceProxy, Target
from runtimed.task_decisions import ExecState, Fail, ServerView, StartExecution, decide_task


class _NoKube:
    """The proxy's informers are never started here; any API call is a test bug."""

    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"unexpected API call: {name}")


async def _resetting_backend(stream: trio.SocketStream) -> None:
    """Read the request, then close with RST (as a SIGKILLed process with unread data)."""
    await stream.receive_some(1024)
    stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    await stream.aclose()


@pytest.mark.xfail(
    strict=True,
    reason="localkube bug: src/localkube/proxy.py _copy swallows a reset from the backend "
    "and leaves the client connection open (the gateway-restart hang of the chaos suite)",
)
async def test_a_backend_reset_closes_the_client_connection_of_the_service_proxy() -> None:
    proxy = ServiceProxy(_NoKube())  # type: ignore[arg-type]
    async with trio.open_nursery() as nursery:
        backends = await nursery.start(
            trio.serve_listeners,
            _resetting_backend,
            await trio.open_tcp_listeners(0, host="127.0.0.1"),
        )
        backend_port = backends[0].socket.getsockname()[1]
        listen = ("127.0.0.1", 0)
        proxy.targets[listen] = Target(("ns", "svc"), "p", backend_port)
        proxy.pick_order = lambda target: [("127.0.0.1", backend_port)]  # type: ignore[method-assign]

        async def handler(stream: trio.SocketStream) -> None:
            await proxy._handle(stream, listen)

        front = await nursery.start(
            trio.serve_listeners, handler, await trio.open_tcp_listeners(0, host="127.0.0.1")
        )
        client = await trio.open_tcp_stream("127.0.0.1", front[0].socket.getsockname()[1])
        async with client:
            await client.send_all(b"POST /invoke HTTP/1.1\r\n\r\n")
            closed = False
            # real sockets: the bound only keeps a hang from blocking the suite
            with trio.move_on_after(3):
                try:
                    closed = await client.receive_some(1024) == b""
                except trio.BrokenResourceError:
                    closed = True
        nursery.cancel_scope.cancel()
    assert closed, "the proxy kept the client connection open after the backend reset it"


POD_UID = "pod-uid-1"
NOW = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)


def _running_task_claimed_earlier() -> Run:
    """A task Run this Pod claimed (attempt 1) before its runtimed restarted."""
    return Run.from_dict(
        {
            "apiVersion": "kruntimes.io/v1alpha1",
            "kind": "Run",
            "metadata": {"name": "t", "namespace": "ns", "uid": "run-1", "resourceVersion": "9"},
            "spec": {
                "runtime": "python",
                "source": {"inline": "print(1)\n", "inlinePath": "main.py"},
                "mode": {"task": {"entrypoint": "main.py"}},
                "retryPolicy": {"maxAttempts": 3, "backoff": "0s"},
            },
            "status": {
                "phase": "Running",
                "attempt": 1,
                "assignedPod": "runtime-python-a",
                "assignedPodUID": POD_UID,
                "startTime": "2026-11-29T08:59:30.000000Z",
            },
        }
    )


@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="runtimed gap: src/runtimed/task_decisions.py decide_task starts a second execution "
    "in the same attempt when a restarted runtimed (no local view) finds NOT_FOUND for a Run "
    "an earlier runtimed claimed (the kill-pod-processes scenario's re-executions)",
)
def test_a_restarted_runtimed_counts_a_vanished_execution_as_lost() -> None:
    # local=None only happens for a Running Run this runtimed did not claim (a claim creates
    # the local view, tasks.TaskLifecycle._claim): an earlier runtimed did, and may have
    # started it on a Runtime Server that has since died with it (seed 003: NOT_FOUND after
    # an execution existed is ExecutionLost, which takes a retry attempt).
    action = decide_task(
        _running_task_claimed_earlier(),
        pod_uid=POD_UID,
        local=None,
        server=ServerView(ExecState.NOT_FOUND),
        now=NOW,
    )
    assert not isinstance(action, StartExecution), (
        "re-executed in attempt 1: the retry budget is not charged and the status never "
        "shows the lost execution"
    )
    assert isinstance(action, Fail)
    assert isinstance(action.decision, Retry)
    assert action.decision.patch["reason"] == "ExecutionLost"
