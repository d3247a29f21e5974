"""Durable markers: "an Execute for attempt N of Run UID was sent" (seed 003, ExecutionLost).

Seed 003: once an execution has been observed, a later Runtime Server NOT_FOUND is an
``ExecutionLost`` failure, not a reason to start. runtimed keeps that observation in memory
(:class:`~runtimed.task_decisions.LocalView`), so when runtimed *and* its Runtime Server
restart together (both containers killed, ``krt dev down``/``up``, a node agent restart) the
new runtimed sees a Running Run, no observation and NOT_FOUND, and would start the same
attempt a second time without anyone noticing. A marker on disk keeps the one fact that
tells the two cases apart across the restart.

The markers are lines of one append-only journal, ``<workspace>/execute-markers/journal``:
``+<run-uid> <attempt>`` records an attempt, ``-<run-uid>`` clears the Run's marker. Reading
the journal from the top gives every Run's latest recorded attempt (:func:`read_journal`).

* A marker line is appended by the start worker *before* Execute is sent, because an Execute
  whose answer was lost (runtimed killed while waiting) may still have started the process.
  The other order would leave a window where an execution runs with no marker. The cost is
  the reverse window: runtimed killed between the marker and the Execute leaves a marker for
  an attempt the server never received, and the restarted runtimed fails that attempt as
  ``ExecutionLost`` (retried when the retry policy allows). That is the safe answer and
  consistent with the at-least-once contract (DESIGN.md): an attempt is never run twice
  silently, and an attempt that never ran costs a retry, visibly.
* One ``write`` to the journal (kept open, ``O_APPEND``) per record and per clear, on the
  event loop (bounded: one short line), after an ``fstat`` that notices a journal removed or
  replaced meanwhile (it is then opened again by its path). Issue 6: the markers used to be
  one file per Run, renamed in from a pool of spare files and renamed back out; on the ext4
  bench machine each ``rename`` costs 15-25 µs of CPU (both directories' entries and inodes
  are journalled), against ~2 µs for the ``fstat`` and ``write``: a record and a clear cost
  ~30 µs of CPU per task Run before, ~5 µs now (``time.process_time`` over 3,000 Runs). A line is written with one ``write``
  of a few dozen bytes to a regular file opened ``O_APPEND``, so a killed process leaves it
  written or not, never half (a torn last line, possible only if the node itself fails, is
  ignored when read).
* Not fsynced: the journal only has to outlive processes (container restarts keep the page
  cache and the emptyDir), not the node, whose loss takes the Pod and its emptyDir with it.
* Compacted: :meth:`ExecuteMarkers.load` rewrites the journal with the live markers only, and
  so does a record or clear once :data:`COMPACT_AFTER_LINES` lines were appended since the
  last rewrite and more than :data:`COMPACT_DEAD_RATIO` times as many as there are live
  markers. A rewrite goes to ``journal.tmp`` and is renamed over the journal (a crash leaves
  the old journal or the new one, both complete); its size is bounded by the live markers
  (the Runs this Pod holds), so it stays on the event loop. The journal then never grows
  past about ``COMPACT_AFTER_LINES`` lines plus the live ones.
* Opened with ``O_NOFOLLOW``: the workspace is shared with tasks, and a link planted at the
  journal's path is refused, never written through.
* Beside ``runs/`` and ``trash/``, outside every Run's directory, so preparation, the Run's
  working directory and its removal never touch it. (The Runtime Server container shares
  the workspace volume: private to runtimed by convention, not by permission.)

A workspace left by an older runtimed, which kept one empty file ``<run-uid>.<attempt>`` per
marker in the same directory (and spare files in ``execute-markers.spare/``), is read by
:meth:`ExecuteMarkers.load` too: those markers are folded into the journal, then their files
and the spare directory are removed.

The journal is read once when the task lifecycle starts (:meth:`ExecuteMarkers.load`); from
then on the in-memory map mirrors it, so reconciliations read no file. Markers of Runs this
Pod no longer runs (deleted or reassigned while runtimed was down) are removed by the
lifecycle's sweep (:meth:`ExecuteMarkers.prune`). A directory or journal that cannot be
created, read or written is an error, never a silent fallback to memory: :meth:`load` fails
the start of runtimed's task lifecycle, :meth:`record` fails that attempt's start.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Final

import trio

__all__ = [
    "COMPACT_AFTER_LINES",
    "COMPACT_DEAD_RATIO",
    "JOURNAL_NAME",
    "MARKERS_DIR_NAME",
    "ExecuteMarkerError",
    "ExecuteMarkers",
    "read_journal",
]

log = logging.getLogger(__name__)

#: The markers' directory, under the workspace root.
MARKERS_DIR_NAME: Final = "execute-markers"
#: The journal's file name in that directory.
JOURNAL_NAME: Final = "journal"
#: Lines appended since the last rewrite before the journal may be compacted.
COMPACT_AFTER_LINES: Final = 4096
#: ... and only when they outnumber the live markers by this factor.
COMPACT_DEAD_RATIO: Final = 4
#: The spare-file directory suffix of the older one-file-per-marker layout (removed on load).
_LEGACY_SPARE_SUFFIX: Final = ".spare"
_APPEND_FLAGS: Final = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC


class ExecuteMarkerError(Exception):
    """The marker directory or journal cannot be created, read or written."""


def _check_uid(uid: str) -> None:
    # isprintable() is False for every white space but " " (and for control characters)
    if not uid or uid in (".", "..") or "/" in uid or " " in uid or not uid.isprintable():
        raise ValueError(f"Run UID {uid!r} is not usable in an Execute marker")


def _parse_legacy(name: str) -> tuple[str, int] | None:
    """``(uid, attempt)`` from an older layout's ``<uid>.<attempt>`` file name, or ``None``."""
    uid, dot, attempt = name.rpartition(".")
    if not dot or not uid or not attempt.isdigit() or attempt.startswith("0"):
        return None
    return uid, int(attempt)


