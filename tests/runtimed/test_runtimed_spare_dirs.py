"""Spare Run directories (:mod:`runtimed.spare_dirs`): renamed into place, reclaimed from the trash."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import trio

from krt.api.run import Source
from runtimed import spare_dirs
from runtimed.sources import Workspace, prepare_source
from runtimed.spare_dirs import SpareDirs
from runtimed.trash import Trash


def pool(tmp_path: Path, size: int = 3) -> SpareDirs:
    spares = SpareDirs(tmp_path / "spare", size=size)
    spares.fill()
    return spares


def used_run_dir(root: Path) -> Path:
    """A finished Run's directory as a task may leave it."""
    (root / "work" / "sub").mkdir(parents=True)
    (root / "work" / "script").write_text("exit 0\n")
    (root / "work" / "sub" / "data").write_text("x")
    (root / "outputs").write_text("A=1\n")
    return root


def test_fill_makes_empty_run_directories_and_clears_leftovers(tmp_path: Path) -> None:
    left = tmp_path / "spare" / "old"
    (left / "work").mkdir(parents=True)
    (left / "work" / "file").write_text("x")
    spares = pool(tmp_path, size=3)
    assert spares.ready == 3
    assert spares.wanted() == 0
    made = sorted(os.listdir(tmp_path / "spare"))
    assert len(made) == 3
    assert "old" not in made
    for name in made:
        assert os.listdir(tmp_path / "spare" / name) == ["work"]
        # an empty script file, ready to be overwritten (issue 6: no inode made in a burst)
        assert os.listdir(tmp_path / "spare" / name / "work") == ["script"]
        script = tmp_path / "spare" / name / "work" / "script"
        assert script.is_file()
        assert not script.is_symlink()
        assert script.stat().st_size == 0


def test_take_renames_a_spare_into_place_until_the_pool_is_empty(tmp_path: Path) -> None:
    spares = pool(tmp_path, size=2)
    (tmp_path / "runs").mkdir()
    assert spares.take(tmp_path / "runs" / "a")
    assert spares.take(tmp_path / "runs" / "b")
    assert not spares.take(tmp_path / "runs" / "c")
    assert os.listdir(tmp_path / "runs" / "a") == ["work"]
    assert not (tmp_path / "runs" / "c").exists()
    assert os.listdir(tmp_path / "spare") == []


def test_take_keeps_the_spare_when_the_target_is_in_the_way(tmp_path: Path) -> None:
    spares = pool(tmp_path, size=1)
    target = tmp_path / "runs" / "a"
    target.mkdir(parents=True)
    (target / "leftover").write_text("x")
    assert not spares.take(target)  # not empty: not replaced
    assert not spares.take(tmp_path / "no-such-parent" / "a")
    assert spares.ready == 1  # neither failure used up the pool
    assert spares.take(tmp_path / "runs" / "b")


@pytest.mark.parametrize("where", ["work/stray", "stray"])
def test_take_never_hands_over_a_spare_something_wrote_into(tmp_path: Path, where: str) -> None:
    """A process of an earlier Run that left its group may still write into its old
    directory after the pool took it back: such a spare is discarded, not handed over."""
    spares = pool(tmp_path, size=1)
    (tmp_path / "runs").mkdir()
    assert spares.take(tmp_path / "runs" / "earlier")  # a Run used it, then it came back
    reclaimed = spares.reclaim(str(tmp_path / "runs" / "earlier"))
    assert reclaimed is not None
    spares.add([reclaimed])
    spare = Path(reclaimed[0])
    (spare / where).write_text("from an earlier Run")
    target = tmp_path / "runs" / "a"
    assert not spares.take(target)
    assert not target.exists()  # the caller creates a new one
    assert spares.ready == 0


