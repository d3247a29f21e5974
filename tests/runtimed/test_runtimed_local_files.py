"""Tiny file steps inline, anything unbounded in a worker thread (runtimed.local_files)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trio

from runtimed import local_files
from runtimed.local_files import read_bounded, remove_tree, small_tree, write_file


def tree(root: Path, files: int, size: int = 10) -> None:
    (root / "work" / "sub").mkdir(parents=True)
    for index in range(files):
        (root / "work" / "sub" / f"f{index}").write_bytes(b"x" * size)


@pytest.fixture
def no_threads(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Record every worker-thread hand-off of local_files (and still run it)."""
    calls: list[object] = []
    real = trio.to_thread.run_sync

    async def recording(fn, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(fn)
        return await real(fn, *args, **kwargs)

    monkeypatch.setattr(local_files.trio.to_thread, "run_sync", recording)
    return calls


def test_small_tree_lists_children_before_parents(tmp_path: Path) -> None:
    tree(tmp_path / "r", 2)
    plan = small_tree(tmp_path / "r")
    assert plan is not None
    seen: set[str] = set()
    for path, is_directory in plan:
        if is_directory:  # everything below a directory comes before it
            assert all(p in seen for p, _ in plan if p.startswith(path + os.sep))
        seen.add(path)
    assert plan[-1] == (str(tmp_path / "r"), True)
    assert small_tree(tmp_path / "absent") == []


def test_small_tree_refuses_many_entries_or_many_bytes(tmp_path: Path) -> None:
    tree(tmp_path / "many", local_files.INLINE_TREE_ENTRIES)
    assert small_tree(tmp_path / "many") is None
    tree(tmp_path / "big", 1, size=local_files.INLINE_TREE_BYTES + 1)
    assert small_tree(tmp_path / "big") is None


async def test_a_small_tree_is_removed_without_a_thread(
    tmp_path: Path, no_threads: list[object]
) -> None:
    tree(tmp_path / "r", 3)
    await remove_tree(tmp_path / "r")
    assert not (tmp_path / "r").exists()
    assert no_threads == []
    await remove_tree(tmp_path / "r")  # idempotent
    assert no_threads == []


@pytest.mark.parametrize(("files", "size"), [(40, 10), (1, 2 * 1024 * 1024)])
async def test_a_large_tree_is_removed_in_a_thread(
    tmp_path: Path, no_threads: list[object], files: int, size: int
) -> None:
    tree(tmp_path / "r", files, size)
    await remove_tree(tmp_path / "r")
    assert not (tmp_path / "r").exists()
    assert len(no_threads) == 1


async def test_symlinks_are_removed_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("x")
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "link").symlink_to(outside)
    await remove_tree(tmp_path / "r")
    assert not (tmp_path / "r").exists()
    assert (outside / "keep").read_text() == "x"


async def test_small_writes_and_reads_stay_inline(tmp_path: Path, no_threads: list[object]) -> None:
    target = tmp_path / "a" / "b" / "script"
    await write_file(target, b"exit 0\n", anchor=tmp_path)
    assert await read_bounded(target, 100, anchor=tmp_path) == b"exit 0\n"
    assert await read_bounded(target, 3, anchor=tmp_path) == b"exi"
    assert await read_bounded(tmp_path / "none", 100, anchor=tmp_path) is None
    assert await read_bounded(tmp_path / "no" / "dir", 100, anchor=tmp_path) is None
    assert no_threads == []
    await write_file(target, b"y" * (local_files.INLINE_WRITE_BYTES + 1), anchor=tmp_path)
    assert len(no_threads) == 1
    await write_file(target, b"short", anchor=tmp_path)  # replaced, not appended to
    assert target.read_bytes() == b"short"


async def test_a_fifo_in_place_of_the_file_fails_instead_of_hanging(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "outputs")
    with trio.fail_after(5), pytest.raises(OSError, match="not a regular file"):
        await read_bounded(tmp_path / "outputs", 100, anchor=tmp_path)


SECRET = b"TOKEN=runtimed-side\n"


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    """A file outside the anchor (runtimed's side of the mount namespace)."""
    (tmp_path / "outside").mkdir()
    path = tmp_path / "outside" / "secret"
    path.write_bytes(SECRET)
    return path


async def test_reading_refuses_a_symlinked_file(tmp_path: Path, secret: Path) -> None:
    """F17: a task links $KRUNTIME_OUTPUTS to a runtimed-side file; nothing is read."""
    anchor = tmp_path / "ws"
    (anchor / "runs" / "u").mkdir(parents=True)
    (anchor / "runs" / "u" / "outputs").symlink_to(secret)
    with pytest.raises(local_files.SymlinkRefusedError) as caught:
        await read_bounded(anchor / "runs" / "u" / "outputs", 100, anchor=anchor)
    assert caught.value.path == anchor / "runs" / "u" / "outputs"
    assert str(caught.value).endswith("outputs is a symbolic link (not followed)")
    # a dangling link too: it is not "no file"
    (anchor / "runs" / "u" / "outputs").unlink()
    (anchor / "runs" / "u" / "outputs").symlink_to(tmp_path / "nowhere")
    with pytest.raises(local_files.SymlinkRefusedError):
        await read_bounded(anchor / "runs" / "u" / "outputs", 100, anchor=anchor)


