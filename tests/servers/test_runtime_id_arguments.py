"""Status, Cancel and Forget answer an ID that Execute would refuse as Execute does.

Seed 002 leaves the base ``Runtime`` service's error codes open; its FunctionRuntime part
treats an empty reference field as a caller bug (INVALID_ARGUMENT, never NotFound), and
gRPC's INVALID_ARGUMENT means "wrong whatever the server's state". An empty ID, or one with
characters Execute refuses, can never name an execution, so NOT_FOUND (which runtimed reads
as "not started yet" for Status and as "done" for Cancel/Forget) would be a wrong answer.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import purerpc
import pytest

from krt.proto.executor.v1 import runtime_pb2 as pb
from servers.python.adapter import PythonAdapter


async def _code(call: Any) -> tuple[purerpc.StatusCode, str]:
    with pytest.raises(purerpc.RpcFailedError) as excinfo:
        await call
    status = excinfo.value.status
    return status.status_code, status.status_message


@pytest.mark.parametrize(
    ("exec_id", "detail"),
    [("", "id is required"), ("a/b", "must start with a letter or digit"), ("x" * 129, "longer")],
)
async def test_invalid_ids_are_invalid_argument_on_every_method(
    start_runtime_server: Callable[..., Any], tmp_path: Path, exec_id: str, detail: str
) -> None:
    async with start_runtime_server(PythonAdapter(), tmp_path) as server:
        rt = server.runtime
        for call in (
            rt.Execute(pb.ExecuteRequest(id=exec_id, args=["-c", "pass"])),
            rt.Status(pb.StatusRequest(id=exec_id)),
            rt.Cancel(pb.CancelRequest(id=exec_id)),
            rt.Forget(pb.ForgetRequest(id=exec_id)),
        ):
            code, message = await _code(call)
            assert code == purerpc.StatusCode.INVALID_ARGUMENT
            assert detail in message


async def test_a_valid_unknown_id_is_still_not_found(
    start_runtime_server: Callable[..., Any], tmp_path: Path
) -> None:
    async with start_runtime_server(PythonAdapter(), tmp_path) as server:
        rt = server.runtime
        for call in (
            rt.Status(pb.StatusRequest(id="unknown-1")),
            rt.Cancel(pb.CancelRequest(id="unknown-1")),
            rt.Forget(pb.ForgetRequest(id="unknown-1")),
        ):
            code, message = await _code(call)
            assert (code, message) == (
                purerpc.StatusCode.NOT_FOUND,
                "execution unknown-1 not found",
            )
