"""A ``localkube apiserver`` child process for a benchmark, started and stopped in one place.

Benchmarks that measure the API server (or a client of it) run it as its own process, so
that its CPU is not the benchmark's and can be read from ``/proc``: ``localkube apiserver``
on a temporary state directory (writes go to SQLite), port 0, the admin kubeconfig the
server writes there. :func:`running_apiserver_child` starts it, waits until it serves and
stops it on exit (SIGTERM, then SIGKILL after a grace period).
"""

from __future__ import annotations

import base64
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import trio
import trio.lowlevel
import yaml

__all__ = ["ApiServerChild", "running_apiserver_child"]

#: Seconds the child may take to start serving.
START_SECONDS: Final = 30.0
#: Seconds between SIGTERM and SIGKILL when stopping it.
STOP_GRACE_SECONDS: Final = 5.0
#: The line localkube prints once it serves.
_READY: Final = b"export KUBECONFIG="


@dataclass(frozen=True)
class ApiServerChild:
    """A running ``localkube apiserver`` child.

    Attributes:
        process: the child (its ``pid`` for CPU readings).
        kubeconfig: the admin kubeconfig it wrote in its state directory.
        server: the server URL (``https://127.0.0.1:PORT``).
        token: the admin bearer token.
        ca_pem: the cluster CA certificate (PEM bytes).
    """

    process: trio.Process
    kubeconfig: Path
    server: str
    token: str
    ca_pem: bytes


@asynccontextmanager
async def running_apiserver_child(state_dir: Path) -> AsyncIterator[ApiServerChild]:
    """Run ``localkube apiserver`` on ``state_dir`` for the duration of the context.

    Args:
        state_dir: an empty directory for the server's state (SQLite, certificates,
            kubeconfig); the caller removes it afterwards.

    Yields:
        The child, serving.

    Raises:
        RuntimeError: the child exited before serving.
        trio.TooSlowError: it did not serve within :data:`START_SECONDS`.
    """
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "localkube.cli", "apiserver"]
        + ["--state-dir", str(state_dir), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert process.stdout is not None
        output = b""
        with trio.fail_after(START_SECONDS):
            while _READY not in output:
                chunk = await process.stdout.receive_some()
                if not chunk:
                    raise RuntimeError("localkube apiserver exited before serving")
                output += chunk
        kubeconfig = state_dir / "kubeconfig"
        config = yaml.safe_load(kubeconfig.read_text())
        cluster = config["clusters"][0]["cluster"]
        yield ApiServerChild(
            process=process,
            kubeconfig=kubeconfig,
            server=cluster["server"],
            token=config["users"][0]["user"]["token"],
            ca_pem=base64.b64decode(cluster["certificate-authority-data"]),
        )
    finally:
        with trio.CancelScope(shield=True):
            await _stop(process)


async def _stop(process: trio.Process) -> None:
    """SIGTERM, then SIGKILL if it has not exited within :data:`STOP_GRACE_SECONDS`."""
    if process.returncode is None:
        process.send_signal(signal.SIGTERM)
        with trio.move_on_after(STOP_GRACE_SECONDS):
            await process.wait()
    if process.returncode is None:
        process.kill()
        await process.wait()
