"""An independent gRPC implementation (grpclib on asyncio) drives the Bash Runtime Server.

The server runs on trio/purerpc in this thread; the client runs ``asyncio.run`` in a worker
thread, so the only thing the two share is standard gRPC over HTTP/2 on a TCP socket.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import trio
from bash_helpers import write_handler
from grpclib.client import Channel, UnaryUnaryMethod
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from krt.proto.executor.v1 import runtime_pb2 as pb
from servers.bash.adapter import BashAdapter
from servers.bash.payload import MAX_INPUT_BYTES

HANDLER = """
echo_arg() { printf '%s' "$1"; }
fail() { echo "it broke" >&2; return 9; }
"""


def _method(channel: Channel, service: str, name: str) -> UnaryUnaryMethod[Any, Any]:
    request = getattr(pb, f"{name}Request")
    reply = getattr(pb, f"{name}Response")
    return UnaryUnaryMethod(channel, f"/executor.v1.{service}/{name}", request, reply)


async def _client(port: int, fn_dir: Path, big: bytes) -> dict[str, Any]:
    """All calls of the scenario, on asyncio with grpclib; returns what the test checks."""
    seen: dict[str, Any] = {}
    channel = Channel("127.0.0.1", port)
    try:
        health = await _method(channel, "Runtime", "Health")(pb.HealthRequest())
        seen["healthy"] = health.healthy
        await _method(channel, "Runtime", "Execute")(
            pb.ExecuteRequest(id="task-1", args=["printf '%s' \"$((6 * 7))\""])
        )
        status_call = _method(channel, "Runtime", "Status")
        for _ in range(2000):
            status = await status_call(pb.StatusRequest(id="task-1"))
            if status.state in (pb.EXECUTION_STATE_SUCCEEDED, pb.EXECUTION_STATE_FAILED):
                break
            await asyncio.sleep(0.005)
        seen["task"] = (status.state, status.stdout)

        register = _method(channel, "FunctionRuntime", "RegisterFunction")
        invoke = _method(channel, "FunctionRuntime", "InvokeFunction")
        registered = await register(
            pb.RegisterFunctionRequest(
                run_uid="run-interop",
                registration_attempt=1,
                working_dir=str(fn_dir),
                handler="h.echo_arg",
                registration_digest="sha256:" + "e" * 64,
            )
        )
        seen["state"] = registered.state
        reply = await invoke(
            pb.InvokeFunctionRequest(
                registration=registered.registration,
                invocation_id="interop-1",
                input=big,
                content_type="application/json",
            )
        )
        seen["big"] = (reply.output == big, reply.content_type, reply.invocation_id)
        failing = await register(
            pb.RegisterFunctionRequest(
                run_uid="run-interop-2",
                registration_attempt=1,
                working_dir=str(fn_dir),
                handler="h.fail",
                registration_digest="sha256:" + "f" * 64,
            )
        )
        try:
            await invoke(pb.InvokeFunctionRequest(registration=failing.registration, input=b"{}"))
        except GRPCError as exc:
            seen["error"] = (exc.status, exc.message)
        await _method(channel, "FunctionRuntime", "UnregisterFunction")(
            pb.UnregisterFunctionRequest(registration=registered.registration)
        )
        try:
            await _method(channel, "FunctionRuntime", "FunctionStatus")(
                pb.FunctionStatusRequest(registration=registered.registration)
            )
        except GRPCError as exc:
            seen["after_unregister"] = exc.status
    finally:
        channel.close()
    return seen


async def test_grpclib_client_drives_the_bash_server(
    start_runtime_server: Callable[..., AbstractAsyncContextManager[Any]],
    tmp_path: Path,
) -> None:
    fn_dir = tmp_path / "srv" / "fn"
    fn_dir.mkdir(parents=True)
    write_handler(fn_dir, "h.sh", HANDLER)
    text = '$(touch pwned) `id` "\\u0000" é€𝄞\n'
    big = json.dumps(text * (MAX_INPUT_BYTES // 64), ensure_ascii=False).encode()
    assert len(big) <= MAX_INPUT_BYTES
    async with start_runtime_server(BashAdapter(), tmp_path / "srv") as server:
        with trio.fail_after(30):
            seen = await trio.to_thread.run_sync(asyncio.run, _client(server.port, fn_dir, big))
    assert seen["healthy"] is True
    assert seen["task"] == (pb.EXECUTION_STATE_SUCCEEDED, "42")
    assert seen["state"] == pb.FUNCTION_REGISTRATION_STATE_READY
    assert seen["big"] == (True, "application/json", "interop-1")
    assert seen["error"] == (
        Status.UNKNOWN,
        "ExitStatus: function fail exited with status 9; stderr tail: it broke",
    )
    assert seen["after_unregister"] == Status.NOT_FOUND
    assert not (fn_dir / "pwned").exists()
