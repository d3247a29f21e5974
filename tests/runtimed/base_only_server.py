"""A Runtime Server that serves only the base ``executor.v1.Runtime`` service (no FunctionRuntime).

Issue 6: runtimed must work with any conforming Runtime Server, including one that
implements only the base service. This test-only server reuses the built-in servers' Bash
execution logic but registers the ``Runtime`` service alone. localkube runs it as the image
``test/base-only-runtime`` (an images overlay).

Usage: ``python base_only_server.py --listen HOST:PORT --work-dir DIR``
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import anyio
import anyio.abc
import trio

from krt.grpc.server import CallHandler
from servers.bash.adapter import BashAdapter
from servers.common.executions import ExecutionManager
from servers.common.servicers import RuntimeServicer


async def serve(host: str, port: int, work_dir: Path) -> None:
    work_dir.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 - start-up
    root = work_dir.resolve()  # noqa: ASYNC240
    listener = await anyio.create_tcp_listener(local_host=host or None, local_port=port)
    async with listener, trio.open_nursery() as nursery:
        adapter = BashAdapter()
        executions = ExecutionManager(adapter, work_dir=root, nursery=nursery)
        runtime = RuntimeServicer(executions, adapter_name=adapter.name)
        bound = int(listener.extra(anyio.abc.SocketAttribute.local_port))
        print(json.dumps({"message": "listening", "port": bound}), file=sys.stderr, flush=True)
        await listener.serve(CallHandler({"executor.v1.Runtime": runtime.service}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--listen", required=True)
    parser.add_argument("--work-dir", required=True, type=Path)
    args = parser.parse_args()
    host, _, port = args.listen.rpartition(":")
    trio.run(serve, host, int(port), args.work_dir)


if __name__ == "__main__":
    main()
