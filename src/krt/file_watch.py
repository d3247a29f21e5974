"""Reload material from files that change in place: mounted Secrets, rotated certificates.

The kubelet updates a mounted Secret by swapping a symlink to a new directory, and
cert-manager renews certificates well before they expire, so a long-running process must
pick up new files without a restart. Neither inotify (a symlink swap is not a write to the
watched path) nor a fixed schedule is needed: :func:`watch_files` compares each file's
(inode, size, mtime) every ``period`` seconds, following symlinks, and calls a reload
function when the set changed. One implementation for every component that serves or
presents TLS from files (runtimed's peer hop, the gateway's HTTPS listener).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

import trio

__all__ = ["FileSignature", "file_signature", "watch_files"]

FileSignature = tuple[tuple[int, int, int], ...]
"""(inode, size, mtime in nanoseconds) of each watched file, in the order given."""


def file_signature(paths: Sequence[Path | str]) -> FileSignature | None:
    """The :data:`FileSignature` of ``paths`` (symlinks followed), or ``None`` if one is missing."""
    try:
        stats = [os.stat(path) for path in paths]
    except OSError:
        return None
    return tuple((st.st_ino, st.st_size, st.st_mtime_ns) for st in stats)


def _missing(paths: Sequence[Path | str]) -> str:
    """The watched files that do not exist now, comma-separated (or ``a file``)."""
    return ", ".join(str(p) for p in paths if not os.path.exists(p)) or "a file"


async def watch_files(
    paths: Sequence[Path | str],
    reload: Callable[[], None],
    *,
    period: float,
    errors: tuple[type[Exception], ...],
    what: str,
    logger: logging.Logger,
) -> NoReturn:
    """Call ``reload()`` at start and whenever one of ``paths`` changes; never returns.

    The files are compared every ``period`` seconds. A reload that raises one of ``errors``
    (a half-written update, a key that does not match its certificate, a file that is gone)
    is logged once per distinct state of the files and tried again at the next change; the
    caller's ``reload`` must leave the material in use untouched when it fails. Files that
    change while ``reload`` runs are loaded again at the next look (the signature is taken
    before loading).

    Args:
        paths: the files to watch.
        reload: loads the files into what is in use; raises one of ``errors`` when they are
            not usable.
        period: seconds between looks.
        errors: the exceptions that mean "not usable now" (anything else propagates).
        what: what is reloaded, for the log lines (e.g. ``"gateway TLS certificate"``).
        logger: where the reload and failure lines go.
    """
    not_usable: tuple[type[Exception], ...] = (FileNotFoundError, *errors)
    loaded: FileSignature | None = None
    reported = loaded
    started = False
    while True:
        now = file_signature(paths)
        if now != loaded:
            try:
                if now is None:
                    raise FileNotFoundError(f"missing {_missing(paths)}")
                reload()
            except not_usable as exc:
                if now != reported:
                    logger.warning(
                        "%s files changed but are not usable, kept the last: %s", what, exc
                    )
                    reported = now
            else:
                if started:
                    logger.info("%s reloaded from %s", what, ", ".join(str(p) for p in paths))
                loaded = reported = now
        started = True
        await trio.sleep(period)
