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

Symbolic links are never followed below the trusted anchor a caller names (the workspace
root, runtimed's own mount): the workspace is shared with the Runtime Server, whose tasks
can replace any file or directory of their Run with a link. A link followed in runtimed's
mount namespace would let a task read runtimed-side files into Run status (security.md: a
Run cannot read the runtimed container's filesystem) or make runtimed write through it. So
:func:`read_bounded` and :func:`write_file` open every path component below the anchor
relative to its parent's descriptor with ``O_NOFOLLOW`` (``O_DIRECTORY`` for directories), and
a link anywhere there is a :class:`SymlinkRefusedError`. Cost: one ``open``/``close`` pair per
component (three for a Run's outputs file), a few microseconds.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Final

import trio

__all__ = [
    "INLINE_READ_BYTES",
    "INLINE_TREE_BYTES",
    "INLINE_TREE_ENTRIES",
    "INLINE_WRITE_BYTES",
    "SymlinkRefusedError",
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


class SymlinkRefusedError(OSError):
    """A path component below the trusted anchor is a symbolic link; it was not followed.

    Attributes:
        path: the component that is a link (anchor joined with the parts up to it).
    """

    def __init__(self, path: Path) -> None:
        super().__init__(errno.ELOOP, "is a symbolic link (not followed)", str(path))
        self.path = path

    def __str__(self) -> str:
        return f"{self.path} is a symbolic link (not followed)"


_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _parts_below(anchor: Path, path: Path) -> tuple[str, ...]:
    """``path``'s components below ``anchor`` (at least one).

    Split as text (both are normalized ``Path`` objects): ``relative_to`` parsed both paths
    again on every read and write of a Run's files.

    Raises:
        ValueError: ``path`` is not strictly below ``anchor``, or has ``..``/``.`` parts.
    """
    text, base = os.fspath(path), os.fspath(anchor)
    prefix = base if base.endswith(os.sep) else base + os.sep
    parts = tuple(text[len(prefix) :].split(os.sep)) if text.startswith(prefix) else ()
    if not parts or any(part in ("", ".", "..") for part in parts):
        raise ValueError(f"{path} is not a plain path below {anchor}")
    return parts


def _open_component(
    name: str, flags: int, *, dir_fd: int, shown: Callable[[], Path], mode: int = 0o666
) -> int:
    """``os.open(name, flags | O_NOFOLLOW, dir_fd=dir_fd)``, a link raising SymlinkRefusedError.

    Linux answers ``ELOOP`` for a link opened with ``O_NOFOLLOW``, but ``ENOTDIR`` when
    ``O_DIRECTORY`` is set too; the latter is told apart from a plain file by an ``lstat``.
    ``shown()`` gives the path the error names (built only on error).
    """
    try:
        return os.open(name, flags | os.O_NOFOLLOW, mode, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP or (exc.errno == errno.ENOTDIR and _is_link(name, dir_fd)):
            raise SymlinkRefusedError(shown()) from None
        raise


def _is_link(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _open_parent(anchor: Path, parts: tuple[str, ...], *, create: bool) -> int:
    """A descriptor of the directory holding ``parts[-1]``, no link followed below ``anchor``.

    Args:
        anchor: a trusted directory (followed as given: runtimed's own mount).
        parts: the components below it; all but the last are directories.
        create: create missing directories (mode 0o777 before the umask).

    Raises:
        SymlinkRefusedError: a directory component is a link.
        FileNotFoundError: a directory component is missing and ``create`` is false.
        OSError: another error opening or creating a directory.
    """
    fd = os.open(anchor, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for depth, part in enumerate(parts[:-1], start=1):

            def shown(depth: int = depth) -> Path:
                return anchor.joinpath(*parts[:depth])

            try:
                child = _open_component(part, _DIR_FLAGS, dir_fd=fd, shown=shown)
            except FileNotFoundError:
                if not create:
                    raise
                # missing: create it, then open it as any other (a link raced in is refused);
                # trying the open first saves a failing mkdir per existing directory
                try:
                    os.mkdir(part, dir_fd=fd)
                except FileExistsError:
                    pass
                child = _open_component(part, _DIR_FLAGS, dir_fd=fd, shown=shown)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


async def write_file(path: Path, data: bytes, *, anchor: Path) -> None:
    """Create or replace ``path`` with ``data``, creating missing parent directories.

    No symbolic link below ``anchor`` is followed (see the module docstring): a link in
    place of the file or of a directory on the way fails the write and changes nothing
    outside ``anchor``. Inline up to :data:`INLINE_WRITE_BYTES`, in a worker thread above.

    An existing file is overwritten in place and cut to ``data``'s length only when it was
    longer, not opened with ``O_TRUNC``: truncating frees its blocks and the write allocates
    new ones, a journalled ext4 truncate. The kept ``script`` of a spare directory is
    rewritten with the same few bytes on every task Run (issue 6): measured on ext4, 65-110
    µs of CPU and 130-175 µs of a blocked event loop per write with ``O_TRUNC``, against
    6-25 µs of CPU and 8-64 µs for the overwrite.

    Args:
        path: the file, strictly below ``anchor``.
        data: its new content.
        anchor: the trusted directory (the workspace root).

    Raises:
        SymlinkRefusedError: the file or a directory component below ``anchor`` is a link.
        ValueError: ``path`` is not a plain path below ``anchor``.
        OSError: the directory or the file cannot be created or written.
    """
    parts = _parts_below(anchor, path)

    def write() -> None:
        parent = _open_parent(anchor, parts, create=True)
        try:
            # no O_TRUNC: see the docstring on replacing a file in place
            flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC
            fd = _open_component(parts[-1], flags, dir_fd=parent, shown=lambda: path)
        finally:
            os.close(parent)
        try:
            old_size = os.fstat(fd).st_size
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                if written <= 0:  # never for a regular file; do not spin if it happens
                    raise OSError(errno.EIO, "write made no progress", str(path))
                view = view[written:]
            if old_size > len(data):
                os.ftruncate(fd, len(data))
        finally:
            os.close(fd)

    if len(data) <= INLINE_WRITE_BYTES:
        write()
    else:
        await trio.to_thread.run_sync(write)


async def read_bounded(path: Path, limit: int, *, anchor: Path) -> bytes | None:
    """Up to ``limit`` bytes from the start of ``path``; ``None`` when it does not exist.

    No symbolic link below ``anchor`` is followed (see the module docstring). Inline when
    ``limit`` is at most :data:`INLINE_READ_BYTES`, in a worker thread above.

    Args:
        path: the file, strictly below ``anchor``.
        limit: most bytes to read.
        anchor: the trusted directory (the workspace root).

    Raises:
        SymlinkRefusedError: the file or a directory component below ``anchor`` is a link
            (nothing is read through it).
        ValueError: ``path`` is not a plain path below ``anchor``.
        OSError: the file exists but cannot be read or is not a regular file.
    """
    parts = _parts_below(anchor, path)

    def read() -> bytes | None:
        try:
            parent = _open_parent(anchor, parts, create=False)
        except FileNotFoundError:
            return None
        try:
            # O_NONBLOCK: a FIFO in place of the file must not hang the caller
            flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
            fd = _open_component(parts[-1], flags, dir_fd=parent, shown=lambda: path)
        except FileNotFoundError:
            return None
        finally:
            os.close(parent)
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