@pytest.mark.parametrize("linked", ["runs", "runs/u"])
async def test_reading_refuses_a_symlinked_directory_on_the_way(
    tmp_path: Path, secret: Path, linked: str
) -> None:
    anchor = tmp_path / "ws"
    anchor.mkdir()
    fake = tmp_path / "outside"
    (fake / "u").mkdir()
    # a regular file where runs/u/outputs resolves if a directory link is followed
    (fake / "u" / "outputs").write_bytes(SECRET)
    if linked == "runs":
        (anchor / "runs").symlink_to(fake)
    else:
        (anchor / "runs").mkdir()
        (anchor / "runs" / "u").symlink_to(fake / "u")
    with pytest.raises(local_files.SymlinkRefusedError) as caught:
        await read_bounded(anchor / "runs" / "u" / "outputs", 100, anchor=anchor)
    assert caught.value.path == anchor / linked


async def test_writing_refuses_symlinks_and_changes_nothing_outside(
    tmp_path: Path, secret: Path
) -> None:
    anchor = tmp_path / "ws"
    work = anchor / "runs" / "u" / "work"
    work.mkdir(parents=True)
    (work / "main.py").symlink_to(secret)
    with pytest.raises(local_files.SymlinkRefusedError):
        await write_file(work / "main.py", b"overwritten", anchor=anchor)
    (work / "pkg").symlink_to(secret.parent)
    with pytest.raises(local_files.SymlinkRefusedError):
        await write_file(work / "pkg" / "new.py", b"x", anchor=anchor)
    assert os.listdir(secret.parent) == ["secret"]
    with open(secret, "rb") as unchanged:  # noqa: ASYNC230 - a small test file
        assert unchanged.read() == SECRET


async def test_paths_outside_the_anchor_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="is not in the subpath|not a plain path"):
        await read_bounded(tmp_path / "x", 10, anchor=tmp_path / "ws")
    with pytest.raises(ValueError, match="not a plain path"):
        await write_file(tmp_path / "ws", b"", anchor=tmp_path / "ws")


async def test_writing_into_existing_directories_creates_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Existing directories on the way are opened, not re-created (issue 6: no failing mkdir)."""
    (tmp_path / "runs" / "u1" / "work").mkdir(parents=True)
    made: list[str] = []
    real_mkdir = os.mkdir

    def recording_mkdir(path, *args, **kwargs):  # type: ignore[no-untyped-def]
        made.append(str(path))
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(local_files.os, "mkdir", recording_mkdir)
    await write_file(tmp_path / "runs" / "u1" / "work" / "script", b"exit 0\n", anchor=tmp_path)
    assert made == []
    assert (tmp_path / "runs" / "u1" / "work" / "script").read_bytes() == b"exit 0\n"
    # a missing directory is still created (and only that one)
    await write_file(tmp_path / "runs" / "u2" / "script", b"x", anchor=tmp_path)
    assert made == ["u2"]
    assert (tmp_path / "runs" / "u2" / "script").read_bytes() == b"x"


async def test_a_large_write_is_complete(tmp_path: Path) -> None:
    data = bytes(range(256)) * 1024  # 256 KiB: more than one write may take
    await write_file(tmp_path / "d" / "big", data, anchor=tmp_path)
    assert (tmp_path / "d" / "big").read_bytes() == data


async def test_a_write_that_makes_no_progress_fails_instead_of_spinning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(local_files.os, "write", lambda fd, data: 0)
    with pytest.raises(OSError, match="no progress"):
        await write_file(tmp_path / "f", b"data", anchor=tmp_path)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (b"exit 0\n", b"exit 0\n"),
        (b"a much longer old script\n", b"short"),
        (b"x", b"longer"),
        (b"old", b""),
    ],
)
async def test_a_file_is_rewritten_in_place_not_truncated_on_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, old: bytes, new: bytes
) -> None:
    """Issue 6: O_TRUNC made ext4 free and reallocate the kept script's blocks on every Run
    (~60-80 µs of CPU, the event loop blocked ~130 µs); the file is overwritten and only a
    longer old content is cut, with exactly the new bytes left either way."""
    target = tmp_path / "runs" / "u1" / "work" / "script"
    target.parent.mkdir(parents=True)
    target.write_bytes(old)
    inode = target.stat().st_ino
    flags_seen: list[int] = []
    real_open = os.open

    def spying(path: str, flags: int, *args: object, **kwargs: object) -> int:
        if path == "script":
            flags_seen.append(flags)
        return real_open(path, flags, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(local_files.os, "open", spying)
    await write_file(target, new, anchor=tmp_path)
    assert flags_seen
    assert not any(flags & os.O_TRUNC for flags in flags_seen)
    assert target.read_bytes() == new
    assert target.stat().st_ino == inode