def _replay(text: str, into: dict[str, int]) -> int:
    """Apply the journal ``text`` to ``into``; how many lines it holds (torn ones included).

    ``+uid attempt`` raises the Run's attempt (never lowers it), ``-uid`` drops it. A line
    that is not one of the two (a torn last line after a node failure, foreign text) is
    logged and skipped.
    """
    lines = text.split("\n")
    if lines and not lines[-1]:
        lines.pop()  # the newline that ends the last line
    for line in lines:
        if not line:
            continue  # the end of a line whose write failed (see ExecuteMarkers._append)
        op, rest = line[:1], line[1:]
        if op == "-" and rest and " " not in rest:
            into.pop(rest, None)
            continue
        uid, _, attempt = rest.partition(" ")
        if op == "+" and uid and attempt.isdigit() and not attempt.startswith("0"):
            into[uid] = max(into.get(uid, 0), int(attempt))
            continue
        log.warning("ignoring a malformed Execute marker journal line: %r", line[:200])
    return len(lines)


def _read_text(path: str) -> str | None:
    """The file's text (no link followed), or ``None`` when it does not exist.

    Raises:
        OSError: it exists but cannot be read.
    """
    try:
        fd = os.open(path, _READ_FLAGS)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as journal:
        return journal.read().decode("utf-8", "replace")


def read_journal(root: Path) -> dict[str, int]:
    """The markers the journal under ``root`` holds now: Run UID -> latest attempt (read-only).

    Older-layout marker files are not included (see :meth:`ExecuteMarkers.load`).

    Args:
        root: the markers directory (``<workspace>/execute-markers``).

    Raises:
        ExecuteMarkerError: the journal exists but cannot be read (names it and the error).
    """
    path = os.path.join(root, JOURNAL_NAME)
    try:
        text = _read_text(path)
    except OSError as exc:
        raise ExecuteMarkerError(
            f"cannot read the Execute marker journal {path}: {exc.strerror or exc}"
        ) from exc
    markers: dict[str, int] = {}
    if text:
        _replay(text, markers)
    return markers


