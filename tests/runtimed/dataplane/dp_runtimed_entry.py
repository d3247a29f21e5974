"""Test-only runtimed entrypoint: the real ``runtimed`` command with host-path peer TLS.

Tests have no Secret volumes, so this wrapper, used as the ``kruntimes/runtimed`` image
(localkube images overlay), takes a host directory of peer TLS material and sets it as the
daemon's ``--peer-tls-dir``. Everything else is the production daemon (which runs the task
and function lifecycles and the invoke proxy). Usage, as localkube runs it:
``python dp_runtimed_entry.py [--test-peer-tls-dir=DIR] [runtimed options]``.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import trio

import runtimed.__main__ as cli
from krt.kube.client import Kube
from krt.kube.clock import Clock
from runtimed import daemon

_serve_daemon = daemon.serve_daemon
_PEER_FLAG = "--test-peer-tls-dir="
_peer_tls_dir: Path | None = None


async def serve_with_peer_tls(
    config: daemon.DaemonConfig,
    *,
    kube: Kube | None = None,
    clock: Clock | None = None,
    task_status: Any = trio.TASK_STATUS_IGNORED,
) -> None:
    """``serve_daemon`` with the test's peer TLS directory."""
    if _peer_tls_dir is not None and config.dataplane is not None:
        config = dataclasses.replace(
            config, dataplane=dataclasses.replace(config.dataplane, peer_tls_dir=_peer_tls_dir)
        )
    await _serve_daemon(config, kube=kube, clock=clock, task_status=task_status)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1].startswith(_PEER_FLAG):
        _peer_tls_dir = Path(sys.argv.pop(1).removeprefix(_PEER_FLAG))
    cli.serve_daemon = serve_with_peer_tls  # type: ignore[assignment]
    cli.main()
