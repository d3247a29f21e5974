"""A write gate for the control plane's Events: open once its Runs have been quiet a moment.

Issue 6 (a burst's latency): the scheduler's ``Scheduled`` Event is one API write per Run,
as many as its binds. Written at once, those Events queue at the API server between the
binds, runtimed's claims and completions of the same burst. :class:`RunsQuiet` (a
:class:`krt.kube.events.WriteGate`) holds them back while Run events keep arriving and lets
them through once none has arrived for :data:`QUIET_SECONDS`; the
:class:`~krt.kube.events.EventRecorder` bounds the wait (its ``max_delay_seconds``), so no
Event waits long and none is dropped for it.
"""

from __future__ import annotations

import math

import trio

from krt.kube.informer import EventType, InformerEvent

#: How long the Runs must have been quiet for the gate to open (seconds).
QUIET_SECONDS = 0.05


class RunsQuiet:
    """Open once no Run event (other than a periodic RESYNC) arrived for ``quiet_seconds``.

    Register :meth:`on_run` as a Runs informer handler. Not thread-safe (one trio run).

    Args:
        quiet_seconds: the quiet period, seconds (>= 0).

    Raises:
        ValueError: a negative or NaN ``quiet_seconds``.
    """

    def __init__(self, *, quiet_seconds: float = QUIET_SECONDS) -> None:
        if not quiet_seconds >= 0:
            raise ValueError(f"quiet_seconds must be >= 0, got {quiet_seconds}")
        self._quiet = quiet_seconds
        self._opens_at = -math.inf

    def on_run(self, event: InformerEvent) -> None:
        """Informer handler: a Run changed now; the gate opens ``quiet_seconds`` from now.

        Only a timestamp is stored (this runs on every Run event); a waiter finds out when
        its sleep ends.
        """
        if event.type is not EventType.RESYNC:
            self._opens_at = trio.current_time() + self._quiet

    async def wait_open(self) -> None:
        """Return once the Runs have been quiet for the quiet period (at once if they are).

        Sleeps until the opening time known so far, then looks again: at most one wake-up
        per quiet period while Runs keep changing.
        """
        # the condition is a time that moves; there is no event to wait for
        while self._opens_at > trio.current_time():  # noqa: ASYNC110
            await trio.sleep_until(self._opens_at)
