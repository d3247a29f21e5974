"""``serve``: one purerpc server carrying both Runtime and FunctionRuntime on one port.

The listener is created here rather than by ``purerpc.Server.serve_async`` because that
binds every interface with ``SO_REUSEPORT`` and cannot take a host: a Runtime Server must
listen exactly where it is told (usually the Pod's loopback) and must fail loudly if the
port is taken. Connections are served by :class:`~krt.grpc.server.CallHandler`
(purerpc's framing, with per-call cancellation when the client cancels or goes away).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import anyio
import anyio.abc
import trio

from krt.grpc.server import CallHandler
from servers.common import limits
from servers.common.adapter import FunctionAdapter
from servers.common.executions import ExecutionManager
from servers.common.functions import FunctionService
from servers.common.registrations import WallClock
from servers.common.servicers import FunctionRuntimeServicer, RuntimeServicer

log = logging.getLogger("servers.app")


async def serve(
    adapter: FunctionAdapter,
    *,
    host: str,
    port: int,
    work_dir: Path,
    task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED,
    clock: WallClock = time.time_ns,
    cancel_grace_seconds: float = limits.CANCEL_GRACE_SECONDS,
) -> None:
    """Serve ``executor.v1.Runtime`` and ``executor.v1.FunctionRuntime`` until cancelled.

    Args:
        adapter: the language adapter (Python, Bash).
        host: address to bind, e.g. ``127.0.0.1``; empty binds every interface.
        port: TCP port; 0 picks a free one.
        work_dir: the server's work dir (created if missing); every working dir of a task
            or registration must lie under it.
        task_status: receives ``(host, bound_port)`` once the server is listening.
        clock: wall clock in nanoseconds for ``last_activity_unix_nano`` (tests inject one).
        cancel_grace_seconds: SIGTERM-to-SIGKILL grace for Cancel (seconds).

    Raises:
        OSError: the address cannot be bound (e.g. the port is in use).

    Never returns unless cancelled; on cancellation every task process group and worker
    is killed before it returns.
    """
    await trio.Path(work_dir).mkdir(parents=True, exist_ok=True)
    root = Path(await trio.Path(work_dir).resolve())
    listener = await anyio.create_tcp_listener(local_host=host or None, local_port=port)
    async with listener, trio.open_nursery() as nursery:
        executions = ExecutionManager(
            adapter, work_dir=root, nursery=nursery, cancel_grace_seconds=cancel_grace_seconds
        )
        functions = FunctionService(adapter, work_dir=root, nursery=nursery, clock=clock)
        runtime = RuntimeServicer(executions, adapter_name=adapter.name)
        function_runtime = FunctionRuntimeServicer(functions)
        services = {
            "executor.v1.Runtime": runtime.service,
            "executor.v1.FunctionRuntime": function_runtime.service,
        }
        try:
            bound = int(listener.extra(anyio.abc.SocketAttribute.local_port))
            handler = CallHandler(services)
            log.info(
                "listening",
                extra={"host": host, "port": bound, "work_dir": str(root), "runtime": adapter.name},
            )
            task_status.started((host, bound))
            await listener.serve(handler)
        finally:
            await functions.aclose()
            await executions.aclose()
            nursery.cancel_scope.cancel()
