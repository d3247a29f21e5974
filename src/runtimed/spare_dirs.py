"""A pool of empty Run directories, renamed into place instead of created for each Run.

Issue 6 (CPU per task Run): creating a directory on the workspace's file system allocates an
inode and a block, and on ext4 under a burst that is the dearest system call runtimed makes
per Run: two ``mkdir`` (the Run's directory and its ``work``) cost 50-150 µs of CPU together
on the bench machine when quiet, several hundred µs while other processes write to the disk,
against ~25 µs for one ``rename`` of a directory that already exists. (Measured with
``time.process_time``: the driver of one runtimed against a real Bash Runtime Server spent
0.1 ms of system time per Run with its workspace on tmpfs and 0.6-1.9 ms on ext4.)

So a Run's directory comes from this pool when it has one: an empty directory holding an
empty ``work``, exactly what :func:`runtimed.sources.prepare_source` would create, moved to
``runs/<uid>`` with one ``rename``. The pool is filled once when the task lifecycle starts
(``<workspace>/spare/<n>``, in a worker thread) and refilled with the directories of finished
Runs: :class:`runtimed.trash.Trash` hands each discarded directory to :meth:`SpareDirs.reclaim`
(also in its worker thread), which empties it where it is, in the trash, and the pool takes
it from there; or refuses it, and the trash removes it as before. (Issue 6: reclaimed
directories used to be renamed from the trash into ``spare/``, a third ``rename`` per Run
besides the discard and the take: 15-25 µs of CPU each on the bench machine's ext4.)

A reclaimed directory must be indistinguishable from a new one: it is reused only if it and
its ``work`` are real directories (never a link) with the owner, group and permission bits a
new directory gets here (taken from a probe directory at :meth:`fill`) and no extended
attribute but security labels (so no POSIX ACL);
everything else in them is removed first (never following a link). Anything unexpected, or
any error, and the directory is not reused.

One file may stay: ``work/script``, the default inline source file (new spares get an empty
one from :meth:`SpareDirs.fill`), when it is a regular file with one link, the owner, group
and permission bits a new file gets (probed too) and no extended attribute but security
labels. A Run whose inline source goes there rewrites it in place (the inode and its blocks
are reused, its old content overwritten and any longer tail cut off:
:func:`runtimed.local_files.write_file`); any other Run gets it removed by
:meth:`SpareDirs.take`. Every new inode costs: ext4's allocator skips recently deleted
inodes, reading their inode table blocks (``recently_deleted``), so creating files costs
more the more files were just deleted, and perf showed ``ext4_create`` as runtimed's largest
kernel cost per Run. The pool is private to runtimed by convention only: tasks share the
workspace and are trusted (docs/security.md), as for ``runs/``.
"""

from __future__ import annotations

import itertools
import logging
import os
import shutil
import stat
from pathlib import Path
from typing import Final

from krt.api.run import DEFAULT_INLINE_PATH

__all__ = ["KEPT_FILE", "SPARE_DIRS", "Spare", "SpareDirs"]

log = logging.getLogger(__name__)

#: Empty Run directories kept ready per runtimed (about a burst's worth: 2 inodes each).
SPARE_DIRS: Final = 128
#: The Run's working directory inside a Run directory (``RunFiles.work``).
WORK: Final = "work"
#: The file a reclaimed directory may keep (the default inline source file).
KEPT_FILE: Final = DEFAULT_INLINE_PATH

#: A spare: its path and whether it holds a kept :data:`KEPT_FILE`.
Spare = tuple[str, bool]


