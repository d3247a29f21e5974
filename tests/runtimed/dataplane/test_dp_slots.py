"""The Run slot's rules on virtual time (seed 000 Capacity; issue 8 disconnects)."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from krt.invocation_slots import Busy, InvocationSlots

UID = "run-1"


async def hold(
    slots: InvocationSlots,
    call: trio.CancelScope,
    *,
    exclusive: bool = True,
    unwind_seconds: float = 0.0,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Hold the slot inside ``call`` until cancelled; unwinding takes ``unwind_seconds``."""
    with call:
        holder = slots.claim(UID, call=call) if exclusive else slots.passage(UID, call=call)
        async with holder:
            task_status.started()
            try:
                await trio.sleep_forever()
            finally:
                with trio.CancelScope(shield=True):
                    await trio.sleep(unwind_seconds)


async def test_a_live_holder_refuses_at_once(autojump_clock: trio.testing.MockClock) -> None:
    slots = InvocationSlots()
    async with trio.open_nursery() as nursery:
        await nursery.start(hold, slots, trio.CancelScope())
        start = trio.current_time()
        with pytest.raises(Busy, match="already in flight"):
            async with slots.claim(UID, call=trio.CancelScope()):
                pass
        assert trio.current_time() == start
        async with slots.claim("other-run"):  # another Run is free
            pass
        nursery.cancel_scope.cancel()
    assert UID not in slots
    assert len(slots) == 0


async def test_a_cancelled_holder_is_waited_for(autojump_clock: trio.testing.MockClock) -> None:
    slots = InvocationSlots()
    call = trio.CancelScope()
    async with trio.open_nursery() as nursery:
        await nursery.start(
            lambda task_status: hold(slots, call, unwind_seconds=0.2, task_status=task_status)
        )
        call.cancel()  # the caller reset the stream; the holder takes 0.2 s to unwind
        start = trio.current_time()
        async with slots.claim(UID, call=trio.CancelScope()):
            assert trio.current_time() - start == pytest.approx(0.2)
            assert UID in slots


async def test_a_stuck_cancelled_holder_is_busy_after_the_bound(
    autojump_clock: trio.testing.MockClock,
) -> None:
    slots = InvocationSlots(release_wait_seconds=1.0)
    call = trio.CancelScope()
    async with trio.open_nursery() as nursery:
        await nursery.start(
            lambda task_status: hold(slots, call, unwind_seconds=5, task_status=task_status)
        )
        call.cancel()
        start = trio.current_time()
        with pytest.raises(Busy, match="still being cancelled after 1 s"):
            async with slots.claim(UID):
                pass
        assert trio.current_time() - start == pytest.approx(1.0)


async def test_only_one_of_two_waiters_gets_the_slot(
    autojump_clock: trio.testing.MockClock,
) -> None:
    slots = InvocationSlots()
    call = trio.CancelScope()
    outcomes: list[str] = []

    async def claimant() -> None:
        try:
            async with slots.claim(UID, call=trio.CancelScope()):
                outcomes.append("admitted")
                await trio.sleep(1)
        except Busy:
            outcomes.append("busy")

    async with trio.open_nursery() as nursery:
        await nursery.start(
            lambda task_status: hold(slots, call, unwind_seconds=0.1, task_status=task_status)
        )
        call.cancel()
        nursery.start_soon(claimant)
        nursery.start_soon(claimant)
    assert sorted(outcomes) == ["admitted", "busy"]


async def test_a_passage_waits_only_for_cancelled_ones(
    autojump_clock: trio.testing.MockClock,
) -> None:
    slots = InvocationSlots()
    live, cancelled = trio.CancelScope(), trio.CancelScope()
    async with trio.open_nursery() as nursery:
        await nursery.start(
            lambda task_status: hold(slots, live, exclusive=False, task_status=task_status)
        )
        start = trio.current_time()
        async with slots.passage(UID):  # a live forward of the Run: entered at once
            assert trio.current_time() == start
        await nursery.start(
            lambda task_status: hold(
                slots, cancelled, exclusive=False, unwind_seconds=0.3, task_status=task_status
            )
        )
        cancelled.cancel()
        async with slots.passage(UID):
            assert trio.current_time() - start == pytest.approx(0.3)
        assert UID not in slots  # forwards hold no slot
        nursery.cancel_scope.cancel()
