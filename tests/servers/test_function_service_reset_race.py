"""A reset invocation and the next one handled in the same pass (issue 8, under load).

When runtimed's RST_STREAM for an abandoned invocation and its next request reach the
Runtime Server in one read, the connection's read loop cancels the old call's scope and
starts the new call in the same pass; trio runs the two tasks in either order. These tests
pin the order both ways: the next invocation is admitted (it waits for the cancelled one to
free the slot), while a live invocation still gets RESOURCE_EXHAUSTED at once.
"""

from __future__ import annotations

from typing import Any

import test_function_service as base
import trio

from krt.grpc import unary_server
from servers.common.errors import Code, ContractError
from servers.common.functions import FunctionService
from tests import trio_batch_order

batch_order = trio_batch_order.batch_order  # the fixture, one order per run

service = base.service  # the fixture: a FunctionService over the fake adapter
invoke_request = base.invoke_request
request = base.request


async def serve_call(
    svc: FunctionService,
    reg_id: str,
    payload: dict[str, Any],
    call: trio.CancelScope,
    outcomes: dict[str, object],
    name: str,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run an invocation as UnaryConnection runs a call: in the call's scope, published."""
    unary_server._CALL_SCOPE.set(call)
    with call:
        task_status.started()
        try:
            _, result = await svc.invoke(invoke_request(reg_id, payload, invocation_id=name))
            outcomes[name] = result.output
        except ContractError as exc:
            outcomes[name] = exc.code
    if call.cancelled_caught:
        outcomes[name] = "cancelled"


async def test_reset_then_next_invoke_in_one_pass_is_admitted(
    autojump_clock: Any, service: Any, tmp_path: Any, batch_order: float
) -> None:
    svc, adapter = service
    reg = await svc.register(request(tmp_path))
    outcomes: dict[str, object] = {}
    async with trio.open_nursery() as nursery:
        first = trio.CancelScope()
        await nursery.start(
            serve_call, svc, reg.registration_id, {"sleep": 100}, first, outcomes, "abandoned"
        )
        await trio.sleep(1)  # in flight
        # one read: the abandoned call's RST_STREAM, then the next request
        first.cancel()
        nursery.start_soon(
            serve_call, svc, reg.registration_id, {}, trio.CancelScope(), outcomes, "next"
        )
    assert outcomes["abandoned"] == "cancelled"
    assert isinstance(outcomes["next"], bytes), outcomes  # admitted, not RESOURCE_EXHAUSTED
    assert adapter.calls == ["abandoned", "next"]


async def test_a_live_invocation_still_refuses_at_once(
    autojump_clock: Any, service: Any, tmp_path: Any, batch_order: float
) -> None:
    svc, _ = service
    reg = await svc.register(request(tmp_path))
    outcomes: dict[str, object] = {}
    async with trio.open_nursery() as nursery:
        live = trio.CancelScope()
        await nursery.start(
            serve_call, svc, reg.registration_id, {"sleep": 5}, live, outcomes, "live"
        )
        await trio.sleep(1)
        start = trio.current_time()
        await serve_call(svc, reg.registration_id, {}, trio.CancelScope(), outcomes, "overlap")
        assert outcomes["overlap"] is Code.RESOURCE_EXHAUSTED
        assert trio.current_time() == start  # no queueing