class SpareDirs:
    """Empty Run directories ready to be renamed into place (see the module docstring).

    :meth:`fill` and :meth:`reclaim` block (worker thread); :meth:`take` and :meth:`add` run
    on the event loop (one ``rename`` at most).

    Args:
        root: the pool's directory (``<workspace>/spare``), on the file system of the Run
            directories; created by :meth:`fill`.
        size: most directories kept (>= 0; 0 turns the pool off).

    Raises:
        ValueError: ``size`` < 0.
    """

    def __init__(self, root: Path, *, size: int = SPARE_DIRS) -> None:
        if size < 0:
            raise ValueError(f"spare directory count must be >= 0, got {size}")
        self.root = root
        self.size = size
        self._dir = os.fspath(root)
        self._ready: list[Spare] = []
        #: spares fill() made that no Run has used yet
        self._unused: set[str] = set()
        self._names = itertools.count()
        #: (uid, gid, permission bits) of a new directory; None until fill() probed it
        self._fresh: tuple[int, int, int] | None = None
        #: the same of a new file (as runtimed.local_files.write_file creates them)
        self._fresh_file: tuple[int, int, int] | None = None

    @property
    def ready(self) -> int:
        """Directories in the pool now."""
        return len(self._ready)

    def wanted(self) -> int:
        """How many more directories the pool takes (0 before :meth:`fill`)."""
        if self._fresh is None:
            return 0
        return max(0, self.size - len(self._ready))

    def fill(self) -> None:
        """Empty the pool's directory (a previous runtimed's leftovers), then fill the pool.

        Each new spare is a directory holding ``work`` with an empty :data:`KEPT_FILE` (a
        reclaimed one may keep that file too): most task Runs write their inline source
        there, and overwriting a file costs a burst less than creating one (issue 6:
        ``bench/task_runs.py`` starts every runtimed with a fresh pool, so each Run of its
        burst used to allocate the script's inode).

        Blocking: call in a worker thread. An error is logged and leaves the pool short or
        off (Runs then create their directories as without it).
        """
        try:
            os.makedirs(self._dir, exist_ok=True)
            for name in os.listdir(self._dir):
                shutil.rmtree(os.path.join(self._dir, name), ignore_errors=True)
            probe = f"{self._dir}/probe"
            os.mkdir(probe)
            info = os.lstat(probe)
            os.close(os.open(f"{probe}/file", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            file_info = os.lstat(f"{probe}/file")
            os.unlink(f"{probe}/file")
            os.rmdir(probe)
            self._fresh = (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode))
            self._fresh_file = (file_info.st_uid, file_info.st_gid, stat.S_IMODE(file_info.st_mode))
            made: list[Spare] = []
            for _ in range(self.size):
                path = f"{self._dir}/{next(self._names)}"
                os.mkdir(path)
                os.mkdir(f"{path}/{WORK}")
                # an empty KEPT_FILE, made as write_file makes it: a Run whose inline source
                # goes there overwrites it instead of allocating an inode in the burst
                flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
                os.close(os.open(f"{path}/{WORK}/{KEPT_FILE}", flags, 0o666))
                made.append((path, True))
        except OSError as exc:
            log.warning("spare Run directories in %s: %s", self._dir, exc)
            return
        self._ready = made
        self._unused = {path for path, _ in made}

    def take(self, target: Path, *, keep_file: bool = False) -> bool:
        """Move a spare directory to ``target`` (a Run directory that does not exist).

        Args:
            target: the Run's directory.
            keep_file: the caller rewrites ``work/``:data:`KEPT_FILE` at once (all of
                its content), so a kept one may stay; otherwise it is removed here.

        Returns:
            True when ``target`` is now a directory holding ``work``, which is empty or
            (``keep_file`` only) holds just a regular :data:`KEPT_FILE`; False when the pool
            is empty (or its directories are gone, or one cannot be used, or something wrote
            into a reclaimed one while it waited: it is then removed): create it instead.
            A spare :meth:`fill` made is not listed again (no earlier Run ever used it).
        """
        while self._ready:
            spare, has_file = self._ready.pop()
            try:
                os.rename(spare, target)
            except OSError:
                if not os.path.lexists(spare):
                    continue  # the spare is gone (a task removed it): try the next one
                # the target is in the way, or its parent is missing: keep the spare
                self._ready.append((spare, has_file))
                return False
            if has_file and not keep_file:
                try:
                    os.unlink(f"{os.fspath(target)}/{WORK}/{KEPT_FILE}")
                except FileNotFoundError:
                    pass
                except OSError:
                    shutil.rmtree(target, ignore_errors=True)
                    return False
            if spare in self._unused:
                # never a Run's directory, so no process of an earlier Run can have it as
                # its cwd: the check below has nothing to find (issue 6: two directory
                # reads per Run fewer while the pool hands out what fill() made)
                self._unused.discard(spare)
                return True
            if not _still_empty(os.fspath(target), keep_file=has_file and keep_file):
                # something wrote into the spare while it waited (a task's process that
                # left its group and kept the directory as its cwd): never hand a Run
                # another Run's files
                shutil.rmtree(target, ignore_errors=True)
                return False
            return True
        return False

    def add(self, paths: list[Spare]) -> None:
        """Make directories :meth:`reclaim` returned available (event loop)."""
        room = max(0, self.size - len(self._ready))
        self._ready.extend(paths[:room])

    def reclaim(self, path: str) -> Spare | None:
        """Empty the discarded Run directory ``path`` where it is, to be used as a spare.

        Blocking: call in a worker thread, on directories no one else uses (the trash,
        which must then leave the directory alone until :meth:`take` renames it away).

        Returns:
            The spare (``path``, and whether it kept its :data:`KEPT_FILE`), to be given to
            :meth:`add`; or ``None`` when it is not reused (not like a new directory, or an
            error): the caller removes it.
        """
        fresh, fresh_file = self._fresh, self._fresh_file
        if fresh is None or fresh_file is None:
            return None
        try:
            if not _like_new(path, fresh):
                return None
            work = f"{path}/{WORK}"
            has_work = False
            with os.scandir(path) as entries:
                for entry in entries:
                    if entry.name == WORK and entry.is_dir(follow_symlinks=False):
                        has_work = True
                    else:
                        _remove(entry)
            if not has_work or not _like_new(work, fresh):
                return None
            kept = False
            with os.scandir(work) as entries:
                for entry in entries:
                    if entry.name == KEPT_FILE and _like_new_file(entry, fresh_file):
                        kept = True
                    else:
                        _remove(entry)
        except OSError:
            return None
        return path, kept


def _like_new(path: str, fresh: tuple[int, int, int]) -> bool:
    """Whether ``path`` is a directory (not a link) as new ones are here, without xattrs."""
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):
        return False
    if (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) != fresh:
        return False
    return _no_xattrs(path)


