"""Durable markers: "an Execute for attempt N of Run UID was sent" (seed 003, ExecutionLost).

Seed 003: once an execution has been observed, a later Runtime Server NOT_FOUND is an
``ExecutionLost`` failure, not a reason to start. runtimed keeps that observation in memory
(:class:`~runtimed.task_decisions.LocalView`), so when runtimed *and* its Runtime Server
restart together (both containers killed, ``krt dev down``/``up``, a node agent restart) the
new runtimed sees a Running Run, no observation and NOT_FOUND, and would start the same
attempt a second time without anyone noticing. A marker on disk keeps the one fact that
tells the two cases apart across the restart.

The marker is an empty file ``<workspace>/execute-markers/<run-uid>.<attempt>``:

* created by the start worker *before* Execute is sent, because an Execute whose answer was
  lost (runtimed killed while waiting) may still have started the process. The other order
  would leave a window where an execution runs with no marker. The cost is the reverse
  window: runtimed killed between the marker and the Execute leaves a marker for an attempt
  the server never received, and the restarted runtimed fails that attempt as
  ``ExecutionLost`` (retried when the retry policy allows). That is the safe answer and
  consistent with the at-least-once contract (DESIGN.md): an attempt is never run twice
  silently, and an attempt that never ran costs a retry, visibly;
* one ``open(O_CREAT)`` + ``close`` per attempt on the event loop (a bounded metadata
  operation) and one ``unlink`` when the Run's local state is dropped: measured on the
  2-core ext4 test machine under load, ~50-80 µs and ~10-15 µs of CPU (median), against
  0.5-2.8 ms for the same Run's directory and script write. The attempt is in the name, so recording attempt N+1 never
  rewrites a file in place (a process killed mid-write cannot leave a half marker), and a
  marker of an older attempt never matches a newer one: it is removed when the newer attempt
  records its own, and ignored if that removal fails;
* made without allocating an inode in the burst: :meth:`ExecuteMarkers.load` keeps
  :data:`SPARE_MARKERS` empty files in ``execute-markers.spare/`` beside it, a marker is one of
  them renamed to its name, and a cleared marker is renamed back (unlinked only when the
  spares are full). Issue 6: ext4 scans its recently deleted inodes on every inode it
  allocates, and one marker file created and one deleted per Run was ~6% of the whole
  cluster's CPU in a task burst (``perf``: ``recently_deleted`` under runtimed's
  ``open``). Only the name counts, never the content, so a spare another process tampered
  with (a link) is harmless: a rename never follows it;
* not fsynced: it only has to outlive processes (container restarts keep the page cache and
  the emptyDir), not the node, whose loss takes the Pod and its emptyDir with it;
* beside ``runs/`` and ``trash/``, outside every Run's directory, so preparation, the Run's
  working directory and its removal never touch it. (The Runtime Server container shares
  the workspace volume: private to runtimed by convention, not by permission.)

The directory is read once when the task lifecycle starts (:meth:`ExecuteMarkers.load`);
from then on the in-memory map mirrors it, so reconciliations read no file. Markers of Runs
this Pod no longer runs (deleted or reassigned while runtimed was down) are removed by the
lifecycle's sweep (:meth:`ExecuteMarkers.prune`). A directory that cannot be created,
listed or written is an error, never a silent fallback to memory: :meth:`load` fails the
start of runtimed's task lifecycle, :meth:`record` fails that attempt's start.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Final

import trio

__all__ = ["MARKERS_DIR_NAME", "ExecuteMarkerError", "ExecuteMarkers"]

log = logging.getLogger(__name__)

#: The markers' directory, under the workspace root.
MARKERS_DIR_NAME: Final = "execute-markers"
#: Empty files kept in ``<markers>/.spare`` to become markers by a rename.
SPARE_MARKERS: Final = 128
_SPARE_SUFFIX: Final = ".spare"


class ExecuteMarkerError(Exception):
    """The marker directory or a marker cannot be created, listed or written."""


def _check_uid(uid: str) -> None:
    if not uid or uid in (".", "..") or "/" in uid or "\0" in uid:
        raise ValueError(f"Run UID {uid!r} is not usable in a marker file name")


def _parse(name: str) -> tuple[str, int] | None:
    """``(uid, attempt)`` from ``<uid>.<attempt>``, or ``None`` for a foreign name."""
    uid, dot, attempt = name.rpartition(".")
    if not dot or not uid or not attempt.isdigit() or attempt.startswith("0"):
        return None
    return uid, int(attempt)


class ExecuteMarkers:
    """The durable record of sent Executes, one marker per Run UID (its latest attempt).

    Args:
        root: the markers directory (``<workspace>/execute-markers``); created by
            :meth:`load`, on the workspace's file system (an emptyDir in a Pod).
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self._dir = os.fspath(root)  # marker paths built as text: one Run costs two of them
        self._spare_dir = f"{self._dir}{_SPARE_SUFFIX}"
        self._attempts: dict[str, int] = {}
        #: names of the empty files in the spare directory
        self._spares: list[str] = []
        self._next_spare = 0

    @classmethod
    def in_workspace(cls, workspace_root: Path) -> ExecuteMarkers:
        """The markers of the workspace at ``workspace_root`` (:data:`MARKERS_DIR_NAME`)."""
        return cls(workspace_root / MARKERS_DIR_NAME)

    def attempt(self, uid: str) -> int:
        """The attempt whose Execute was last sent for Run ``uid``; 0 when none was."""
        return self._attempts.get(uid, 0)

    def uids(self) -> list[str]:
        """Run UIDs that have a marker."""
        return list(self._attempts)

    async def load(self) -> None:
        """Create the directory if missing and read the markers a previous runtimed left.

        Of several markers of one Run (a process killed between recording a newer attempt
        and removing the older marker) the highest attempt counts; the others are removed.
        Files whose names are not markers are left alone and logged.

        Raises:
            ExecuteMarkerError: the directory cannot be created or listed (names it and
                the OS error).
        """
        names = await trio.to_thread.run_sync(self._list)
        found: dict[str, int] = {}
        stale: list[str] = []
        for name in names:
            parsed = _parse(name)
            if parsed is None:
                log.warning("ignoring %s in %s: not an Execute marker", name, self.root)
                continue
            uid, attempt = parsed
            previous = found.get(uid, 0)
            if previous:
                stale.append(f"{uid}.{min(previous, attempt)}")
            found[uid] = max(previous, attempt)
        self._attempts = found
        for name in stale:
            self._unlink(name)

    def _list(self) -> list[str]:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            names = os.listdir(self.root)
        except OSError as exc:
            raise ExecuteMarkerError(
                f"cannot use the Execute marker directory {self.root}: {exc.strerror or exc}",
            ) from exc
        self._fill_spares()
        return names

    def _fill_spares(self) -> None:
        """Make the spare directory hold :data:`SPARE_MARKERS` empty files (best effort).

        Spares left by a previous runtimed are reused as they are. A spare directory that
        cannot be made or filled only costs speed: markers are then created and unlinked.
        """
        try:
            os.makedirs(self._spare_dir, mode=0o700, exist_ok=True)
            spares = [name for name in os.listdir(self._spare_dir) if name.isdigit()]
            numbers = {int(name) for name in spares}
            self._next_spare = max(numbers, default=0) + 1
            while len(spares) < SPARE_MARKERS:
                name = str(self._next_spare)
                self._next_spare += 1
                flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
                os.close(os.open(f"{self._spare_dir}/{name}", flags, 0o600))
                spares.append(name)
        except OSError as exc:
            log.warning("no spare Execute markers in %s: %s", self._spare_dir, exc)
            spares = []
        self._spares = spares

    def record(self, uid: str, attempt: int) -> None:
        """Record, durably, that Execute for ``attempt`` of Run ``uid`` is about to be sent.

        Call before sending Execute. Idempotent for the same (or an earlier) attempt. On the event loop: one
        ``open(O_CREAT)`` and ``close`` of an empty file (bounded), plus an ``unlink`` of the
        previous attempt's marker on a retry. The directory is not recreated when missing:
        its loss is reported, not papered over.

        Args:
            uid: the Run UID (a plain file-name component).
            attempt: ``status.attempt`` of the attempt being started (>= 1).

        Raises:
            ValueError: ``uid`` is not a plain name or ``attempt`` < 1.
            ExecuteMarkerError: the marker cannot be created (names the file and the error);
                nothing is recorded.
        """
        _check_uid(uid)
        if attempt < 1:
            raise ValueError(f"attempt must be >= 1, got {attempt}")
        previous = self._attempts.get(uid, 0)
        if previous >= attempt:
            return  # recorded already (a later attempt's marker covers an earlier one)
        path = f"{self._dir}/{uid}.{attempt}"
        if not self._take_spare(path):
            try:
                # O_NOFOLLOW: the workspace is shared with tasks; a link planted here is refused
                flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
                fd = os.open(path, flags, 0o600)
            except OSError as exc:
                reason = exc.strerror or str(exc)
                raise ExecuteMarkerError(
                    f"cannot record the Execute of attempt {attempt} in {path}: {reason}"
                ) from exc
            os.close(fd)
        self._attempts[uid] = attempt
        if previous:
            self._unlink(f"{uid}.{previous}")

    def clear(self, uid: str) -> None:
        """Remove Run ``uid``'s marker (its local state is dropped); no-op without one.

        A removal error is logged: the in-memory record is dropped regardless, and a file
        left behind is removed by :meth:`prune` after the next restart.
        """
        attempt = self._attempts.pop(uid, 0)
        if attempt:
            self._unlink(f"{uid}.{attempt}")

    def prune(self, keep: Callable[[str], bool]) -> int:
        """Remove the markers of Runs for which ``keep(uid)`` is false; how many were removed.

        Args:
            keep: True for a Run UID this Pod still runs (or may still run).
        """
        gone = [uid for uid in self._attempts if not keep(uid)]
        for uid in gone:
            self.clear(uid)
        return len(gone)

    def _take_spare(self, path: str) -> bool:
        """Rename a spare into ``path``; False when none is left (or the rename failed)."""
        while self._spares:
            spare = self._spares.pop()
            try:
                os.rename(f"{self._spare_dir}/{spare}", path)
                return True
            except FileNotFoundError:
                continue  # taken away meanwhile: try the next one
            except OSError:
                return False
        return False

    def _unlink(self, name: str) -> None:
        path = f"{self._dir}/{name}"
        if len(self._spares) < SPARE_MARKERS:
            spare = str(self._next_spare)
            try:
                os.rename(path, f"{self._spare_dir}/{spare}")
            except FileNotFoundError:
                return
            except OSError:
                pass  # no spare directory (or no room): remove it instead
            else:
                self._next_spare += 1
                self._spares.append(spare)
                return
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("cannot remove Execute marker %s/%s: %s", self._dir, name, exc)
