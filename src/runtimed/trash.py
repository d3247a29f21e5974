"""Finished Runs' directories: moved aside at once, removed later in batches.

Removing a Run's directory costs several file-system calls (about 1 ms of runtimed's CPU per
Run on an ext4 workspace, issue 6), and a Run is dropped right when a burst keeps the
machine busiest. :meth:`Trash.discard` instead renames the directory into
``<workspace>/trash/`` (one call; the Run's path is free again at once) and
:meth:`Trash.run` removes what collected there once no Run has been discarded for
``quiet`` seconds, or at the latest ``max_delay`` seconds after the oldest, all in one
worker-thread call. On start it removes whatever a previous runtimed left there, so a
restart leaks nothing. With a :class:`~runtimed.spare_dirs.SpareDirs` pool, directories are
emptied in place and given to the pool while it has room, instead of being removed (a Run
directory renamed into place costs less than a new one): they stay in the trash directory
until the pool renames them away, so a batch handles only the directories discarded since
the last one (never listing the directory, which holds the pool's spares too).
"""

from __future__ import annotations

import itertools
import logging
import os
import shutil
from pathlib import Path
from typing import Final

import trio

from runtimed.spare_dirs import Spare, SpareDirs

__all__ = ["QUIET_SECONDS", "MAX_DELAY_SECONDS", "Trash"]

log = logging.getLogger(__name__)

#: Seconds without a discard before the trash is emptied.
QUIET_SECONDS: Final = 0.5
#: Seconds at most between a discard and the removal of its directory.
MAX_DELAY_SECONDS: Final = 10.0


class Trash:
    """A directory of discarded Run directories and the task that empties it.

    Args:
        root: the trash directory (``<workspace>/trash``), on the same file system as the
            directories discarded into it; created when missing.
        quiet: seconds without a discard before the trash is emptied (>= 0).
        max_delay: seconds at most a discarded directory waits (>= ``quiet``).
        spares: the pool that takes emptied directories while it has room; ``None``
            removes every directory.

    Raises:
        ValueError: ``quiet`` < 0 or ``max_delay`` < ``quiet``.
    """

    def __init__(
        self,
        root: Path,
        *,
        quiet: float = QUIET_SECONDS,
        max_delay: float = MAX_DELAY_SECONDS,
        spares: SpareDirs | None = None,
    ) -> None:
        if quiet < 0 or max_delay < quiet:
            raise ValueError(
                f"need 0 <= quiet <= max_delay seconds, got quiet={quiet}, max_delay={max_delay}"
            )
        self.root = root
        self._dir = os.fspath(root)
        self.quiet = quiet
        self.max_delay = max_delay
        self._spares = spares
        self._names = itertools.count()
        self._pid = os.getpid()
        #: paths discarded since the last batch began
        self._discarded: list[str] = []
        self._wakeup = trio.Event()
        self._batch_done = trio.Event()
        self.emptied = 0
        """Directories removed so far (for tests and metrics)."""

    @property
    def pending(self) -> int:
        """Directories discarded and not yet removed (or reclaimed)."""
        return len(self._discarded)

    def discard(self, path: Path) -> bool:
        """Move ``path`` (a directory, or nothing) into the trash; never blocks for long.

        Returns:
            True when ``path`` was moved (or did not exist); False when it could not be
            moved (another file system, a permission problem): the caller removes it itself.
        """
        target = f"{self._dir}/{os.path.basename(path)}.{self._pid}.{next(self._names)}"
        try:
            os.rename(path, target)
        except OSError as exc:
            if not os.path.lexists(path):
                return True  # nothing to remove
            log.debug("cannot move %s to the trash: %s", path, exc)
            return False
        self._discarded.append(target)
        self._wakeup.set()
        return True

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Empty what a previous process left, then empty the trash after each quiet spell.

        Never returns unless cancelled; ``started()`` once the trash directory exists and
        its old content is gone.
        """
        await trio.to_thread.run_sync(self._reset)
        task_status.started()
        while True:
            await self._wakeup.wait()
            deadline = trio.current_time() + self.max_delay
            while True:
                self._wakeup = trio.Event()
                with trio.move_on_at(min(deadline, trio.current_time() + self.quiet)):
                    await self._wakeup.wait()
                if not self._wakeup.is_set() or trio.current_time() >= deadline:
                    break
            self._wakeup = trio.Event()
            batch, self._discarded = self._discarded, []
            wanted = self._spares.wanted() if self._spares is not None else 0
            reclaimed = await trio.to_thread.run_sync(self._empty, batch, wanted)
            if self._spares is not None:
                self._spares.add(reclaimed)
            self.emptied += len(batch)
            self._batch_done.set()
            self._batch_done = trio.Event()

    async def wait_for_batch(self) -> None:
        """Return once the next batch has been removed (for shutdown and tests)."""
        await self._batch_done.wait()

    def _reset(self) -> None:
        """Remove everything in the trash (a previous process's leftovers and spares)."""
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            names = os.listdir(self.root)
        except OSError as exc:
            log.warning("cannot list the trash %s: %s", self.root, exc)
            return
        self._empty([f"{self._dir}/{name}" for name in names], 0)

    def _empty(self, paths: list[str], wanted: int) -> list[Spare]:
        """Remove the discarded ``paths``, giving up to ``wanted`` of them to the pool.

        Returns:
            The directories reclaimed (for :meth:`SpareDirs.add`; left where they are).
        """
        reclaimed: list[Spare] = []
        for path in paths:
            if self._spares is not None and len(reclaimed) < wanted:
                moved = self._spares.reclaim(path)
                if moved is not None:
                    reclaimed.append(moved)
                    continue
            shutil.rmtree(path, ignore_errors=True)
        return reclaimed