def _like_new_file(entry: os.DirEntry[str], fresh: tuple[int, int, int]) -> bool:
    """Whether ``entry`` is a regular file with one link, as new ones are, without xattrs."""
    if not entry.is_file(follow_symlinks=False):
        return False
    info = entry.stat(follow_symlinks=False)
    if info.st_nlink != 1 or (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) != fresh:
        return False
    return _no_xattrs(entry.path)


def _no_xattrs(path: str) -> bool:
    """Whether ``path`` has no extended attribute (an ACL included) but security labels.

    Security labels (``security.*``, e.g. SELinux's) are the file system's, set on new files
    too; anything else was added by a task and would outlive its Run.
    """
    try:
        names = os.listxattr(path, follow_symlinks=False)
    except OSError:  # a file system without extended attributes
        return True
    return all(name.startswith("security.") for name in names)


def _remove(entry: os.DirEntry[str]) -> None:
    """Remove one directory entry; a directory with everything in it (links not followed)."""
    if entry.is_dir(follow_symlinks=False):
        shutil.rmtree(entry.path)
    else:
        os.unlink(entry.path)


def _still_empty(run_dir: str, *, keep_file: bool) -> bool:
    """Whether ``run_dir`` holds just an empty ``work`` (or ``work`` with only
    :data:`KEPT_FILE`, when ``keep_file``): two directory reads, no stat."""
    try:
        with os.scandir(run_dir) as entries:
            if [entry.name for entry in entries] != [WORK]:
                return False
        with os.scandir(f"{run_dir}/{WORK}") as entries:
            names = [entry.name for entry in entries]
    except OSError:
        return False
    return not names or (keep_file and names == [KEPT_FILE])