def test_a_spare_no_run_used_is_handed_over_without_listing_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 6: what fill() made was never any Run's directory, so no earlier Run's process
    can write into it; only reclaimed spares are listed before they are handed over."""
    spares = pool(tmp_path, size=2)
    listed: list[str] = []
    real = spare_dirs._still_empty

    def recording(run_dir: str, *, keep_file: bool) -> bool:
        listed.append(run_dir)
        return real(run_dir, keep_file=keep_file)

    monkeypatch.setattr(spare_dirs, "_still_empty", recording)
    (tmp_path / "runs").mkdir()
    assert spares.take(tmp_path / "runs" / "a")
    assert listed == []
    assert os.listdir(tmp_path / "runs" / "a" / "work") == []  # its script was removed
    reclaimed = spares.reclaim(str(tmp_path / "runs" / "a"))
    assert reclaimed is not None
    spares.add([reclaimed])
    assert spares.take(tmp_path / "runs" / "b")  # the reclaimed one (taken last in, first out)
    assert listed == [str(tmp_path / "runs" / "b")]
    assert spares.take(tmp_path / "runs" / "c")  # the other new one
    assert listed == [str(tmp_path / "runs" / "b")]


def test_take_skips_spares_that_are_gone(tmp_path: Path) -> None:
    spares = pool(tmp_path, size=2)
    first = tmp_path / "spare" / sorted(os.listdir(tmp_path / "spare"))[-1]
    (first / "work" / "script").unlink()
    (first / "work").rmdir()
    first.rmdir()
    (tmp_path / "runs").mkdir()
    assert spares.take(tmp_path / "runs" / "a")
    assert spares.ready == 0


async def test_preparation_takes_a_spare_instead_of_making_directories(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workspace = Workspace(root=tmp_path)
    spares = SpareDirs(workspace.spare_dir(), size=1)
    spares.fill()
    workspace.runs_dir().mkdir()
    made: list[str] = []
    real_mkdir = os.mkdir

    def recording_mkdir(path, *args, **kwargs):  # type: ignore[no-untyped-def]
        made.append(str(path))
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", recording_mkdir)
    files = workspace.files("u1")
    await prepare_source(Source(inline="exit 0\n"), files, spares=spares)
    assert made == []
    assert spares.ready == 0
    assert sorted(os.listdir(files.root)) == ["work"]
    assert os.listdir(files.work) == ["script"]
    assert (files.work / "script").read_text() == "exit 0\n"
    # the pool is empty: the next Run makes its directories as before
    other = workspace.files("u2")
    await prepare_source(Source(inline="exit 1\n"), other, spares=spares)
    assert made == [str(other.root), str(other.work)]


def test_reclaim_empties_a_used_run_directory_into_the_pool(tmp_path: Path) -> None:
    spares = pool(tmp_path, size=3)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("not runtimed's to remove")
    run = used_run_dir(tmp_path / "runs" / "u1")
    (run / "work" / "link").symlink_to(outside)
    (run / "dirlink").symlink_to(outside)
    reclaimed = spares.reclaim(str(run))
    assert reclaimed is not None
    moved, kept = reclaimed
    assert moved == str(run)  # emptied where it is: no rename (issue 6)
    assert os.listdir(moved) == ["work"]
    assert os.listdir(Path(moved) / "work") == ["script"]  # the default inline file stays
    assert kept
    assert (outside / "keep").read_text() == "not runtimed's to remove"  # links not followed
    spares.add([reclaimed])
    assert spares.ready == 3  # never more than its size


@pytest.mark.parametrize("change", ["executable", "hard link", "link", "directory"])
def test_reclaim_removes_a_script_file_unlike_a_new_one(tmp_path: Path, change: str) -> None:
    spares = pool(tmp_path, size=1)
    run = used_run_dir(tmp_path / "runs" / "u1")
    script = run / "work" / "script"
    if change == "executable":
        script.chmod(0o755)
    elif change == "hard link":
        os.link(script, tmp_path / "other-name")
    elif change == "link":
        script.unlink()
        script.symlink_to(tmp_path / "other-name")
    else:
        script.unlink()
        script.mkdir()
    reclaimed = spares.reclaim(str(run))
    assert reclaimed is not None
    moved, kept = reclaimed
    assert not kept
    assert os.listdir(Path(moved) / "work") == []


def test_take_removes_a_kept_script_unless_the_caller_rewrites_it(tmp_path: Path) -> None:
    spares = SpareDirs(tmp_path / "spare", size=2)
    spares.fill()
    spares.take(tmp_path / "drain-1")
    spares.take(tmp_path / "drain-2")
    for n in range(2):
        reclaimed = spares.reclaim(str(used_run_dir(tmp_path / "runs" / f"u{n}")))
        assert reclaimed is not None
        spares.add([reclaimed])
    assert spares.take(tmp_path / "runs" / "keeps", keep_file=True)
    assert os.listdir(tmp_path / "runs" / "keeps" / "work") == ["script"]
    assert spares.take(tmp_path / "runs" / "other")
    assert os.listdir(tmp_path / "runs" / "other" / "work") == []


async def test_a_kept_script_is_rewritten_in_place_and_other_sources_do_not_see_it(
    tmp_path: Path,
) -> None:
    workspace = Workspace(root=tmp_path)
    workspace.runs_dir().mkdir()
    spares = SpareDirs(workspace.spare_dir(), size=2)
    spares.fill()
    for uid in ("a", "b"):
        spares.take(workspace.files(uid).root)
        (workspace.files(uid).work / "script").write_text("old task\n")
        reclaimed = spares.reclaim(str(workspace.files(uid).root))
        assert reclaimed is not None
        spares.add([reclaimed])
    files = workspace.files("u1")
    await prepare_source(Source(inline="exit 0\n"), files, spares=spares)
    assert os.listdir(files.work) == ["script"]
    assert (files.work / "script").read_text() == "exit 0\n"
    other = workspace.files("u2")
    await prepare_source(Source(inline="echo\n", inline_path="main.sh"), other, spares=spares)
    assert os.listdir(other.work) == ["main.sh"]


@pytest.mark.parametrize("tamper", ["root link", "work link", "no work", "work file", "mode"])
def test_reclaim_refuses_a_directory_unlike_a_new_one(tmp_path: Path, tamper: str) -> None:
    spares = pool(tmp_path, size=1)
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "work").mkdir(parents=True)
    (elsewhere / "work" / "precious").write_text("x")
    run = tmp_path / "runs" / "u1"
    if tamper == "root link":
        run.parent.mkdir()
        run.symlink_to(elsewhere)
    else:
        used_run_dir(run)
    if tamper == "work link":
        for entry in (run / "work").iterdir():
            if entry.is_dir():
                (entry / "data").unlink()
                entry.rmdir()
            else:
                entry.unlink()
        (run / "work").rmdir()
        (run / "work").symlink_to(elsewhere / "work")
    elif tamper == "no work":
        os.rename(run / "work", tmp_path / "moved-away")
    elif tamper == "work file":
        os.rename(run / "work", tmp_path / "moved-away")
        (run / "work").write_text("a file named work")
    elif tamper == "mode":
        run.chmod(stat.S_IMODE(run.stat().st_mode) ^ 0o001)
    assert spares.reclaim(str(run)) is None
    assert (elsewhere / "work" / "precious").exists()


@pytest.mark.parametrize(
    ("attributes", "reused"),
    [
        (["system.posix_acl_access"], False),
        (["user.left-by-a-task"], False),
        (["security.selinux"], True),  # the file system's label, on new files too
        ([], True),
    ],
)
def test_reclaim_reuses_only_directories_without_extended_attributes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, attributes: list[str], reused: bool
) -> None:
    spares = pool(tmp_path, size=1)
    run = used_run_dir(tmp_path / "runs" / "u1")
    monkeypatch.setattr(spare_dirs.os, "listxattr", lambda path, **kw: attributes)
    assert (spares.reclaim(str(run)) is not None) is reused


def test_a_script_with_extended_attributes_is_not_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spares = pool(tmp_path, size=1)
    run = used_run_dir(tmp_path / "runs" / "u1")
    script = str(run / "work" / "script")
    monkeypatch.setattr(
        spare_dirs.os,
        "listxattr",
        lambda path, **kw: ["user.left-by-a-task"] if path == script else [],
    )
    reclaimed = spares.reclaim(str(run))
    assert reclaimed is not None
    assert reclaimed[1] is False
    assert os.listdir(Path(reclaimed[0]) / "work") == []


def test_an_empty_or_unfilled_pool_reclaims_nothing(tmp_path: Path) -> None:
    run = used_run_dir(tmp_path / "runs" / "u1")
    assert SpareDirs(tmp_path / "spare").reclaim(str(run)) is None  # fill() never ran
    assert SpareDirs(tmp_path / "spare").wanted() == 0
    with pytest.raises(ValueError, match="spare directory count"):
        SpareDirs(tmp_path / "spare", size=-1)


async def test_the_trash_gives_the_pool_what_it_wants_and_removes_the_rest(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    spares = SpareDirs(tmp_path / "spare", size=3)
    spares.fill()
    (tmp_path / "runs").mkdir()
    for name in ("a", "b"):
        assert spares.take(tmp_path / "runs" / name)
    assert spares.wanted() == 2
    trash = Trash(tmp_path / "trash", quiet=0.5, spares=spares)
    async with trio.open_nursery() as nursery:
        await nursery.start(trash.run)
        for n in range(4):
            assert trash.discard(used_run_dir(tmp_path / "runs" / f"u{n}"))
        await trash.wait_for_batch()
        # two of the four went back to the pool, emptied where they are; two were removed
        kept = sorted(os.listdir(tmp_path / "trash"))
        assert len(kept) == 2
        assert trash.emptied == 4
        assert trash.pending == 0
        assert spares.ready == 3
        assert len(os.listdir(tmp_path / "spare")) == 1
        for name in kept:
            assert os.listdir(tmp_path / "trash" / name) == ["work"]
            assert os.listdir(tmp_path / "trash" / name / "work") in ([], ["script"])
        # the next batch handles only what was discarded since: the pool's spares stay
        assert trash.discard(used_run_dir(tmp_path / "runs" / "u9"))
        await trash.wait_for_batch()
        assert sorted(os.listdir(tmp_path / "trash")) == kept
        assert spares.ready == 3
        # and the pool takes them from the trash
        for name in ("c", "d", "e"):
            assert spares.take(tmp_path / "runs" / name)
            assert os.listdir(tmp_path / "runs" / name) == ["work"]
        assert os.listdir(tmp_path / "trash") == []
        nursery.cancel_scope.cancel()


def test_a_pool_that_cannot_be_made_is_off_and_runs_make_their_directories(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "spare").write_text("a file where the pool's directory should be")
    spares = SpareDirs(tmp_path / "spare", size=2)
    spares.fill()
    assert "spare Run directories" in caplog.text
    assert spares.ready == 0
    assert spares.wanted() == 0
    assert not spares.take(tmp_path / "run")
    assert spares.reclaim(str(used_run_dir(tmp_path / "runs" / "u1"))) is None


async def test_a_new_spares_script_file_is_overwritten_not_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 6: a Run whose inline source goes to ``script`` reuses the new spare's empty
    file (same inode, no O_CREAT of a new one); any other Run gets it removed."""
    workspace = Workspace(root=tmp_path)
    workspace.runs_dir().mkdir()
    spares = SpareDirs(workspace.spare_dir(), size=2)
    spares.fill()
    inodes = {
        (workspace.spare_dir() / name / "work" / "script").stat().st_ino
        for name in os.listdir(workspace.spare_dir())
    }
    files = workspace.files("u1")
    await prepare_source(Source(inline="exit 0\n"), files, spares=spares)
    assert (files.work / "script").read_text() == "exit 0\n"
    assert (files.work / "script").stat().st_ino in inodes
    other = workspace.files("u2")
    await prepare_source(Source(inline="exit 0\n", inline_path="main.sh"), other, spares=spares)
    assert os.listdir(other.work) == ["main.sh"]
