"""The idle/health poller (seed 000: idle timeout from the server's last activity, never while
an invocation is in flight; FAILED/NOT_FOUND mean not ready)."""

from __future__ import annotations

import trio
from fn_builders import NOW
from fn_fakes import FakeFunctionServer

from krt.kube.clock import TrioLinkedClock
from runtimed.functions.client import FunctionView, RegisterSpec, RegState
from runtimed.functions.idle import PollResult, Verdict, judge, poll_registration
from runtimed.functions.settings import FunctionTimings

S = 1_000_000_000


def test_judge() -> None:
    ready = FunctionView(RegState.READY, 0, 100 * S)
    assert judge(ready, idle_timeout_seconds=10, now_unix_nano=109 * S).verdict is Verdict.OK
    assert judge(ready, idle_timeout_seconds=10, now_unix_nano=110 * S).verdict is Verdict.IDLE
    busy = FunctionView(RegState.READY, 1, 100 * S)
    assert judge(busy, idle_timeout_seconds=10, now_unix_nano=10_000 * S).verdict is Verdict.OK
    assert judge(ready, idle_timeout_seconds=None, now_unix_nano=10_000 * S).verdict is Verdict.OK
    failed = judge(
        FunctionView(RegState.FAILED, fatal_error="boom"), idle_timeout_seconds=1, now_unix_nano=0
    )
    assert failed == PollResult(Verdict.FAILED, "boom")
    assert (
        judge(FunctionView(RegState.NOT_FOUND), idle_timeout_seconds=1, now_unix_nano=0).verdict
        is Verdict.LOST
    )
    assert (
        judge(FunctionView(RegState.STALE), idle_timeout_seconds=1, now_unix_nano=0).verdict
        is Verdict.LOST
    )


def test_poll_period_is_bounded() -> None:
    timings = FunctionTimings()
    assert timings.poll_period(2) == 0.5
    assert timings.poll_period(8) == 2.0
    assert timings.poll_period(600) == 5.0
    assert timings.poll_period(None) == 5.0


async def _register(server: FakeFunctionServer) -> str:
    return await server.register(RegisterSpec("u1", 1, "/w", "main.invoke", digest="d" * 64))


async def test_idle_fires_after_the_idle_period_without_invocations(
    autojump_clock: trio.abc.Clock,
) -> None:
    clock = TrioLinkedClock(NOW)
    server = FakeFunctionServer(clock)
    rid = await _register(server)
    results: list[PollResult] = []
    start = trio.current_time()
    result = await poll_registration(
        server,
        run_uid="u1",
        registration_id=rid,
        idle_timeout_seconds=10,
        clock=clock,
        timings=FunctionTimings(),
        report=results.append,
    )
    elapsed = trio.current_time() - start
    assert result.verdict is Verdict.IDLE
    assert results == [result]
    assert 10 <= elapsed <= 10 + 2.5  # period idle/4


async def test_idle_never_fires_while_an_invocation_is_in_flight(
    autojump_clock: trio.abc.Clock,
) -> None:
    clock = TrioLinkedClock(NOW)
    server = FakeFunctionServer(clock)
    rid = await _register(server)
    results: list[PollResult] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(server.invoke, "u1", 100.0)  # a long invocation: 10x the idle timeout
        start = trio.current_time()
        result = await poll_registration(
            server,
            run_uid="u1",
            registration_id=rid,
            idle_timeout_seconds=10,
            clock=clock,
            timings=FunctionTimings(),
            report=results.append,
        )
        elapsed = trio.current_time() - start
    assert result.verdict is Verdict.IDLE
    # it ended at 100 s; idle counts from the end of the invocation
    assert 110 <= elapsed <= 112.5


async def test_loss_and_failure_end_polling(autojump_clock: trio.abc.Clock) -> None:
    clock = TrioLinkedClock(NOW)
    server = FakeFunctionServer(clock)
    rid = await _register(server)

    async def lose_later() -> None:
        await trio.sleep(3)
        server.lose_all()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(lose_later)
        result = await poll_registration(
            server,
            run_uid="u1",
            registration_id=rid,
            idle_timeout_seconds=None,
            clock=clock,
            timings=FunctionTimings(poll_max=1.0),
            report=lambda r: None,
        )
    assert result.verdict is Verdict.LOST
    rid = await _register(server)
    server.fail("u1", "worker crashed: exit 1")
    result = await poll_registration(
        server,
        run_uid="u1",
        registration_id=rid,
        idle_timeout_seconds=None,
        clock=clock,
        timings=FunctionTimings(poll_max=1.0),
        report=lambda r: None,
    )
    assert result == PollResult(Verdict.FAILED, "worker crashed: exit 1")


async def test_unreachable_server_keeps_polling(autojump_clock: trio.abc.Clock) -> None:
    clock = TrioLinkedClock(NOW)
    server = FakeFunctionServer(clock)
    rid = await _register(server)
    server.down = True
    with trio.move_on_after(60) as scope:
        await poll_registration(
            server,
            run_uid="u1",
            registration_id=rid,
            idle_timeout_seconds=None,
            clock=clock,
            timings=FunctionTimings(poll_max=1.0),
            report=lambda r: None,
        )
    assert scope.cancelled_caught
