"""The per-Run idle/health poller of a Ready function Run (seed 000, Lifecycle State Machine).

One poller per registration, started by the lifecycle in its own cancel scope (cancelling
the scope stops exactly this Run's polling). Every period it calls FunctionStatus and asks
:func:`judge`:

* READY with ``in_flight == 0`` and ``idleTimeoutSeconds`` elapsed since the server's
  ``last_activity_unix_nano`` -> :attr:`Verdict.IDLE` ("expires one registration epoch
  after no completed or in-flight invocation activity"). An invocation in flight never
  expires, however long it runs. The server owns the activity clock (it is not written to
  Kubernetes per invoke), so a runtimed restart does not reset it;
* FAILED -> :attr:`Verdict.FAILED` (the fatal error is kept); NOT_FOUND (the Runtime Server
  restarted), STALE or DRAINING that runtimed did not ask for -> :attr:`Verdict.LOST`;
* anything else (READY and active, REGISTERING, no answer) -> keep polling.

The period is ``clamp(idleTimeoutSeconds / 4, poll_min, poll_max)`` (0.5 s to 5 s by
default): an idle Run ends at most a quarter of its idle timeout late, and a Ready Run costs
one small loopback RPC every few seconds. The poller only records and enqueues; the
reconcile writes status.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

import trio

from krt.kube.clock import Clock
from runtimed.functions.client import FunctionServer, FunctionView, RegState
from runtimed.functions.settings import FunctionTimings
from runtimed.runtime_client import RpcRejected
from runtimed.server_channel import ServerUnavailable

__all__ = ["PollResult", "Verdict", "judge", "poll_registration"]

log = logging.getLogger(__name__)


class Verdict(StrEnum):
    """What one FunctionStatus answer means for the Run."""

    OK = "ok"
    IDLE = "idle"
    FAILED = "failed"
    LOST = "lost"


@dataclass(frozen=True, slots=True)
class PollResult:
    """A verdict with its detail (the fatal error, or how long the Run was idle)."""

    verdict: Verdict
    detail: str = ""


def judge(
    view: FunctionView, *, idle_timeout_seconds: int | None, now_unix_nano: int
) -> PollResult:
    """Classify one FunctionStatus answer (pure; see the module docstring).

    Args:
        view: the answer.
        idle_timeout_seconds: ``mode.function.idleTimeoutSeconds`` (``None``/0: no idle limit).
        now_unix_nano: the wall clock, nanoseconds since the epoch.
    """
    if view.state is RegState.FAILED:
        return PollResult(Verdict.FAILED, view.fatal_error or "the registration failed")
    if view.state is RegState.NOT_FOUND:
        return PollResult(Verdict.LOST, "the Runtime Server no longer holds the registration")
    if view.state in (RegState.STALE, RegState.DRAINING):
        detail = view.fatal_error or f"the registration is {view.state.value.lower()}"
        return PollResult(Verdict.LOST, detail)
    if view.state is not RegState.READY or view.in_flight > 0 or not idle_timeout_seconds:
        return PollResult(Verdict.OK)
    if view.last_activity_unix_nano <= 0:
        return PollResult(Verdict.OK)
    idle_ns = now_unix_nano - view.last_activity_unix_nano
    if idle_ns >= idle_timeout_seconds * 1_000_000_000:
        return PollResult(Verdict.IDLE, f"idle for {idle_ns / 1e9:.1f}s")
    return PollResult(Verdict.OK)


async def poll_registration(
    server: FunctionServer,
    *,
    run_uid: str,
    registration_id: str,
    idle_timeout_seconds: int | None,
    clock: Clock,
    timings: FunctionTimings,
    report: Callable[[PollResult], None],
) -> PollResult:
    """Poll one registration until it expires, fails or is lost; then report and return.

    Never returns otherwise (cancel the caller's scope to stop it). Each call is bounded by
    ``timings.rpc`` seconds; no answer just means "poll again".

    Args:
        server: the Runtime Server.
        run_uid: the Run UID.
        registration_id: the registration to watch.
        idle_timeout_seconds: the Run's idle timeout, or ``None``.
        clock: the wall clock (compared with ``last_activity_unix_nano``).
        timings: ``poll_min``/``poll_max``/``rpc``.
        report: called once with the final result (synchronous; it records and enqueues).

    Returns:
        The non-OK result that ended polling.
    """
    period = timings.poll_period(idle_timeout_seconds)
    fields = {"run_uid": run_uid, "registration_id": registration_id}
    while True:
        await trio.sleep(period)
        view: FunctionView | None = None
        with trio.move_on_after(timings.rpc):
            try:
                view = await server.status(run_uid, registration_id)
            except (ServerUnavailable, RpcRejected) as exc:
                log.info("FunctionStatus failed: %s", exc, extra=fields)
        if view is None:
            continue
        now_ns = int(clock.now().timestamp() * 1_000_000_000)
        result = judge(view, idle_timeout_seconds=idle_timeout_seconds, now_unix_nano=now_ns)
        if result.verdict is not Verdict.OK:
            log.info("registration %s: %s", result.verdict.value, result.detail, extra=fields)
            report(result)
            return result
