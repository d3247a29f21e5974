"""Container log writes cost the node's event loop (shared with the API server) one thread hop."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from localkube.node.logrotate import RotatingLog


async def test_a_log_write_is_one_worker_thread_call_rotation_included(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The node shares its event loop with the API server: each container log write (parts,
    rotation, flush) costs one thread hop, not one per file operation (issue 6)."""
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
        await log.write(b"b" * 59 + b"\n" + b"c" * 59 + b"\n")  # rotates twice
    assert calls == ["_append", "_append", "close"]
    assert (tmp_path / "0.log.2").read_bytes() == b"a" * 59 + b"\n"
    assert (tmp_path / "0.log.1").read_bytes() == b"b" * 59 + b"\n"
    assert path.read_bytes() == b"c" * 59 + b"\n"
