"""The durable Execute markers (:mod:`runtimed.execute_markers`) on real files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runtimed import execute_markers
from runtimed.execute_markers import (
    JOURNAL_NAME,
    MARKERS_DIR_NAME,
    ExecuteMarkerError,
    ExecuteMarkers,
    read_journal,
)


def names(markers: ExecuteMarkers) -> list[str]:
    return sorted(os.listdir(markers.root))


def journal_lines(markers: ExecuteMarkers) -> list[str]:
    return markers.journal.read_text().splitlines()


async def loaded(root: Path) -> ExecuteMarkers:
    markers = ExecuteMarkers(root)
    await markers.load()
    return markers


async def test_load_creates_the_directory_and_journal_under_the_workspace(
    tmp_path: Path,
) -> None:
    markers = ExecuteMarkers.in_workspace(tmp_path / "ws")
    assert markers.root == tmp_path / "ws" / MARKERS_DIR_NAME
    await markers.load()
    assert markers.root.is_dir()
    assert names(markers) == [JOURNAL_NAME]
    assert markers.uids() == []
    assert markers.attempt("u1") == 0


async def test_a_recorded_attempt_survives_a_new_process(tmp_path: Path) -> None:
    first = await loaded(tmp_path / "m")
    first.record("u1", 1)
    assert first.attempt("u1") == 1
    assert journal_lines(first) == ["+u1 1"]  # on disk at once, before Execute is sent
    assert read_journal(first.root) == {"u1": 1}
    second = await loaded(tmp_path / "m")  # a restarted runtimed
    assert second.attempt("u1") == 1
    assert second.attempt("u2") == 0


async def test_a_newer_attempt_replaces_the_older_marker(tmp_path: Path) -> None:
    markers = await loaded(tmp_path / "m")
    markers.record("u1", 1)
    markers.record("u1", 2)
    assert read_journal(markers.root) == {"u1": 2}
    assert markers.attempt("u1") == 2
    markers.record("u1", 2)  # the same attempt again: idempotent, nothing written
    markers.record("u1", 1)  # an older attempt never lowers the record
    assert journal_lines(markers) == ["+u1 1", "+u1 2"]
    assert markers.attempt("u1") == 2
    assert (await loaded(tmp_path / "m")).attempt("u1") == 2


async def test_replay_keeps_the_highest_attempt_and_honours_clears(tmp_path: Path) -> None:
    root = tmp_path / "m"
    root.mkdir()
    (root / JOURNAL_NAME).write_text(
        "+u1 1\n+u1 3\n+u1 2\n+u2 1\n-u2\n+u3 1\n-u3\n+u3 2\n+u4 1\n-nobody\n"
    )
    markers = await loaded(root)
    assert markers.attempt("u1") == 3
    assert markers.attempt("u2") == 0  # cleared
    assert markers.attempt("u3") == 2  # recorded again after its clear
    assert sorted(markers.uids()) == ["u1", "u3", "u4"]
    # load compacts: one line per live marker
    assert sorted(journal_lines(markers)) == ["+u1 3", "+u3 2", "+u4 1"]


async def test_a_torn_or_foreign_line_is_skipped_not_fatal(tmp_path: Path) -> None:
    """A node failure may tear the last line; nothing else of the journal is lost."""
    root = tmp_path / "m"
    root.mkdir()
    (root / JOURNAL_NAME).write_text("+u1 1\nnot a marker\n+u2 0\n+u3 x\n+u4 2\n+u5")
    markers = await loaded(root)
    assert sorted(markers.uids()) == ["u1", "u4"]
    assert markers.attempt("u4") == 2


async def test_a_failed_write_loses_only_its_own_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A line cut short (a full disk) is ended, so the next marker still counts."""
    markers = await loaded(tmp_path / "m")
    real_write_all = execute_markers._write_all

    def half_then_fail(fd: int, data: bytes) -> None:
        real_write_all(fd, data[: len(data) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(execute_markers, "_write_all", half_then_fail)
    with pytest.raises(ExecuteMarkerError, match="No space left"):
        markers.record("u1", 1)
    assert markers.attempt("u1") == 0
    monkeypatch.setattr(execute_markers, "_write_all", real_write_all)
    markers.record("u2", 1)
    assert read_journal(markers.root) == {"u2": 1}
    assert (await loaded(tmp_path / "m")).uids() == ["u2"]


async def test_clear_removes_the_marker_and_is_idempotent(tmp_path: Path) -> None:
    markers = await loaded(tmp_path / "m")
    markers.record("u1", 2)
    markers.clear("u1")
    markers.clear("u1")
    markers.clear("never-recorded")
    assert journal_lines(markers) == ["+u1 2", "-u1"]  # cleared once, nothing else written
    assert read_journal(markers.root) == {}
    assert markers.attempt("u1") == 0
    assert (await loaded(tmp_path / "m")).attempt("u1") == 0


async def test_prune_removes_markers_of_runs_not_kept(tmp_path: Path) -> None:
    markers = await loaded(tmp_path / "m")
    for uid in ("keep", "gone-1", "gone-2"):
        markers.record(uid, 1)
    assert markers.prune(lambda uid: uid == "keep") == 2
    assert read_journal(markers.root) == {"keep": 1}
    assert markers.uids() == ["keep"]


async def test_the_journal_is_compacted_once_mostly_dead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(execute_markers, "COMPACT_AFTER_LINES", 10)
    markers = await loaded(tmp_path / "m")
    markers.record("live", 1)
    for index in range(4):  # 1 + 8 lines: not yet
        markers.record(f"u{index}", 1)
        markers.clear(f"u{index}")
    assert len(journal_lines(markers)) == 9
    markers.record("u9", 1)  # the 10th line: rewritten with the live markers only
    assert sorted(journal_lines(markers)) == ["+live 1", "+u9 1"]
    assert names(markers) == [JOURNAL_NAME]  # the temporary file was renamed into place
    assert (await loaded(tmp_path / "m")).uids() == ["live", "u9"]


async def test_many_live_markers_delay_compaction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rewrite happens only when the dead lines outnumber the live markers 4 to 1."""
    monkeypatch.setattr(execute_markers, "COMPACT_AFTER_LINES", 4)
    markers = await loaded(tmp_path / "m")
    for index in range(3):
        markers.record(f"u{index}", 1)
    markers.record("u3", 1)  # 4 lines, 4 live: 4 < 4 * 4, no rewrite
    assert len(journal_lines(markers)) == 4
    for index in range(5):
        markers.record(f"x{index}", 1)
        markers.clear(f"x{index}")
    markers.record("x5", 1)
    assert len(journal_lines(markers)) == 15  # 15 < 4 * 4 live
    markers.clear("x5")  # the 16th line
    assert sorted(journal_lines(markers)) == ["+u0 1", "+u1 1", "+u2 1", "+u3 1"]


async def test_markers_of_the_older_file_layout_are_adopted(tmp_path: Path) -> None:
    """A workspace left by a runtimed that kept one file per marker loses no marker."""
    root = tmp_path / "m"
    root.mkdir()
    for name in ("u1.1", "u1.3", "u1.2", "u2.1", "notes.txt", "u3.x", "u4.0", ".5"):
        (root / name).touch()
    spare_dir = tmp_path / "m.spare"
    spare_dir.mkdir()
    (spare_dir / "1").touch()
    markers = await loaded(root)
    assert markers.attempt("u1") == 3
    assert markers.attempt("u2") == 1
    assert sorted(markers.uids()) == ["u1", "u2"]
    assert read_journal(root) == {"u1": 3, "u2": 1}
    # the adopted files and the spare directory go; foreign names are left alone
    assert names(markers) == [".5", JOURNAL_NAME, "notes.txt", "u3.x", "u4.0"]
    assert not spare_dir.exists()


async def test_a_missing_directory_fails_the_record_and_records_nothing(tmp_path: Path) -> None:
    markers = await loaded(tmp_path / "m")
    markers.journal.unlink()
    markers.root.rmdir()
    with pytest.raises(ExecuteMarkerError, match=r"attempt 1 of Run u1 in .*m/journal: No such"):
        markers.record("u1", 1)
    assert markers.attempt("u1") == 0
    assert not markers.root.exists()  # not silently recreated


async def test_a_journal_removed_while_open_is_created_again(tmp_path: Path) -> None:
    """A line never goes to a removed file nobody will read."""
    markers = await loaded(tmp_path / "m")
    markers.record("u1", 1)  # the journal is open now
    markers.journal.unlink()
    markers.record("u2", 1)
    assert journal_lines(markers) == ["+u2 1"]
    markers.close()
    markers.close()  # idempotent
    markers.clear("u2")  # opens it again
    assert journal_lines(markers) == ["+u2 1", "-u2"]


async def test_a_link_planted_at_the_journal_is_refused_not_followed(tmp_path: Path) -> None:
    """The workspace is shared with tasks: a marker must not be written anywhere else."""
    markers = await loaded(tmp_path / "m")
    target = tmp_path / "elsewhere" / "created-by-runtimed"
    target.parent.mkdir()
    markers.journal.unlink()
    markers.journal.symlink_to(target)
    with pytest.raises(ExecuteMarkerError, match="journal"):
        markers.record("u1", 1)
    assert not target.exists()
    assert markers.attempt("u1") == 0
    with pytest.raises(ExecuteMarkerError, match="cannot use the Execute marker directory"):
        await loaded(tmp_path / "m")  # nor read through one
    assert not target.exists()


async def test_a_link_planted_at_the_temporary_file_is_replaced_not_followed(
    tmp_path: Path,
) -> None:
    target = tmp_path / "elsewhere" / "created-by-runtimed"
    target.parent.mkdir()
    root = tmp_path / "m"
    root.mkdir()
    (root / f"{JOURNAL_NAME}.tmp").symlink_to(target)
    (root / JOURNAL_NAME).write_text("+u1 1\n")
    markers = await loaded(root)
    assert not target.exists()
    assert markers.uids() == ["u1"]
    assert not markers.journal.is_symlink()


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
        ("a b", 1, "not usable"),
        ("a\nb", 1, "not usable"),
        ("a\0b", 1, "not usable"),
        ("a\u2028b", 1, "not usable"),
        ("u1", 0, "attempt must be >= 1"),
    ],
)
async def test_bad_arguments_are_rejected_before_any_write(
    tmp_path: Path, uid: str, attempt: int, message: str
) -> None:
    markers = await loaded(tmp_path / "m")
    with pytest.raises(ValueError, match=message):
        markers.record(uid, attempt)
    assert journal_lines(markers) == []
