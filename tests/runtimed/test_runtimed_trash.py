"""Finished Runs' directories leave their path at once and are removed in quiet spells."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from runtimed.trash import Trash


def _run_dir(root: Path, name: str) -> Path:
    path = root / "runs" / name
    (path / "work").mkdir(parents=True)
    (path / "work" / "script").write_text("echo hi\n")
    (path / "outputs").write_text("A=1\n")
    return path


async def test_a_discarded_directory_leaves_its_path_at_once_and_is_removed_when_quiet(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    trash = Trash(tmp_path / "trash", quiet=0.5, max_delay=10.0)
    async with trio.open_nursery() as nursery:
        await nursery.start(trash.run)
        runs = [_run_dir(tmp_path, f"uid-{n}") for n in range(3)]
        for path in runs:
            assert trash.discard(path)
            assert not path.exists()  # the Run's path is free at once
            await trio.sleep(0.1)
        assert len(list((tmp_path / "trash").iterdir())) == 3  # not yet: discards keep coming
        await trio.sleep(0.39)  # 0.49 s after the last discard: not quiet long enough yet
        assert len(list((tmp_path / "trash").iterdir())) == 3
        await trash.wait_for_batch()
        assert list((tmp_path / "trash").iterdir()) == []
        assert trash.emptied == 3
        assert trash.pending == 0
        nursery.cancel_scope.cancel()


async def test_a_steady_stream_of_discards_is_removed_by_the_max_delay(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    trash = Trash(tmp_path / "trash", quiet=0.5, max_delay=2.0)
    async with trio.open_nursery() as nursery:
        await nursery.start(trash.run)
        first = _run_dir(tmp_path, "first")
        trash.discard(first)
        start = trio.current_time()

        async def keep_discarding() -> None:
            for n in range(100):
                trash.discard(_run_dir(tmp_path, f"uid-{n}"))
                await trio.sleep(0.2)  # never quiet for 0.5 s

        nursery.start_soon(keep_discarding)
        await trash.wait_for_batch()
        # the batch began 2 s after the first discard: it took those made by then (the
        # first, then one every 0.2 s from 0 to 2.0), not the ones after
        assert 11 <= trash.emptied <= 12
        assert trio.current_time() - start >= 2.0
        nursery.cancel_scope.cancel()


async def test_what_a_previous_process_left_in_the_trash_is_removed_on_start(
    tmp_path: Path,
) -> None:
    left = tmp_path / "trash" / "old.123.0"
    (left / "work").mkdir(parents=True)
    (left / "work" / "file").write_text("x")
    trash = Trash(tmp_path / "trash")
    async with trio.open_nursery() as nursery:
        await nursery.start(trash.run)
        assert list((tmp_path / "trash").iterdir()) == []
        nursery.cancel_scope.cancel()


async def test_a_missing_directory_counts_as_discarded(tmp_path: Path) -> None:
    trash = Trash(tmp_path / "trash")
    (tmp_path / "trash").mkdir()
    assert trash.discard(tmp_path / "runs" / "never-prepared")
    assert trash.pending == 0


async def test_a_directory_that_cannot_be_moved_is_left_to_the_caller(tmp_path: Path) -> None:
    trash = Trash(tmp_path / "no-such-trash-dir")  # run() never created it
    path = _run_dir(tmp_path, "uid")
    assert not trash.discard(path)
    assert path.exists()


def test_bounds_are_checked() -> None:
    with pytest.raises(ValueError, match="quiet"):
        Trash(Path("/tmp/x"), quiet=-1)
    with pytest.raises(ValueError, match="max_delay"):
        Trash(Path("/tmp/x"), quiet=2, max_delay=1)
