"""Helpers for the Bash Runtime Server tests: handler files and running workers.

Imported by the test modules beside it (pytest's default ``prepend`` import mode puts this
directory on ``sys.path``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

from servers.bash.adapter import BashAdapter
from servers.bash.worker import BashWorker


def write_handler(workdir: Path, name: str, source: str) -> Path:
    """Write ``source`` to ``workdir/name`` (creating parent directories) and return the path."""
    path = workdir / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)
    return path


@asynccontextmanager
async def running_worker(
    adapter: BashAdapter,
    workdir: Path,
    handler: str,
    *,
    env: Mapping[str, str] | None = None,
    run_uid: str = "run-1",
) -> AsyncIterator[BashWorker]:
    """Start a worker for ``handler`` and close it on exit."""
    worker = await adapter.start_worker(
        working_dir=workdir, handler=handler, env=env or {}, run_uid=run_uid
    )
    try:
        yield worker
    finally:
        await worker.aclose()
