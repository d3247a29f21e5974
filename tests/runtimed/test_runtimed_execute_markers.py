"""The durable Execute markers (:mod:`runtimed.execute_markers`) on real files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runtimed import execute_markers
from runtimed.execute_markers import MARKERS_DIR_NAME, ExecuteMarkerError, ExecuteMarkers


def names(markers: ExecuteMarkers) -> list[str]:
    return sorted(os.listdir(markers.root))


async def loaded(root: Path) -> ExecuteMarkers:
    markers = ExecuteMarkers(root)
    await markers.load()
    return markers


async def test_load_creates_the_directory_under_the_workspace(tmp_path: Path) -> None:
    markers = ExecuteMarkers.in_workspace(tmp_path / "ws")
    assert markers.root == tmp_path / "ws" / MARKERS_DIR_NAME
    await markers.load()
    assert markers.root.is_dir()
    assert markers.uids() == []
    assert markers.attempt("u1") == 0


async def test_a_recorded_attempt_survives_a_new_process(tmp_path: Path) -> None:
    first = await loaded(tmp_path / "m")
    first.record("u1", 1)
    assert first.attempt("u1") == 1
    assert names(first) == ["u1.1"]
    second = await loaded(tmp_path / "m")  # a restarted runtimed
    assert second.attempt("u1") == 1
    assert second.attempt("u2") == 0


async def test_a_newer_attempt_replaces_the_older_marker(tmp_path: Path) -> None:
    markers = await loaded(tmp_path / "m")
    markers.record("u1", 1)
    markers.record("u1", 2)
    assert names(markers) == ["u1.2"]
    assert markers.attempt("u1") == 2
    markers.record("u1", 2)  # the same attempt again: idempotent
    markers.record("u1", 1)  # an older attempt never lowers the record
    assert names(markers) == ["u1.2"]
    assert markers.attempt("u1") == 2


async def test_load_keeps_the_highest_attempt_and_removes_older_markers(tmp_path: Path) -> None:
    root = tmp_path / "m"
    root.mkdir()
    for name in ("u1.1", "u1.3", "u1.2", "u2.1", "notes.txt", "u3.x", "u4.0", ".5"):
        (root / name).touch()
    markers = await loaded(root)
    assert markers.attempt("u1") == 3
    assert markers.attempt("u2") == 1
    assert sorted(markers.uids()) == ["u1", "u2"]
    # older markers go; foreign names are left alone
    assert names(markers) == [".5", "notes.txt", "u1.3", "u2.1", "u3.x", "u4.0"]


async def test_clear_removes_the_marker_and_is_idempotent(tmp_path: Path) -> None:
    markers = await loaded(tmp_path / "m")
    markers.record("u1", 2)
    markers.clear("u1")
    markers.clear("u1")
    markers.clear("never-recorded")
    assert names(markers) == []
    assert markers.attempt("u1") == 0
    assert (await loaded(tmp_path / "m")).attempt("u1") == 0


async def test_prune_removes_markers_of_runs_not_kept(tmp_path: Path) -> None:
    markers = await loaded(tmp_path / "m")
    for uid in ("keep", "gone-1", "gone-2"):
        markers.record(uid, 1)
    assert markers.prune(lambda uid: uid == "keep") == 2
    assert names(markers) == ["keep.1"]
    assert markers.uids() == ["keep"]


async def test_a_missing_directory_fails_the_record_and_records_nothing(tmp_path: Path) -> None:
    markers = await loaded(tmp_path / "m")
    markers.root.rmdir()
    with pytest.raises(ExecuteMarkerError, match=r"attempt 1 in .*m/u1\.1: No such file"):
        markers.record("u1", 1)
    assert markers.attempt("u1") == 0
    assert not markers.root.exists()  # not silently recreated


async def test_a_link_planted_at_a_marker_path_is_refused_not_followed(tmp_path: Path) -> None:
    """The workspace is shared with tasks: creating the marker must not create a file elsewhere."""
    markers = await loaded(tmp_path / "m")
    markers._spares.clear()  # no spare left: the marker is created with O_NOFOLLOW
    target = tmp_path / "elsewhere" / "created-by-runtimed"
    target.parent.mkdir()
    (markers.root / "u1.1").symlink_to(target)
    with pytest.raises(ExecuteMarkerError, match="u1.1"):
        markers.record("u1", 1)
    assert not target.exists()
    assert markers.attempt("u1") == 0


async def test_a_link_planted_at_a_marker_path_is_replaced_by_a_spare(tmp_path: Path) -> None:
    """A spare renamed into place replaces the link itself: nothing is created elsewhere."""
    markers = await loaded(tmp_path / "m")
    target = tmp_path / "elsewhere" / "created-by-runtimed"
    target.parent.mkdir()
    (markers.root / "u1.1").symlink_to(target)
    markers.record("u1", 1)
    assert not target.exists()
    marker = markers.root / "u1.1"
    assert marker.is_file()
    assert not marker.is_symlink()
    assert markers.attempt("u1") == 1


async def test_markers_are_spares_renamed_in_and_out(tmp_path: Path) -> None:
    """Issue 6: no inode is allocated or freed per Run while spares last."""
    markers = await loaded(tmp_path / "m")
    spare_dir = tmp_path / f"m{execute_markers._SPARE_SUFFIX}"
    spares = sorted(spare_dir.iterdir())
    assert len(spares) == execute_markers.SPARE_MARKERS
    inodes = {p.stat().st_ino for p in spares}
    markers.record("u1", 1)
    markers.record("u2", 1)
    markers.record("u2", 2)  # the retry's marker replaces attempt 1's
    assert sorted(p.name for p in markers.root.iterdir()) == ["u1.1", "u2.2"]
    assert {p.stat().st_ino for p in markers.root.iterdir()} <= inodes
    markers.clear("u1")
    markers.clear("u2")
    assert list(markers.root.iterdir()) == []
    assert {p.stat().st_ino for p in spare_dir.iterdir()} == inodes
    again = await loaded(tmp_path / "m")  # a restarted runtimed reuses the spares it finds
    assert {p.stat().st_ino for p in spare_dir.iterdir()} == inodes
    again.record("u3", 1)
    assert (markers.root / "u3.1").stat().st_ino in inodes


async def test_without_a_spare_directory_markers_are_created_and_removed(tmp_path: Path) -> None:
    (tmp_path / f"m{execute_markers._SPARE_SUFFIX}").write_text("in the way")
    markers = await loaded(tmp_path / "m")
    markers.record("u1", 1)
    assert (markers.root / "u1.1").is_file()
    markers.clear("u1")
    assert list(markers.root.iterdir()) == []


async def test_a_directory_that_cannot_be_created_fails_the_load(tmp_path: Path) -> None:
    blocker = tmp_path / "m"
    blocker.write_text("a file where the directory should be")
    with pytest.raises(ExecuteMarkerError, match=r"cannot use the Execute marker directory .*/m"):
        await ExecuteMarkers(blocker).load()


@pytest.mark.parametrize(
    ("uid", "attempt", "message"),
    [
        ("", 1, "not usable"),
        ("a/b", 1, "not usable"),
        ("..", 1, "not usable"),
        ("u1", 0, "attempt must be >= 1"),
    ],
)
async def test_bad_arguments_are_rejected_before_any_write(
    tmp_path: Path, uid: str, attempt: int, message: str
) -> None:
    markers = await loaded(tmp_path / "m")
    with pytest.raises(ValueError, match=message):
        markers.record(uid, attempt)
    assert names(markers) == []
