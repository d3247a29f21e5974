"""An abandoned invocation's cancellation is forwarded before the next invoke of its Run.

Issue 8: "a client that disconnects mid-invocation frees the slot (the next invoke succeeds
at once)". The disconnect cancels the abandoned call at once, but its RST_STREAM is queued
upstream only when its request task next runs. The next invoke's request may be read in the
same pass of the event loop (a loaded machine); trio then runs the two tasks in either
order. These tests pin trio's batch order both ways and check the upstream (a fake Invoker
standing for the HTTP/2 connection, whose frames stay in order) sees the cancellation
first. A live invocation of the Run is not waited for: overlapping invokes are forwarded at
once (runtimed answers 429).
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing
from conftest import PATH

from gateway.app import GatewayApp
from gateway.disconnects import EXTENSION, DisconnectSignal
from gateway.invoke import InvokeRequest, InvokeResult
from gateway.metrics import GatewayMetrics
from krt.api.endpoint import FunctionEndpointRef
from krt.invocation_slots import InvocationSlots
from tests import trio_batch_order

batch_order = trio_batch_order.batch_order  # the fixture, one order per run

HEADERS = [(b"authorization", b"Bearer tok"), (b"content-type", b"application/json")]


class OrderedUpstream:
    """Stands in for the Invoker: records what reaches the upstream connection, in order."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.entered = trio.Event()

    async def invoke(self, request: InvokeRequest) -> InvokeResult:
        name = request.invocation_id
        self.events.append(f"request {name}")
        if name == "abandoned" or name.startswith("long"):
            self.entered.set()
            try:
                await trio.sleep_forever()
            except trio.Cancelled:
                # GrpcConnection queues RST_STREAM here, before Cancelled propagates
                self.events.append(f"reset {name}")
                raise
        return InvokeResult(b'{"ok":true}', "application/json", None)


def http_scope(invocation_id: str, signal: DisconnectSignal) -> dict[str, Any]:
    return {
        "type": "http",
        "method": "POST",
        "path": PATH,
        "raw_path": PATH.encode(),
        "query_string": b"",
        "headers": [*HEADERS, (b"x-kruntime-invocation-id", invocation_id.encode())],
        "extensions": {EXTENSION: signal},
    }


async def serve_request(
    app: GatewayApp, invocation_id: str, signal: DisconnectSignal, statuses: dict[str, int]
) -> None:
    """One request as hypercorn hands it over: the body is there, no scheduler pass."""
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": b"{}", "more_body": False}
        await trio.sleep_forever()
        raise AssertionError

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses[invocation_id] = message["status"]

    await app(http_scope(invocation_id, signal), receive, send)


def make_app(upstream: OrderedUpstream) -> GatewayApp:
    return GatewayApp(
        upstream,  # type: ignore[arg-type]
        GatewayMetrics(),
        default_timeout_seconds=30,
        max_timeout_seconds=60,
    )


async def test_the_abandoned_invocations_reset_goes_first(batch_order: float) -> None:
    upstream = OrderedUpstream()
    app = make_app(upstream)
    statuses: dict[str, int] = {}
    abandoned = DisconnectSignal()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve_request, app, "abandoned", abandoned, statuses)
        await upstream.entered.wait()
        # one pass of the event loop: the old connection's end of stream, the next request
        abandoned.fire()
        nursery.start_soon(serve_request, app, "next", DisconnectSignal(), statuses)
    assert upstream.events == ["request abandoned", "reset abandoned", "request next"]
    assert statuses == {"next": 200}  # the abandoned client gets nothing: it is gone
    assert app.in_flight.holders() == 0


async def test_a_live_invocation_is_not_waited_for(batch_order: float) -> None:
    upstream = OrderedUpstream()
    app = make_app(upstream)
    statuses: dict[str, int] = {}
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve_request, app, "long", DisconnectSignal(), statuses)
        await upstream.entered.wait()
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(serve_request, app, "overlap", DisconnectSignal(), statuses)
        await trio.testing.wait_all_tasks_blocked()
        # forwarded at once, while the first is still in flight (the owner answers 429)
        assert upstream.events == ["request long", "request overlap"]
        nursery.cancel_scope.cancel()


async def test_the_wait_is_bounded(autojump_clock: trio.testing.MockClock) -> None:
    in_flight = InvocationSlots(release_wait_seconds=1.0)
    ref = FunctionEndpointRef("demo", "python", "uid-1")
    stuck = trio.CancelScope()
    stuck.cancel()  # cancelled, but its task never unwinds
    async with in_flight.passage(ref, call=stuck):
        start = trio.current_time()
        async with in_flight.passage(ref):
            assert trio.current_time() - start == pytest.approx(1.0)
        other = FunctionEndpointRef("demo", "python", "uid-2")
        start = trio.current_time()
        async with in_flight.passage(other):  # another Run: no wait
            assert trio.current_time() == start