class ExecuteMarkers:
    """The durable record of sent Executes, one marker per Run UID (its latest attempt).

    Args:
        root: the markers directory (``<workspace>/execute-markers``); created by
            :meth:`load`, on the workspace's file system (an emptyDir in a Pod).
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self._dir = os.fspath(root)
        self._journal = f"{self._dir}/{JOURNAL_NAME}"
        self._attempts: dict[str, int] = {}
        #: lines appended since the journal was last rewritten
        self._appended = 0
        #: the journal, open for appending (None until the first line after a rewrite)
        self._fd: int | None = None

    @classmethod
    def in_workspace(cls, workspace_root: Path) -> ExecuteMarkers:
        """The markers of the workspace at ``workspace_root`` (:data:`MARKERS_DIR_NAME`)."""
        return cls(workspace_root / MARKERS_DIR_NAME)

    @property
    def journal(self) -> Path:
        """The journal file."""
        return self.root / JOURNAL_NAME

    def attempt(self, uid: str) -> int:
        """The attempt whose Execute was last sent for Run ``uid``; 0 when none was."""
        return self._attempts.get(uid, 0)

    def uids(self) -> list[str]:
        """Run UIDs that have a marker."""
        return list(self._attempts)

    async def load(self) -> None:
        """Create the directory if missing, read the markers a previous runtimed left, compact.

        Of several markers of one Run the highest attempt counts. Marker files of the older
        layout are folded in and removed; other files are left alone and logged.

        Raises:
            ExecuteMarkerError: the directory cannot be created or listed, or the journal
                cannot be read or rewritten (names the path and the OS error).
        """
        self._attempts = await trio.to_thread.run_sync(self._load)

    def _load(self) -> dict[str, int]:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            names = os.listdir(self.root)
            text = _read_text(self._journal)
        except OSError as exc:
            raise ExecuteMarkerError(
                f"cannot use the Execute marker directory {self.root}: {exc.strerror or exc}",
            ) from exc
        found: dict[str, int] = {}
        legacy: list[str] = []
        for name in names:
            if name in (JOURNAL_NAME, f"{JOURNAL_NAME}.tmp"):
                continue
            parsed = _parse_legacy(name)
            if parsed is None:
                log.warning("ignoring %s in %s: not an Execute marker", name, self.root)
                continue
            uid, attempt = parsed
            found[uid] = max(found.get(uid, 0), attempt)
            legacy.append(name)
        if text:
            _replay(text, found)
        self._rewrite(found)  # before the legacy files go: never a moment without them
        for name in legacy:
            try:
                os.unlink(f"{self._dir}/{name}")
            except OSError as exc:
                log.warning("cannot remove old Execute marker %s/%s: %s", self._dir, name, exc)
        shutil.rmtree(f"{self._dir}{_LEGACY_SPARE_SUFFIX}", ignore_errors=True)
        return found

    def _rewrite(self, markers: dict[str, int]) -> None:
        """Replace the journal with one line per marker in ``markers`` (atomic rename).

        Raises:
            ExecuteMarkerError: the new journal cannot be written or renamed into place.
        """
        temporary = f"{self._journal}.tmp"
        data = "".join(f"+{uid} {attempt}\n" for uid, attempt in markers.items()).encode()
        try:
            try:
                os.unlink(temporary)  # O_EXCL below: never write through a planted link
            except FileNotFoundError:
                pass
            fd = os.open(temporary, _APPEND_FLAGS | os.O_EXCL, 0o600)
            try:
                _write_all(fd, data)
            finally:
                os.close(fd)
            os.rename(temporary, self._journal)
            self.close()  # the old journal: the next line opens the new one
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise ExecuteMarkerError(
                f"cannot rewrite the Execute marker journal {self._journal}: {reason}"
            ) from exc
        self._appended = 0

    def _append(self, line: str) -> None:
        """Append one line to the journal (the directory is never recreated).

        The journal stays open between lines; it is opened again (by its path, with
        ``O_NOFOLLOW``) when it was removed or replaced meanwhile (no link left to the open
        file), so a line never goes to a file nobody will read.

        Raises:
            OSError: the journal cannot be opened or written (a link at its path: ELOOP).
        """
        fd = self._fd
        if fd is None or os.fstat(fd).st_nlink == 0:
            self.close()
            fd = self._fd = os.open(self._journal, _APPEND_FLAGS, 0o600)
        try:
            _write_all(fd, line.encode())
        except OSError:
            # a part of the line may be written (a full disk): end it, so the next line
            # starts on its own and only this one is lost (best effort)
            try:
                os.write(fd, b"\n")
            except OSError:
                pass
            self.close()
            raise
        self._appended += 1

    def close(self) -> None:
        """Close the journal (the next line opens it again); idempotent."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def _maybe_compact(self) -> None:
        """Rewrite the journal when it is mostly dead lines (see the module docstring)."""
        if self._appended < COMPACT_AFTER_LINES:
            return
        if self._appended < COMPACT_DEAD_RATIO * len(self._attempts):
            return
        try:
            self._rewrite(self._attempts)
        except ExecuteMarkerError as exc:
            log.warning("%s; trying again later", exc)
            self._appended = 0  # not after every line while the problem lasts

    def record(self, uid: str, attempt: int) -> None:
        """Record, durably, that Execute for ``attempt`` of Run ``uid`` is about to be sent.

        Call before sending Execute. Idempotent for the same (or an earlier) attempt. On the
        event loop: one line appended to the journal (bounded). The directory is not
        recreated when missing: its loss is reported, not papered over.

        Args:
            uid: the Run UID (printable, no ``/`` or white space).
            attempt: ``status.attempt`` of the attempt being started (>= 1).

        Raises:
            ValueError: ``uid`` is not usable or ``attempt`` < 1.
            ExecuteMarkerError: the journal cannot be written (names the file and the
                error); nothing is recorded.
        """
        _check_uid(uid)
        if attempt < 1:
            raise ValueError(f"attempt must be >= 1, got {attempt}")
        if self._attempts.get(uid, 0) >= attempt:
            return  # recorded already (a later attempt's marker covers an earlier one)
        try:
            self._append(f"+{uid} {attempt}\n")
        except OSError as exc:
            raise ExecuteMarkerError(
                f"cannot record the Execute of attempt {attempt} of Run {uid} in "
                f"{self._journal}: {exc.strerror or exc}"
            ) from exc
        self._attempts[uid] = attempt
        self._maybe_compact()

    def clear(self, uid: str) -> None:
        """Remove Run ``uid``'s marker (its local state is dropped); no-op without one.

        A write error is logged: the in-memory record is dropped regardless, and a marker
        left in the journal is removed by :meth:`prune` after the next restart.
        """
        if self._attempts.pop(uid, 0):
            try:
                self._append(f"-{uid}\n")
            except OSError as exc:
                log.warning("cannot clear the Execute marker of Run %s: %s", uid, exc)
                return
            self._maybe_compact()

    def prune(self, keep: Callable[[str], bool]) -> int:
        """Remove the markers of Runs for which ``keep(uid)`` is false; how many were removed.

        Args:
            keep: True for a Run UID this Pod still runs (or may still run).
        """
        gone = [uid for uid in self._attempts if not keep(uid)]
        for uid in gone:
            self.clear(uid)
        return len(gone)


def _write_all(fd: int, data: bytes) -> None:
    """Write ``data`` with as few ``write`` calls as the kernel allows (one for a line)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:  # never for a regular file; do not spin if it happens
            raise OSError(5, "write made no progress")
        view = view[written:]
