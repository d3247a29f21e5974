"""Waiting for several Runs at once, until each is terminal (``krt cancel a b --wait``).

Each Run is followed by its own task (:func:`krt.cli.waiting.wait_for_run`, a get then a
watch) in one nursery, so the Runs are waited for together: a Run that ends early is
reported as it ends, not after the ones named before it. A Run deleted while waited for is
reported on stderr (``error: Run ns/x was deleted``, exit 3 at the end, as kubectl reports a
missing name) and the others are still waited for; any other error ends the whole wait.

There is no deadline here: the caller bounds the wait (``trio.move_on_after`` for
``--timeout``) and words the timeout with :meth:`GroupProgress.timeout_message`, which names
the Runs still not terminal and where each one is stuck.

Progress goes to stderr as the single-Run wait shows it (:class:`krt.cli.waiting.Progress`):
off a terminal, one ``NAME: PHASE (...)`` line per change of each Run; on a terminal, one
spinner line for all the Runs still waited for. Either way a Run Pending for a reason with
advice gets its advice line once per reason.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable, Sequence
from typing import Any, TextIO

import trio

from krt.api.durations import format_duration
from krt.api.phases import is_terminal, phase_of
from krt.cli.failures import CommandFailed, report
from krt.cli.waiting import (
    SPINNER_FRAMES,
    SPINNER_PERIOD,
    Progress,
    RunDeleted,
    SpinnerLine,
    stuck_summary,
    wait_for_run,
)
from krt.kube.errors import NotFound
from krt.kube.interface import KubeClient

__all__ = ["GroupProgress", "wait_until_terminal"]

Obj = dict[str, Any]


def _terminal(obj: Obj) -> bool:
    return is_terminal(phase_of((obj.get("status") or {}).get("phase")))


class GroupProgress:
    """Shows the progress of several Runs waited for together, on ``stream`` (default stderr).

    One :class:`~krt.cli.waiting.Progress` per Run keeps its last version and prints its
    lines off a terminal; on a terminal this class draws one spinner line for the Runs
    still waited for (:meth:`spin`), cut to the terminal's width.

    Args:
        names: the Runs, in the order given on the command line (at least one).
        stream: where to write.
        tty: force terminal mode on or off (default: ``stream.isatty()``).
    """

    def __init__(
        self, names: Sequence[str], *, stream: TextIO | None = None, tty: bool | None = None
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.runs = {name: Progress(name, stream=self.stream, tty=self.tty) for name in names}
        #: The Runs not terminal yet (and not deleted), in the order given.
        self.waiting = list(self.runs)
        self._frame = 0
        self._elapsed = 0
        self._spinning = False
        self._line = SpinnerLine(self.stream, tty=self.tty)

    def update(self, name: str, obj: Obj) -> None:
        """Record a new version of Run ``name`` (a line off a terminal, a redraw on one)."""
        self.clear()
        self.runs[name].update(obj)
        self._draw()

    def finished(self, name: str) -> None:
        """Run ``name`` is no longer waited for: erase the spinner so a line can be printed.

        The spinner comes back (without ``name``) at its next frame.
        """
        if name in self.waiting:
            self.waiting.remove(name)
        self.clear()

    def line(self) -> str:
        """The spinner's text without the frame: ``a: Running (attempt 1); b: Pending``."""
        return "; ".join(f"{name}: {self.runs[name].text}" for name in self.waiting)

    async def spin(self) -> None:
        """Redraw the spinner until cancelled (returns at once when not on a terminal)."""
        if not self.tty:
            return
        start = trio.current_time()
        self._spinning = True
        try:
            while True:
                self._elapsed = int(round(trio.current_time() - start, 3))
                self._draw()
                self._frame += 1
                await trio.sleep(SPINNER_PERIOD)
        finally:
            self._spinning = False
            self.clear()

    def clear(self) -> None:
        """Erase the spinner line (terminal only)."""
        self._line.clear()

    def timeout_message(self, seconds: float) -> str:
        """The ``--timeout`` message: the Runs still not terminal and where each one is.

        Args:
            seconds: the timeout that expired.

        Returns:
            For one Run, as the single-Run wait words it: ``Run a did not finish within 1m;
            still Running (attempt 1, pod p); see krt describe a``. For several: ``Runs a, b
            did not finish within 1m: a still Running (...); b still Pending (...): advice;
            see krt describe a b``.
        """
        left = self.waiting
        within = format_duration(seconds)
        if len(left) == 1:
            summary = self.runs[left[0]].summary()
            return f"Run {left[0]} did not finish within {within}" + (
                f"; {summary}" if summary else ""
            )
        parts = []
        for name in left:
            last = self.runs[name].last
            if last is None:
                parts.append(f"{name} not read yet")
            else:
                # stuck_summary ends with its own "; see krt describe NAME": one for all below
                where = stuck_summary(last).removesuffix(f"; see krt describe {name}")
                parts.append(f"{name} {where}")
        return (
            f"Runs {', '.join(left)} did not finish within {within}: {'; '.join(parts)}; "
            f"see krt describe {' '.join(left)}"
        )

    def _draw(self) -> None:
        if not (self.tty and self._spinning and self.waiting):
            return
        char = SPINNER_FRAMES[self._frame % len(SPINNER_FRAMES)]
        text = f"{char} {self.line()} [{self._elapsed}s]"
        width = shutil.get_terminal_size().columns - 1  # the last column would wrap
        if len(text) > width > 3:
            text = text[: width - 3] + "..."
        self._line.draw(text)


async def wait_until_terminal(
    kube: KubeClient,
    namespace: str,
    progress: GroupProgress,
    on_final: Callable[[Obj], None],
) -> list[CommandFailed]:
    """Wait, together, until every Run of ``progress.waiting`` is terminal (or deleted).

    Never returns before that: bound it with ``trio.move_on_after`` and word the expiry
    with :meth:`GroupProgress.timeout_message`.

    Args:
        kube: a connected client.
        namespace: the Runs' namespace.
        progress: the display; its ``waiting`` names the Runs (they leave it as they end).
        on_final: called with each Run's terminal version as it ends (prints its line).

    Returns:
        One exit-3 failure per Run deleted while waited for, or already gone when first
        read (each already reported on
        stderr as it happened), in the order met; empty when every Run ended.

    Raises:
        ApiError, ConnectionFailed: as :func:`krt.cli.waiting.follow_run`; the other waits
            are cancelled.
    """
    failures: list[CommandFailed] = []

    def gone(name: str, failure: CommandFailed) -> None:
        progress.finished(name)
        failures.append(failure)
        report(failure)

    async def follow(name: str) -> None:
        try:
            final = await wait_for_run(
                kube, namespace, name, _terminal, on_change=lambda obj: progress.update(name, obj)
            )
        except NotFound as exc:
            if exc.details.get("name") not in (None, name):
                raise  # not this Run's own 404 (e.g. the Run resource is not served)
            gone(name, RunDeleted(f"Run {namespace}/{name} was deleted"))
            return
        except RunDeleted as exc:
            gone(name, exc)
            return
        progress.finished(name)
        on_final(final)

    async with trio.open_nursery() as display:
        display.start_soon(progress.spin)
        async with trio.open_nursery() as waits:
            for name in list(progress.waiting):
                waits.start_soon(follow, name)
        display.cancel_scope.cancel()
    return failures
