"""Tiny local-disk file steps of a task Run, done on the event loop when provably small.

Issue 6 (CPU per task Run): each Run's preparation, outputs read and directory removal are
a handful of syscalls on the Pod's local workspace (an emptyDir), about 100-250 µs of CPU
together. Handing each of them to a worker thread (``trio.to_thread.run_sync``) cost more
than the work itself: measured on the 2-core bench machine, a bare thread round trip costs
~115 µs of CPU, and the three per-Run steps cost ~400 µs inline against ~700-900 µs through
threads (plus GIL hand-offs that slow every other task of the process under a burst).

So a step runs inline only while it is bounded by construction, and in a worker thread
otherwise (DESIGN.md: no unbounded blocking I/O on the event loop):

* a write of at most :data:`INLINE_WRITE_BYTES`;
* a read of at most :data:`INLINE_READ_BYTES` (callers pass their own bound);
* removal of a tree of at most :data:`INLINE_TREE_ENTRIES` entries holding at most
  :data:`INLINE_TREE_BYTES` of regular files (unlinking a large file frees its extents and
  can take long). The tree is measured with ``lstat`` first; symlinks are removed, never
  followed (``shutil.rmtree``'s rule). Anything larger, and any error on the inline path,
  goes to ``shutil.rmtree`` in a worker thread.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path
from typing import Final

import trio

__all__ = [
    "INLINE_READ_BYTES",
    "INLINE_TREE_BYTES",
    "INLINE_TREE_ENTRIES",
    "INLINE_WRITE_BYTES",
    "read_bounded",
    "remove_tree",
    "small_tree",
    "write_file",
]

#: Largest write done on the event loop, bytes.
INLINE_WRITE_BYTES: Final = 64 * 1024
#: Largest read done on the event loop, bytes.
INLINE_READ_BYTES: Final = 128 * 1024
#: Most directory entries (files, directories, links) a tree removed inline may hold.
INLINE_TREE_ENTRIES: Final = 32
#: Most bytes of regular files a tree removed inline may hold.
INLINE_TREE_BYTES: Final = 1024 * 1024


def small_tree(
    root: Path, *, max_entries: int = INLINE_TREE_ENTRIES, max_bytes: int = INLINE_TREE_BYTES
) -> list[tuple[str, bool]] | None:
    """The entries of ``root`` in removal order, or ``None`` when it is over either bound.

    Args:
        root: a directory (not followed if it is a symlink).
        max_entries: most entries below ``root`` (``root`` itself not counted).
        max_bytes: most bytes of regular files below ``root``.

    Returns:
        ``[(path, is_directory), ...]`` children before their parents, ``root`` last; an
        empty list when ``root`` does not exist.

    Raises:
        OSError: ``root`` or a directory below it cannot be read.
    """
    try:
        info = os.lstat(root)
    except FileNotFoundError:
        return []
    if not stat.S_ISDIR(info.st_mode):
        return [(str(root), False)]
    order: list[tuple[str, bool]] = []
    entries = 0
    size = 0
    pending = [str(root)]
    directories: list[str] = []
    while pending:
        directory = pending.pop()
        directories.append(directory)
        with os.scandir(directory) as listing:
            for entry in listing:
                entries += 1
                if entries > max_entries:
                    return None
                if entry.is_dir(follow_symlinks=False):
                    pending.append(entry.path)
                    continue
                if entry.is_file(follow_symlinks=False):
                    size += entry.stat(follow_symlinks=False).st_size
                    if size > max_bytes:
                        return None
                order.append((entry.path, False))
    # a directory is listed after every directory found below it: reverse discovery order
    order.extend((directory, True) for directory in reversed(directories))
    return order


def _remove_inline(root: Path) -> bool:
    """Remove ``root`` on the calling thread if it is small; False when it was not."""
    try:
        plan = small_tree(root)
        if plan is None:
            return False
        for path, is_directory in plan:
            if is_directory:
                os.rmdir(path)
            else:
                os.unlink(path)
    except FileNotFoundError:
        return not os.path.lexists(root)
    except OSError:
        return False
    return True


async def remove_tree(root: Path) -> None:
    """Remove ``root`` and everything below it (idempotent; errors are ignored).

    Inline when the tree is small (see the module docstring), else ``shutil.rmtree`` in a
    worker thread.
    """
    if _remove_inline(root):
        return
    await trio.to_thread.run_sync(lambda: shutil.rmtree(root, ignore_errors=True))


async def write_file(path: Path, data: bytes) -> None:
    """Create or replace ``path`` with ``data``, creating missing parent directories.

    Inline up to :data:`INLINE_WRITE_BYTES`, in a worker thread above.

    Raises:
        OSError: the directory or the file cannot be created or written.
    """

    def write() -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(data)

    if len(data) <= INLINE_WRITE_BYTES:
        write()
    else:
        await trio.to_thread.run_sync(write)


async def read_bounded(path: Path, limit: int) -> bytes | None:
    """Up to ``limit`` bytes from the start of ``path``; ``None`` when it does not exist.

    Inline when ``limit`` is at most :data:`INLINE_READ_BYTES`, in a worker thread above.

    Raises:
        OSError: the file exists but cannot be read or is not a regular file.
    """

    def read() -> bytes | None:
        try:
            # O_NONBLOCK: a FIFO in place of the file must not hang the caller
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(f"{path} is not a regular file")
            chunks: list[bytes] = []
            remaining = limit
            while remaining > 0 and (chunk := os.read(fd, remaining)):
                chunks.append(chunk)
                remaining -= len(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)

    if limit <= INLINE_READ_BYTES:
        return read()
    return await trio.to_thread.run_sync(read)
