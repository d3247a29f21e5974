"""Real Runtime Server processes for runtimed tests (the console scripts of this venv)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio

BIN = Path(sys.executable).parent
SCRIPTS = {"bash": BIN / "krt-bash-runtime", "python": BIN / "krt-python-runtime"}


def free_port() -> int:
    """A TCP port that was free a moment ago on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@asynccontextmanager
async def runtime_server(
    kind: str, work_dir: Path, *, port: int = 0
) -> AsyncIterator[tuple[int, trio.Process]]:
    """Start ``krt-<kind>-runtime`` and yield ``(port, process)`` once it is listening."""
    work_dir.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240
    process = await trio.lowlevel.open_process(
        [str(SCRIPTS[kind]), "--listen", f"127.0.0.1:{port}", "--work-dir", str(work_dir)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert process.stderr is not None
    try:
        buffer = b""
        bound = 0
        with trio.fail_after(20):
            while not bound:
                chunk = await process.stderr.receive_some(65536)
                if not chunk:
                    raise RuntimeError(f"{kind} server exited: {buffer.decode(errors='replace')}")
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    try:
                        entry = json.loads(line)
                    except ValueError:
                        continue
                    if entry.get("msg") == "listening" or entry.get("message") == "listening":
                        bound = int(entry["port"])
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_drain, process.stderr)
            yield bound, process
            nursery.cancel_scope.cancel()
    finally:
        if process.returncode is None:
            process.kill()
        with trio.CancelScope(shield=True):
            await process.wait()


async def _drain(stream: trio.abc.ReceiveStream) -> None:
    while await stream.receive_some(65536):
        pass
