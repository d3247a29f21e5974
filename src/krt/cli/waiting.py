"""Follow one Run until a condition holds: a get, then a watch from its resourceVersion.

Used by ``krt run --wait``, ``krt function create``, ``krt wait`` and ``krt delete --wait``
(the last two through :mod:`krt.cli.deletion_waiting` when waiting for a Run to be gone).
The watch is narrowed to the one object (``fieldSelector=metadata.name=NAME``); a 410 Gone
re-reads the object and watches again, a watch the server ended is resumed from the last
resourceVersion, a broken connection is retried after a short pause. None of this has its own
deadline: callers bound it with ``trio.fail_after`` (``--timeout``).

Progress goes to stderr so stdout stays clean for outputs: a spinner on a terminal, one line
per phase change otherwise (:class:`Progress`).
"""

from __future__ import annotations

import math
import sys
from collections.abc import AsyncGenerator, Callable, Iterator
from contextlib import aclosing, contextmanager
from typing import Any, Protocol, TextIO

import trio

from krt.api.durations import format_duration
from krt.api.phases import Phase, WaitTarget, is_terminal, phase_of, wait_finished
from krt.cli.exitcodes import ExitCode
from krt.cli.failures import CommandFailed
from krt.kube.errors import ConnectionFailed, Gone, NotFound
from krt.kube.interface import KubeClient
from krt.kube.resources import RUNS

Obj = dict[str, Any]

#: Seconds to wait before re-watching after a broken connection.
RECONNECT_PAUSE = 1.0
#: Seconds between spinner frames.
SPINNER_PERIOD = 0.1
SPINNER_FRAMES = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"


class RunDeleted(CommandFailed):
    """The Run was deleted while being watched (exit code: not found)."""

    def __init__(self, message: str) -> None:
        super().__init__(ExitCode.NOT_FOUND, message)


async def follow_run(
    kube: KubeClient, namespace: str, name: str, *, notices: TextIO | None = None
) -> AsyncGenerator[Obj, None]:
    """Yield the Run now and after every change, until the caller stops iterating.

    While the API server cannot be reached the watch is retried every
    :data:`RECONNECT_PAUSE` seconds; one line on ``notices`` says so when the connection is
    lost, another when the watch is back, so a wait that seems stuck explains itself.

    Args:
        kube: a connected client.
        namespace: the Run's namespace.
        name: the Run's name.
        notices: where the connection notices go (default: stderr).

    Yields:
        The Run object (first the current state, then each ADDED/MODIFIED version).

    Raises:
        NotFound: the Run does not exist when first read.
        RunDeleted: the Run was deleted afterwards.
        ApiError: other API errors (401, 403, ...).
    """
    obj = await kube.get(RUNS, name, namespace)
    yield obj
    version = str(obj["metadata"].get("resourceVersion") or "")
    selector = f"metadata.name={name}"
    lost = False
    while True:
        try:
            async with aclosing(
                kube.watch(RUNS, namespace, version, field_selector=selector)
            ) as events:
                async for kind, event_obj in events:
                    if lost:
                        lost = False
                        _notice(notices, "krt: reconnected to the API server")
                    version = str(event_obj["metadata"].get("resourceVersion") or version)
                    if kind == "BOOKMARK":
                        continue
                    if kind == "DELETED":
                        raise RunDeleted(f"Run {namespace}/{name} was deleted")
                    yield event_obj
        except Gone:
            # the server answered (e.g. restarted, its history too young for our version)
            try:
                obj = await kube.get(RUNS, name, namespace)
            except NotFound:
                raise RunDeleted(f"Run {namespace}/{name} was deleted") from None
            if lost:
                lost = False
                _notice(notices, "krt: reconnected to the API server")
            version = str(obj["metadata"].get("resourceVersion") or "")
            yield obj
        except ConnectionFailed as exc:
            if not lost:
                lost = True
                _notice(
                    notices,
                    f"krt: lost the connection to the API server ({exc}); "
                    f"retrying every {format_duration(RECONNECT_PAUSE)}",
                )
            await trio.sleep(RECONNECT_PAUSE)


def _notice(stream: TextIO | None, message: str) -> None:
    """One line on ``stream`` (stderr when None), flushed at once."""
    out = sys.stderr if stream is None else stream
    print(message, file=out, flush=True)


class Summarizes(Protocol):
    """A waiting display that can say where the wait stands (for the timeout message)."""

    def summary(self) -> str:
        """One line on why the wait has not ended, or ``""`` when nothing is known yet."""
        ...


