"""Source preparation for task Runs, and where each Run's files live in the shared workspace.

Seed 003, Lifecycle step 2: the source is prepared before execution starts, and a failure
is applied by the same reconciliation as the normal failure path (``PreparationFailed``).
Issue 6 fixes the sources:

* ``inline`` is written to ``inlinePath``, or to ``script`` when that is unset;
* ``repoURL`` + ``commitSHA`` is checked out with the ``git`` CLI (a real git: every URL
  scheme, credential helper and object format it supports, nothing re-implemented here).
  The commit is fetched by SHA with ``--depth 1``; servers that refuse unadvertised SHAs get
  a full fetch and a checkout of the SHA instead. Git never prompts (``GIT_TERMINAL_PROMPT=0``).

Layout, under the workspace directory runtimed shares with the Runtime Server (an emptyDir
mounted into both containers)::

    <workspace>/runs/<run-uid>/work/      the task's working directory (source lives here)
    <workspace>/runs/<run-uid>/outputs    the $KRUNTIME_OUTPUTS file (KEY=VALUE lines)
    <workspace>/spare/<n>/work/           new empty Run directories ready for use
                                          (:mod:`runtimed.spare_dirs`)
    <workspace>/trash/<name>/             finished Runs' directories: removed in batches,
                                          or emptied there and reused (:mod:`runtimed.trash`)
    <workspace>/execute-markers/journal   the Execute markers (:mod:`runtimed.execute_markers`)

Each attempt is prepared afresh: the Run's directory is removed and rebuilt, so files a
failed attempt left behind (or a half-finished checkout) never leak into the next one.

The Runtime Server may see the workspace under another path than runtimed does;
:class:`Workspace` translates (``server_root``). Callers bound every coroutine here with
``trio.fail_after``: a hung ``git fetch`` is cancelled and its process killed by trio.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Final

import trio

from krt.api.errors import OutputsError
from krt.api.outputs import MAX_OUTPUTS_FILE_BYTES, parse_outputs_file
from krt.api.run import Source
from runtimed.local_files import (
    INLINE_READ_BYTES,
    SymlinkRefusedError,
    read_bounded,
    remove_tree,
    write_file,
)
from runtimed.spare_dirs import KEPT_FILE, SpareDirs

__all__ = [
    "ATTEMPT_ENV",
    "OUTPUTS_ENV",
    "RUN_NAMESPACE_ENV",
    "RUN_NAME_ENV",
    "RUN_UID_ENV",
    "PreparationError",
    "RunFiles",
    "Workspace",
    "prepare_source",
    "read_outputs",
    "remove_run_files",
]

#: The environment variable naming the outputs file (issue 6).
OUTPUTS_ENV: Final = "KRUNTIME_OUTPUTS"
#: Variables naming the Run and attempt a task runs for, so that it can key its side
#: effects (idempotency) without the Run's identity being passed in by hand. Like
#: :data:`OUTPUTS_ENV`, they are set by runtimed and win over ``spec.env``.
RUN_NAME_ENV: Final = "KRUNTIME_RUN_NAME"
RUN_NAMESPACE_ENV: Final = "KRUNTIME_RUN_NAMESPACE"
RUN_UID_ENV: Final = "KRUNTIME_RUN_UID"
ATTEMPT_ENV: Final = "KRUNTIME_ATTEMPT"
#: Characters of git's stderr kept in a preparation error.
GIT_ERROR_TAIL_CHARS: Final = 600
#: An outputs file shorter than this is read and parsed on the event loop (the usual case);
#: a longer one, up to :data:`~krt.api.outputs.MAX_OUTPUTS_FILE_BYTES` (1 MiB), in a worker
#: thread.
INLINE_OUTPUTS_BYTES: Final = min(INLINE_READ_BYTES, 64 * 1024)


class PreparationError(Exception):
    """Source preparation failed; the message says which step and why (no partial state)."""


@dataclass(frozen=True, slots=True)
class RunFiles:
    """The paths of one Run, as runtimed sees them.

    Attributes:
        root: ``<workspace>/runs/<uid>``.
        work: the working directory (``root/work``).
        outputs: the outputs file (``root/outputs``).
        workspace: ``<workspace>``, the trusted anchor below which runtimed follows no
            symbolic link (tasks can put links anywhere in their Run's directory).
    """

    root: Path
    work: Path
    outputs: Path
    workspace: Path


@dataclass(frozen=True, slots=True)
class Workspace:
    """The shared workspace directory and its path as the Runtime Server sees it.

    Attributes:
        root: the directory as runtimed sees it (absolute).
        server_root: the same directory as the Runtime Server sees it; ``None`` means the
            same path (both containers mount it at one path, as the Runtime controller does).
    """

    root: Path
    server_root: Path | None = None

    def files(self, uid: str) -> RunFiles:
        """The paths of Run ``uid``.

        Raises:
            ValueError: ``uid`` is empty or not a plain path component.
        """
        if not uid or uid in (".", "..") or "/" in uid or "\0" in uid:
            raise ValueError(f"Run UID {uid!r} is not usable as a directory name")
        root = self.root / "runs" / uid
        return RunFiles(
            root=root, work=root / "work", outputs=root / "outputs", workspace=self.root
        )

    def for_server(self, path: Path) -> str:
        """``path`` (under :attr:`root`) as the Runtime Server sees it.

        Raises:
            ValueError: ``path`` is not under :attr:`root`.
        """
        # as text: both are normalized Paths (relative_to re-parsed both on every start)
        text, root = os.fspath(path), os.fspath(self.root)
        if text != root and not text.startswith(root if root.endswith(os.sep) else root + os.sep):
            raise ValueError(f"{path} is not under the workspace {self.root}")
        if self.server_root is None:
            return text
        rest = text[len(root) :].lstrip(os.sep)
        return os.fspath(self.server_root / rest) if rest else os.fspath(self.server_root)

    def runs_dir(self) -> Path:
        """``<workspace>/runs``: one directory per Run UID."""
        return self.root / "runs"

    def spare_dir(self) -> Path:
        """``<workspace>/spare``: empty Run directories ready for reuse
        (:class:`runtimed.spare_dirs.SpareDirs`)."""
        return self.root / "spare"

    def trash_dir(self) -> Path:
        """``<workspace>/trash``: finished Runs' directories until removed
        (:class:`runtimed.trash.Trash`)."""
        return self.root / "trash"


def _inline_target(work: Path, inline_path: str) -> Path:
    pure = PurePosixPath(inline_path)
    if pure.is_absolute() or ".." in pure.parts or not pure.parts or "\0" in inline_path:
        raise PreparationError(
            f"spec.source.inlinePath {inline_path!r} must be a relative path inside the working "
            "directory (no '..', not absolute)"
        )
    if inline_path.endswith(("/", "/.")):  # PurePosixPath drops the trailing "/" or "/."
        raise PreparationError(
            f"spec.source.inlinePath {inline_path!r} must name a file: it must not end in '/' "
            "or '/.'"
        )
    return work.joinpath(*pure.parts)


def _tail(text: str) -> str:
    text = text.strip()
    if len(text) > GIT_ERROR_TAIL_CHARS:
        return "\u2026" + text[-(GIT_ERROR_TAIL_CHARS - 1) :]
    return text


async def _git(git: str, *args: str, cwd: Path) -> None:
    env = {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "HOME": str(cwd),
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_CONFIG_NOSYSTEM": "1",
        "LC_ALL": "C",
    }
    try:
        result = await trio.run_process(
            [git, *args],
            cwd=str(cwd),
            env=env,
            check=False,
            capture_stdout=True,
            capture_stderr=True,
            stdin=subprocess.DEVNULL,
        )
    except OSError as exc:
        raise PreparationError(f"cannot run {git!r}: {exc.strerror or exc}") from None
    if result.returncode != 0:
        stderr = result.stderr.decode("utf-8", "replace")
        raise PreparationError(
            f"git {_subcommand(args)} failed (exit code {result.returncode}): {_tail(stderr)}"
        )


def _subcommand(args: tuple[str, ...]) -> str:
    """The git subcommand in ``args`` (``checkout`` of ``-c k=v checkout ...``), for messages."""
    index = 0
    while index < len(args) and args[index].startswith("-"):
        index += 2 if args[index] in ("-c", "-C") else 1
    return args[index] if index < len(args) else "(no subcommand)"


async def _checkout(git: str, work: Path, repo_url: str, commit_sha: str) -> None:
    await _git(git, "init", "--quiet", ".", cwd=work)
    try:
        await _git(git, "fetch", "--quiet", "--depth", "1", "--", repo_url, commit_sha, cwd=work)
    except PreparationError:
        # The server does not serve unadvertised SHAs: fetch everything, then pick the commit.
        await _git(
            git, "fetch", "--quiet", "--", repo_url, "+refs/*:refs/remotes/source/*", cwd=work
        )
    await _git(git, "-c", "advice.detachedHead=false", "checkout", "--quiet", commit_sha, cwd=work)


async def _reset_dir(files: RunFiles, spares: SpareDirs | None, *, keep_file: bool) -> None:
    # A first attempt's directory does not exist yet: the spare's rename is tried first, and
    # the way is cleared only when something is there (the rename replaces an empty
    # directory and fails on anything else). Issue 6: the ``lstat`` that looked first cost
    # ~20 µs of CPU per Run in a burst (a lookup in ``runs/``, full of recently renamed
    # entries), more than the rename itself on a quiet machine.
    if spares is not None and spares.take(files.root, keep_file=keep_file):
        return
    await remove_tree(files.root)
    if spares is not None and spares.take(files.root, keep_file=keep_file):
        return
    try:
        try:
            os.mkdir(files.root)
        except FileNotFoundError:  # the first Run of this workspace: no runs/ directory yet
            files.root.mkdir(parents=True)
        except FileExistsError:  # leftovers remove_tree could not delete: as `mkdir -p`
            pass
        os.mkdir(files.work)
    except OSError as exc:
        raise PreparationError(f"cannot create working directory {files.work}: {exc}") from None


async def _write_inline(files: RunFiles, source: Source) -> None:
    assert source.inline is not None
    target = _inline_target(files.work, source.effective_inline_path)
    try:
        await write_file(target, source.inline.encode("utf-8"), anchor=files.workspace)
    except OSError as exc:
        raise PreparationError(
            f"cannot write inline source to {source.effective_inline_path!r}: {exc}"
        ) from None


async def prepare_source(
    source: Source | None, files: RunFiles, *, git: str = "git", spares: SpareDirs | None = None
) -> None:
    """Prepare a Run's working directory for one attempt (seed 003, issue 6).

    Removes ``files.root``, recreates ``files.work`` (a spare directory renamed into place
    when ``spares`` has one), checks out ``repoURL`` at
    ``commitSHA`` there when set, and writes ``inline`` to its path. A Run without source
    gets an empty working directory (the task runs ``entrypoint``/``args`` as given).

    Args:
        source: ``spec.source``.
        files: the Run's paths (:meth:`Workspace.files`).
        git: the git executable.
        spares: empty Run directories to take the new one from.

    Raises:
        PreparationError: the directory cannot be created, ``inlinePath`` escapes the
            working directory, only one of ``repoURL``/``commitSHA`` is set, or git failed
            (its stderr tail is in the message). The Run's directory is removed again, so
            no partial checkout stays behind.
    """
    try:
        if source is not None and (source.repo_url is None) != (source.commit_sha is None):
            raise PreparationError(
                "spec.source.repoURL and spec.source.commitSHA must be set together"
            )
        # a spare's kept script file may stay only if the inline source rewrites it at once
        rewritten = (
            source is not None
            and source.inline is not None
            and source.repo_url is None
            and source.effective_inline_path == KEPT_FILE
        )
        await _reset_dir(files, spares, keep_file=rewritten)
        if source is not None and source.repo_url is not None and source.commit_sha is not None:
            await _checkout(git, files.work, source.repo_url, source.commit_sha)
        if source is not None and source.inline is not None:
            await _write_inline(files, source)
    except BaseException:
        with trio.CancelScope(shield=True):
            await remove_run_files(files)
        raise


async def remove_run_files(files: RunFiles) -> None:
    """Remove a Run's directory (idempotent; errors are ignored).

    Inline when the tree is small, in a worker thread otherwise (:func:`remove_tree`).
    """
    await remove_tree(files.root)


async def read_outputs(files: RunFiles) -> dict[str, str]:
    """Read and validate the outputs a task wrote to ``$KRUNTIME_OUTPUTS``.

    No symbolic link is followed (the file, the Run's directory or any directory between it
    and the workspace root): a task must not be able to copy a runtimed-side file into Run
    status by linking to it (security.md).

    A file under :data:`INLINE_OUTPUTS_BYTES` is read and parsed on the event loop; a larger
    one (at most :data:`~krt.api.outputs.MAX_OUTPUTS_FILE_BYTES` + 1 bytes are read) in a
    worker thread, so a 1 MiB file of appended updates never stalls runtimed.

    Returns:
        The validated outputs; empty when the task wrote no file.

    Raises:
        OutputsError: a bound is broken (the message names the key and the bound), the file
            is a symbolic link (bound ``"symlink"``), or it is not readable.
    """
    try:
        # the usual small file: one read (and its parse) on the event loop, as before; a
        # file filling the first read is read again whole, both off the event loop
        data = await read_bounded(files.outputs, INLINE_OUTPUTS_BYTES, anchor=files.workspace)
        if data is not None and len(data) >= INLINE_OUTPUTS_BYTES:
            data = await read_bounded(
                files.outputs, MAX_OUTPUTS_FILE_BYTES + 1, anchor=files.workspace
            )
    except SymlinkRefusedError as exc:
        what = (
            "outputs file" if exc.path == files.outputs else f"outputs file's directory {exc.path}"
        )
        raise OutputsError(
            f"the {what} is a symbolic link; runtimed does not follow links in the "
            f"workspace (write ${OUTPUTS_ENV} as a regular file)",
            key=None,
            bound="symlink",
        ) from None
    except OSError as exc:
        raise OutputsError(f"cannot read the outputs file: {exc}", key=None, bound="read") from None
    if data is None:
        return {}
    if len(data) < INLINE_OUTPUTS_BYTES:
        return parse_outputs_file(data)
    return await trio.to_thread.run_sync(parse_outputs_file, data)
