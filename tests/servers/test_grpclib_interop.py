"""Interoperability: grpclib (asyncio, its own HTTP/2 stack) drives the Python Runtime Server.

Proves the server speaks standard gRPC, not only purerpc-to-purerpc: messages, trailers and
status codes as another implementation reads them.
"""

from __future__ import annotations

import asyncio
import json
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

from grpclib.const import Status
from grpclib.exceptions import GRPCError

from krt.proto.executor.v1 import runtime_pb2 as pb
from servers.python.adapter import PythonAdapter

RUNTIME = "executor.v1.Runtime"
FUNCTIONS = "executor.v1.FunctionRuntime"


async def test_grpclib_drives_tasks_and_functions(
    start_runtime_server: Callable[..., Any],
    grpclib_session: Callable[..., Any],
    tmp_path: Path,
) -> None:
    fn_dir = tmp_path / "fn"
    fn_dir.mkdir()
    (fn_dir / "handler.py").write_text(
        textwrap.dedent(
            """
            def handle(event):
                return {"hello": event["name"], "outputs": {"greeted": event["name"]}}
            """
        )
    )

    async def body(call: Any) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        health = await call(RUNTIME, "Health", pb.HealthRequest(), pb.HealthResponse)
        seen["healthy"] = health.healthy
        await call(
            RUNTIME,
            "Execute",
            pb.ExecuteRequest(id="t1", args=["-c", "print('from task')"]),
            pb.ExecuteResponse,
        )
        for _ in range(250):
            status = await call(RUNTIME, "Status", pb.StatusRequest(id="t1"), pb.StatusResponse)
            if status.state >= pb.EXECUTION_STATE_SUCCEEDED:
                break
            await asyncio.sleep(0.02)
        seen["task"] = (status.state, status.stdout)
        try:
            await call(RUNTIME, "Status", pb.StatusRequest(id="missing"), pb.StatusResponse)
        except GRPCError as exc:
            seen["missing"] = (exc.status, exc.message)

        registered = await call(
            FUNCTIONS,
            "RegisterFunction",
            pb.RegisterFunctionRequest(
                run_uid="run-1",
                registration_attempt=1,
                working_dir=str(fn_dir),
                handler="handler.handle",
                registration_digest="sha256:" + "a" * 64,
            ),
            pb.RegisterFunctionResponse,
        )
        seen["state"] = registered.state
        ref = registered.registration
        invoked = await call(
            FUNCTIONS,
            "InvokeFunction",
            pb.InvokeFunctionRequest(
                registration=ref,
                invocation_id="grpclib-1",
                input=json.dumps({"name": "grpclib"}).encode(),
                content_type="application/json",
            ),
            pb.InvokeFunctionResponse,
        )
        seen["invoke"] = (invoked.invocation_id, json.loads(invoked.output), dict(invoked.outputs))
        status = await call(
            FUNCTIONS,
            "FunctionStatus",
            pb.FunctionStatusRequest(registration=ref),
            pb.FunctionStatusResponse,
        )
        seen["activity"] = status.last_activity_unix_nano
        try:
            await call(
                FUNCTIONS,
                "InvokeFunction",
                pb.InvokeFunctionRequest(
                    registration=ref, input=b"[", content_type="application/json"
                ),
                pb.InvokeFunctionResponse,
            )
        except GRPCError as exc:
            seen["bad_input"] = exc.status
        await call(
            FUNCTIONS,
            "UnregisterFunction",
            pb.UnregisterFunctionRequest(registration=ref, drain_timeout_millis=1000),
            pb.UnregisterFunctionResponse,
        )
        try:
            await call(
                FUNCTIONS,
                "FunctionStatus",
                pb.FunctionStatusRequest(registration=ref),
                pb.FunctionStatusResponse,
            )
        except GRPCError as exc:
            seen["after_unregister"] = exc.status
        return seen

    async with start_runtime_server(PythonAdapter(), tmp_path) as server:
        seen = await grpclib_session(server.host, server.port, body)

    assert seen["healthy"] is True
    assert seen["task"] == (pb.EXECUTION_STATE_SUCCEEDED, "from task\n")
    assert seen["missing"] == (Status.NOT_FOUND, "execution missing not found")
    assert seen["state"] == pb.FUNCTION_REGISTRATION_STATE_READY
    assert seen["invoke"] == (
        "grpclib-1",
        {"hello": "grpclib", "outputs": {"greeted": "grpclib"}},
        {"greeted": "grpclib"},
    )
    assert seen["activity"] > 0
    assert seen["bad_input"] == Status.INVALID_ARGUMENT
    assert seen["after_unregister"] == Status.NOT_FOUND