@contextmanager
def time_limit(
    seconds: float | None, what: str, *, progress: Summarizes | None = None
) -> Iterator[None]:
    """Bound the block to ``seconds`` (None: no bound); expiry is a :class:`CommandFailed`.

    Args:
        seconds: the limit (a command's ``--timeout``), or None.
        what: the message start for the timeout, e.g. ``Run x did not finish``.
        progress: the waiting display (:class:`Progress`, or a deletion wait's); its
            :meth:`~Summarizes.summary` says where the Run is stuck (:func:`stuck_summary`),
            so the message tells why and what to do.

    Raises:
        CommandFailed: exit code 7 when the time is up.
    """
    with trio.move_on_after(math.inf if seconds is None else seconds) as scope:
        yield
    if scope.cancelled_caught:
        assert seconds is not None
        message = f"{what} within {format_duration(seconds)}"
        summary = progress.summary() if progress is not None else ""
        if summary:
            message += f"; {summary}"
        raise CommandFailed(ExitCode.TIMED_OUT, message)


#: What to do about a Run that stays Pending, by reason (docs/troubleshooting.md).
PENDING_ADVICE = {
    "InsufficientCapacity": (
        "every ready Pod of Runtime {runtime} is full (Ready functions hold their capacity): "
        "krt delete Runs you no longer need (krt get -n {namespace}), or add Pods: "
        "kubectl scale runtime {runtime} -n {namespace} --replicas=N"
    ),
    "NoReadyPod": (
        "Runtime {runtime} has no ready Pod: kubectl get pods -n {namespace} "
        "-l kruntimes.io/runtime={runtime}"
    ),
    "RuntimeNotFound": "there is no Runtime {runtime} in namespace {namespace}: "
    "krt runtime list -n {namespace}",
}


def _reason_and_message(status: Obj) -> tuple[str, str]:
    """``status.reason``/``message``, else the first False condition's reason and message."""
    reason, message = str(status.get("reason") or ""), str(status.get("message") or "")
    if not reason:
        for condition in status.get("conditions") or []:
            if condition.get("status") == "False" and condition.get("reason"):
                return str(condition["reason"]), message or str(condition.get("message") or "")
    return reason, message


def pending_advice(obj: Obj) -> str:
    """What to do about a Pending Run whose reason is in :data:`PENDING_ADVICE`, else ``""``."""
    status = obj.get("status") or {}
    if phase_of(status.get("phase")) is not Phase.PENDING:
        return ""
    reason, _ = _reason_and_message(status)
    advice = PENDING_ADVICE.get(reason)
    if advice is None:
        return ""
    runtime = str((obj.get("spec") or {}).get("runtime") or "NAME")
    namespace = str((obj.get("metadata") or {}).get("namespace") or "default")
    return advice.format(runtime=runtime, namespace=namespace)


def stuck_summary(obj: Obj) -> str:
    """Where a Run that did not get there in time is: phase, reason, message, advice.

    Args:
        obj: the last version of the Run seen.

    Returns:
        One line, e.g. ``still Pending (InsufficientCapacity: no ready Pod ...): every ready
        Pod of Runtime python is full ...; see krt describe NAME``.
    """
    status = obj.get("status") or {}
    name = (obj.get("metadata") or {}).get("name", "")
    phase = phase_of(status.get("phase"))
    why = ": ".join(part for part in _reason_and_message(status) if part)
    text = f"still {phase.value}" + (f" ({why})" if why else "")
    advice = pending_advice(obj)
    if advice:
        text += f": {advice}"
    return f"{text}; see krt describe {name}"


def target_reached(obj: Obj, target: WaitTarget) -> bool:
    """True when a wait for ``target`` can stop at this version of the Run."""
    phase = phase_of((obj.get("status") or {}).get("phase"))
    return wait_finished(phase, target)


async def wait_for_run(
    kube: KubeClient,
    namespace: str,
    name: str,
    done: Callable[[Obj], bool],
    *,
    on_change: Callable[[Obj], None] | None = None,
) -> Obj:
    """Wait until ``done(run)`` holds and return that version of the Run.

    Args:
        kube: a connected client.
        namespace: the Run's namespace.
        name: the Run's name.
        done: the condition, evaluated on every version.
        on_change: called with every version seen (progress display).

    Raises:
        NotFound: no such Run. RunDeleted: deleted while waiting.
    """
    async with aclosing(follow_run(kube, namespace, name)) as versions:
        async for obj in versions:
            if on_change is not None:
                on_change(obj)
            if done(obj):
                return obj
    raise RunDeleted(f"Run {namespace}/{name} was deleted")  # pragma: no cover


