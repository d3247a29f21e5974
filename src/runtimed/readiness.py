"""The ``kruntimes.io/RuntimedReady`` Pod condition: True while the Runtime Server is healthy.

docs/design-notes.md, "runtimed heartbeat": liveness is the per-Pod Lease (renewed by
:func:`krt.kube.heartbeat.run_heartbeat`); readiness is this condition, the Pod's readiness
gate. It changes only when the local Runtime Server's ``Health`` answer changes (healthy,
unhealthy, unreachable), so a steady Pod writes nothing; it is written once at start-up so a
restarted runtimed never leaves a stale True behind. Writes are strategic-merge patches of
``pods/<name>/status`` (:func:`krt.kube.status.patch_pod_condition`), so the kubelet's
conditions are never overwritten.

:func:`readiness_condition` is pure; :class:`ReadinessLoop` does the I/O.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

import trio

from krt.api.constants import RUNTIMED_READY_POD_CONDITION
from krt.kube.clock import Clock, format_time
from krt.kube.errors import KubeError
from runtimed.runtime_client import RpcRejected, RuntimeServer, ServerUnavailable

__all__ = ["HealthState", "ReadinessLoop", "readiness_condition"]

log = logging.getLogger(__name__)

#: Seconds between Health calls.
HEALTH_PERIOD_SECONDS: Final = 1.0
#: Deadline of one Health call, seconds.
HEALTH_DEADLINE_SECONDS: Final = 2.0


@dataclass(frozen=True, slots=True)
class HealthState:
    """The Runtime Server's health as last seen.

    Attributes:
        healthy: Health answered ``healthy=true``.
        reason: ``RuntimeServerHealthy``, ``RuntimeServerUnhealthy`` or
            ``RuntimeServerUnreachable``.
        message: the server's message or the transport error.
    """

    healthy: bool
    reason: str
    message: str


def readiness_condition(state: HealthState, *, now: str) -> dict[str, Any]:
    """The Pod condition for ``state`` (``lastTransitionTime`` = ``now``, RFC 3339)."""
    return {
        "type": RUNTIMED_READY_POD_CONDITION,
        "status": "True" if state.healthy else "False",
        "reason": state.reason,
        "message": state.message[:1024],
        "lastTransitionTime": now,
    }


async def probe(server: RuntimeServer) -> HealthState:
    """Ask the Runtime Server for Health once (bounded by :data:`HEALTH_DEADLINE_SECONDS`)."""
    with trio.move_on_after(HEALTH_DEADLINE_SECONDS):
        try:
            healthy, message = await server.health()
        except (ServerUnavailable, RpcRejected) as exc:
            return HealthState(False, "RuntimeServerUnreachable", str(exc))
        if healthy:
            return HealthState(True, "RuntimeServerHealthy", message or "Runtime Server healthy")
        return HealthState(False, "RuntimeServerUnhealthy", message or "Runtime Server unhealthy")
    return HealthState(
        False,
        "RuntimeServerUnreachable",
        f"Health did not answer within {HEALTH_DEADLINE_SECONDS:g}s",
    )


PatchCondition = Callable[[dict[str, Any]], Awaitable[object]]
"""Writes one Pod condition (``patch_pod_condition`` bound to this Pod)."""


class ReadinessLoop:
    """Keeps ``RuntimedReady`` equal to the Runtime Server's health.

    Args:
        server: the local Runtime Server.
        patch: writes the condition to this Pod.
        clock: wall clock for ``lastTransitionTime``.
        period: seconds between Health calls.
        on_change: called with every new state (metrics).
    """

    def __init__(
        self,
        server: RuntimeServer,
        patch: PatchCondition,
        *,
        clock: Clock,
        period: float = HEALTH_PERIOD_SECONDS,
        on_change: Callable[[HealthState], None] | None = None,
    ) -> None:
        self._server = server
        self._patch = patch
        self._clock = clock
        self._period = period
        self._on_change = on_change
        #: The state last written to the Pod (None before the first successful write).
        self.written: HealthState | None = None
        #: The state last probed.
        self.current: HealthState | None = None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Probe every ``period`` seconds and write changes; never returns unless cancelled.

        ``started()`` after the first probe (written or not: the API may be down).
        """
        started = False
        while True:
            state = await probe(self._server)
            if state != self.current and self._on_change is not None:
                self._on_change(state)
            self.current = state
            if (
                self.written is None
                or state.healthy != self.written.healthy
                or (state.reason != self.written.reason)
            ):
                condition = readiness_condition(state, now=format_time(self._clock.now()))
                try:
                    with trio.move_on_after(HEALTH_DEADLINE_SECONDS * 2):
                        await self._patch(condition)
                        self.written = state
                        log.info(
                            "RuntimedReady=%s (%s)",
                            condition["status"],
                            state.reason,
                        )
                except KubeError as exc:
                    log.warning("cannot write RuntimedReady: %s", exc)
            if not started:
                started = True
                task_status.started()
            await trio.sleep(self._period)
