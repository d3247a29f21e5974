"""Waiting until a Run is gone, and saying what holds it when that takes a while.

``krt delete --wait`` and ``krt wait --for delete`` (docs/cli.md: "0 when gone"). A task Run
without finalizers is gone as soon as it is deleted. A function Run carries the
``kruntimes.io/registration-cleanup`` finalizer (seed 000, Cleanup and Finalization): the
runtimed of its assigned Pod stops invokes, unregisters the function and then removes the
finalizer; if that Pod is gone, the control plane's stale-Run recovery removes it once the
old assignment is fenced. When that runtimed is paused, crash-looping or partitioned the
object stays, so a wait that would otherwise sit silent says, after
:data:`STALL_NOTICE_SECONDS`, which finalizer and which Pod it is waiting for (one stderr line,
again whenever that changes), and the ``--timeout`` message repeats it, like the other
waits' progress lines (:mod:`krt.cli.waiting`).

The decision of what to say is a pure function of the last version seen
(:func:`deletion_blocker`); :func:`wait_until_gone` is the trio part.
"""

from __future__ import annotations

import sys
from contextlib import aclosing
from typing import Any, Final, TextIO

import trio

from krt.api.constants import REGISTRATION_CLEANUP_FINALIZER
from krt.cli.waiting import RunDeleted, follow_run
from krt.kube.errors import NotFound
from krt.kube.interface import KubeClient

__all__ = ["STALL_NOTICE_SECONDS", "DeletionProgress", "deletion_blocker", "wait_until_gone"]

Obj = dict[str, Any]

#: Seconds a deletion may take before the wait says what holds the Run (a function's
#: cleanup normally takes well under a second; a line for every quick delete would be noise).
STALL_NOTICE_SECONDS: Final = 2.0


def deletion_blocker(obj: Obj) -> str:
    """What keeps this version of a Run from being gone, in words; ``""`` when nothing does.

    Args:
        obj: the Run as last read.

    Returns:
        E.g. ``runtimed on Pod runtime-python-abc has not unregistered the function yet
        (finalizer kruntimes.io/registration-cleanup; check: krt logs fh --runtimed, kubectl
        get pod runtime-python-abc)``; for a Run nobody has deleted, ``it is not being
        deleted (no deletionTimestamp): krt delete NAME``; other controllers' finalizers are
        named as such.
    """
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    name = str(meta.get("name") or "NAME")
    namespace = str(meta.get("namespace") or "")
    if not meta.get("deletionTimestamp"):
        return f"it is not being deleted (no deletionTimestamp): krt delete {name}"
    finalizers = [str(item) for item in meta.get("finalizers") or []]
    parts: list[str] = []
    if REGISTRATION_CLEANUP_FINALIZER in finalizers:
        pod = str(status.get("assignedPod") or "")
        ns_flag = f" -n {namespace}" if namespace else ""
        if pod:
            parts.append(
                f"runtimed on Pod {pod} has not unregistered the function yet (finalizer "
                f"{REGISTRATION_CLEANUP_FINALIZER}; check: krt logs {name} --runtimed, "
                f"kubectl get pod {pod}{ns_flag})"
            )
        else:
            parts.append(
                f"finalizer {REGISTRATION_CLEANUP_FINALIZER} is still set and no Pod is "
                "assigned: the control plane removes it once the old assignment is fenced "
                "(check the control plane's log)"
            )
    others = [item for item in finalizers if item != REGISTRATION_CLEANUP_FINALIZER]
    if others:
        parts.append(
            f"finalizer{'s' if len(others) > 1 else ''} {', '.join(others)} "
            "(not kruntimes': the controller that added it must remove it)"
        )
    return "; ".join(parts)


class DeletionProgress:
    """The stderr lines of a deletion wait: quiet at first, then what holds the Run.

    Args:
        name: the Run name shown at the start of each line.
        stream: where to write (default stderr).
    """

    def __init__(self, name: str, *, stream: TextIO | None = None) -> None:
        self.name = name
        self.stream = stream if stream is not None else sys.stderr
        self.last: Obj | None = None
        self.stalled = False
        self._said = ""

    def update(self, obj: Obj) -> None:
        """Record a new version of the Run (a line when the wait has stalled and it changed)."""
        self.last = obj
        if self.stalled:
            self._say()

    def stall(self) -> None:
        """The deletion is taking long: say what holds the Run, from now on at each change."""
        self.stalled = True
        self._say()

    def summary(self) -> str:
        """Where the deletion stands, for the ``--timeout`` message (``""`` if unknown)."""
        if self.last is None:
            return ""
        blocker = deletion_blocker(self.last)
        return f"waiting for: {blocker}" if blocker else ""

    def _say(self) -> None:
        blocker = deletion_blocker(self.last) if self.last is not None else ""
        if blocker and blocker != self._said:
            self._said = blocker
            self.stream.write(f"{self.name}: still there; waiting for: {blocker}\n")
            self.stream.flush()


async def wait_until_gone(
    kube: KubeClient, namespace: str, name: str, progress: DeletionProgress
) -> None:
    """Return once the Run does not exist (at once if it never did; finalizers done).

    Never returns otherwise: callers bound it with ``trio.fail_after`` /
    :func:`krt.cli.waiting.time_limit` (``--timeout``).

    Args:
        kube: a connected client.
        namespace: the Run's namespace.
        name: the Run's name.
        progress: shows what holds the Run once :data:`STALL_NOTICE_SECONDS` have passed.

    Raises:
        ApiError, ConnectionFailed: as :func:`krt.cli.waiting.follow_run` (a 404 for the
            Run itself is success, not an error).
    """

    async def notice_when_stalled() -> None:
        await trio.sleep(STALL_NOTICE_SECONDS)
        progress.stall()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(notice_when_stalled)
        try:
            async with aclosing(follow_run(kube, namespace, name)) as versions:
                async for obj in versions:
                    progress.update(obj)
        except RunDeleted:
            pass
        except NotFound as exc:
            if exc.details.get("name") not in (None, name):
                raise  # not this Run's own 404 (e.g. the Run resource is not served)
        finally:
            nursery.cancel_scope.cancel()