def describe_progress(obj: Obj) -> str:
    """One short line: ``Running (attempt 2, pod runtime-python-abc)`` or the reason."""
    status = obj.get("status") or {}
    phase = phase_of(status.get("phase"))
    details = []
    if status.get("attempt"):
        details.append(f"attempt {status['attempt']}")
    if status.get("assignedPod"):
        details.append(f"pod {status['assignedPod']}")
    if status.get("reason") and (phase in (Phase.PENDING,) or is_terminal(phase)):
        details.append(str(status["reason"]))
    else:
        for condition in status.get("conditions") or []:
            if condition.get("status") == "False" and condition.get("reason"):
                details.append(str(condition["reason"]))
                break
    return f"{phase.value} ({', '.join(details)})" if details else phase.value


class SpinnerLine:
    """One spinner line on a terminal stream: drawn over itself, erased before other output.

    Args:
        stream: where to write.
        tty: whether ``stream`` is a terminal (off a terminal nothing is drawn).
    """

    def __init__(self, stream: TextIO, *, tty: bool) -> None:
        self.stream = stream
        self.tty = tty
        self._drawn = False

    def draw(self, text: str) -> None:
        """Replace the line with ``text`` (terminal only)."""
        if self.tty:
            self.stream.write(f"\r\x1b[2K{text}")
            self.stream.flush()
            self._drawn = True

    def clear(self) -> None:
        """Erase the line if drawn (terminal only)."""
        if self.tty and self._drawn:
            self.stream.write("\r\x1b[2K")
            self.stream.flush()
            self._drawn = False


class Progress:
    """Shows a Run's progress on ``stream`` (default stderr).

    On a terminal, a spinner line redrawn every 0.1 s (:meth:`spin` runs it); otherwise one
    line per change of :func:`describe_progress`. Either way, when the Run is Pending for a
    reason with advice (:data:`PENDING_ADVICE`, e.g. the pool is full), one line says what
    would unblock it, once per reason; :attr:`last` keeps the latest version for the
    timeout message (:func:`time_limit`).

    Args:
        name: the Run name shown.
        stream: where to write.
        tty: force terminal mode on or off (default: ``stream.isatty()``).
    """

    def __init__(self, name: str, *, stream: TextIO | None = None, tty: bool | None = None) -> None:
        self.name = name
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.text = "waiting"
        self.last: Obj | None = None
        self._last_line = ""
        self._advised = ""
        self._line = SpinnerLine(self.stream, tty=self.tty)

    def summary(self) -> str:
        """Where the Run is stuck (:func:`stuck_summary` of the last version), or ``""``."""
        return stuck_summary(self.last) if self.last is not None else ""

    def update(self, obj: Obj) -> None:
        """Record a new version of the Run (prints a line when not on a terminal)."""
        self.last = obj
        self.text = describe_progress(obj)
        if not self.tty and self.text != self._last_line:
            self._last_line = self.text
            self.stream.write(f"{self.name}: {self.text}\n")
            self.stream.flush()
        advice = pending_advice(obj)
        if advice and advice != self._advised:
            # Once per reason: a Run can stay Pending for long, so say what would unblock it.
            self._advised = advice
            self.clear()
            self.stream.write(f"{self.name}: {advice}\n")
            self.stream.flush()

    async def spin(self) -> None:
        """Redraw the spinner until cancelled (returns at once when not on a terminal)."""
        if not self.tty:
            return
        start = trio.current_time()
        frame = 0
        try:
            while True:
                elapsed = int(round(trio.current_time() - start, 3))
                char = SPINNER_FRAMES[frame % len(SPINNER_FRAMES)]
                self._line.draw(f"{char} {self.name}: {self.text} [{elapsed}s]")
                frame += 1
                await trio.sleep(SPINNER_PERIOD)
        finally:
            self.clear()

    def clear(self) -> None:
        """Erase the spinner line (terminal only)."""
        self._line.clear()


async def wait_with_progress(
    kube: KubeClient,
    namespace: str,
    name: str,
    done: Callable[[Obj], bool],
    progress: Progress,
) -> Obj:
    """:func:`wait_for_run` while ``progress`` shows each version (spinner on a TTY).

    Errors of the wait are raised as they are (not wrapped in an exception group).
    """
    result: Obj | None = None
    error: Exception | None = None
    async with trio.open_nursery() as nursery:
        nursery.start_soon(progress.spin)
        try:
            result = await wait_for_run(kube, namespace, name, done, on_change=progress.update)
        except Exception as exc:  # re-raised below, outside the nursery
            error = exc
        finally:
            nursery.cancel_scope.cancel()
    if error is not None:
        raise error
    assert result is not None
    return result
