"""A reset invocation and the next one handled in the same pass (issue 8, under load).

When runtimed's RST_STREAM for an abandoned invocation and its next request reach the
Runtime Server in one read, the connection's read loop cancels the old call's scope and
starts the new call in the same pass; trio runs the two tasks in either order. These tests
pin the order both ways: the next invocation is admitted (it waits for the cancelled one to
free the slot), while a live invocation still gets RESOURCE_EXHAUSTED at once.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
import test_function_service as base
import trio
import trio._core._run as trio_run

from krt.grpc import unary_server
from servers.common.errors import Code, ContractError
from servers.common.functions import FunctionService

service = base.service  # the fixture: a FunctionService over the fake adapter
invoke_request = base.invoke_request
request = base.request


class _FixedOrder(random.Random):
    """trio's scheduler randomness, fixed: every batch reversed (``value`` < 0.5) or not.

    trio reverses a batch when ``random()`` < 0.5; under pytest-trio (deterministic mode,
    with Hypothesis installed) it sorts the batch by task creation and ``shuffle``s it.
    """

    def __init__(self, value: float) -> None:
        super().__init__(0)
        self.value = value

    def random(self) -> float:
        return self.value

    def shuffle(self, x: list[object]) -> None:  # type: ignore[override]
        if self.value < 0.5:
            x.reverse()


@pytest.fixture(params=[0.0, 0.99], ids=["oldest-task-first", "newest-task-first"])
def batch_order(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> float:
    """Pin the order in which trio runs the tasks of one scheduler batch."""
    value = float(request.param)
    monkeypatch.setattr(trio_run, "_r", _FixedOrder(value))
    return value


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
