"""The file-system steps of the function lifecycle behind one small interface.

Preparing, probing and removing a Run's directory under the shared workspace is blocking
I/O, so the default implementation (:class:`WorkspaceFiles`) runs it in worker threads
(:func:`runtimed.sources.prepare_source`, :func:`runtimed.sources.remove_run_files`). The
lifecycle depends only on :class:`RunFileOps`, so virtual-clock tests can substitute
synchronous in-memory-fast versions: under ``autojump_clock`` a worker thread lets trio's
clock jump while it runs, which would distort the timings those tests assert.
"""

from __future__ import annotations

from typing import Protocol

import trio

from krt.api.run import Source
from runtimed.sources import RunFiles, prepare_source, remove_run_files

__all__ = ["RunFileOps", "WorkspaceFiles"]


class RunFileOps(Protocol):
    """File-system steps on one Run's directory (:class:`~runtimed.sources.RunFiles`)."""

    async def prepare(self, source: Source | None, files: RunFiles) -> None:
        """Rebuild ``files.work`` with the source (see ``prepare_source``).

        Raises:
            PreparationError: the step that failed and why; nothing partial is left.
        """
        ...

    async def has_work_dir(self, files: RunFiles) -> bool:
        """True when ``files.work`` exists as a directory."""
        ...

    async def ensure_work_dir(self, files: RunFiles) -> None:
        """Create ``files.work`` (and parents) if missing.

        Raises:
            OSError: it cannot be created.
        """
        ...

    async def remove(self, files: RunFiles) -> None:
        """Remove ``files.root`` (idempotent; errors ignored)."""
        ...


class WorkspaceFiles:
    """:class:`RunFileOps` on the real workspace, in worker threads.

    Args:
        git: the git executable for repository sources.
    """

    def __init__(self, *, git: str = "git") -> None:
        self._git = git

    async def prepare(self, source: Source | None, files: RunFiles) -> None:
        """See :meth:`RunFileOps.prepare`."""
        await prepare_source(source, files, git=self._git)

    async def has_work_dir(self, files: RunFiles) -> bool:
        """See :meth:`RunFileOps.has_work_dir`."""
        return await trio.to_thread.run_sync(files.work.is_dir)

    async def ensure_work_dir(self, files: RunFiles) -> None:
        """See :meth:`RunFileOps.ensure_work_dir`."""
        await trio.to_thread.run_sync(lambda: files.work.mkdir(parents=True, exist_ok=True))

    async def remove(self, files: RunFiles) -> None:
        """See :meth:`RunFileOps.remove`."""
        await remove_run_files(files)
