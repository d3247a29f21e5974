"""Container log writes: small appends on the node's event loop, others one thread hop."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from localkube.node.logrotate import INLINE_WRITE_BYTES, RotatingLog


async def test_a_small_log_write_stays_on_the_loop_and_a_rotating_one_is_one_thread_hop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The node shares its event loop with the API server: a small append (a few records,
    no rotation) is written in place, a thread hop costing ten times the write itself;
    a write that rotates (parts, renames, flush) is one worker-thread call (issue 6)."""
    calls: list[str] = []
    original = trio.to_thread.run_sync

    async def counting(fn: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(getattr(fn, "__name__", repr(fn)))
        return await original(fn, *args, **kwargs)

    monkeypatch.setattr(trio.to_thread, "run_sync", counting)
    path = tmp_path / "0.log"
    async with RotatingLog(path, max_bytes=100, max_files=3) as log:
        calls.clear()
        await log.write(b"a" * 59 + b"\n")
        assert calls == []  # small, no rotation: on the loop
        assert path.read_bytes() == b"a" * 59 + b"\n"  # flushed at once
        await log.write(b"b" * 59 + b"\n" + b"c" * 59 + b"\n")  # rotates twice
    assert calls == ["_append", "close"]
    assert (tmp_path / "0.log.2").read_bytes() == b"a" * 59 + b"\n"
    assert (tmp_path / "0.log.1").read_bytes() == b"b" * 59 + b"\n"
    assert path.read_bytes() == b"c" * 59 + b"\n"


async def test_a_large_log_write_goes_to_a_worker_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    original = trio.to_thread.run_sync

    async def counting(fn: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(getattr(fn, "__name__", repr(fn)))
        return await original(fn, *args, **kwargs)

    monkeypatch.setattr(trio.to_thread, "run_sync", counting)
    path = tmp_path / "0.log"
    big = (b"x" * 99 + b"\n") * ((INLINE_WRITE_BYTES // 100) + 1)
    async with RotatingLog(path, max_bytes=10 * len(big), max_files=2) as log:
        calls.clear()
        await log.write(big)
    assert calls == ["_append", "close"]
    assert path.read_bytes() == big
