"""examples/bash/greet.sh, the handler the README demo registers, works as documented."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import purerpc
import pytest

from krt.proto.executor.v1 import runtime_pb2 as pb
from servers.bash.adapter import BashAdapter

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "bash" / "greet.sh"


@pytest.fixture
def fn_dir(tmp_path: Path) -> Path:
    path = tmp_path / "srv" / "greet"
    path.mkdir(parents=True)
    shutil.copy(EXAMPLE, path / "greet.sh")
    return path


async def test_greet_example_over_grpc(
    start_runtime_server: Callable[..., AbstractAsyncContextManager[Any]],
    tmp_path: Path,
    fn_dir: Path,
) -> None:
    async with start_runtime_server(BashAdapter(), tmp_path / "srv") as server:
        registered = await server.functions.RegisterFunction(
            pb.RegisterFunctionRequest(
                run_uid="run-greet",
                registration_attempt=1,
                working_dir=str(fn_dir),
                handler="greet.hello",
                env={"GREETING": "Hi"},
                registration_digest="sha256:" + "c" * 64,
            )
        )
        ref = registered.registration

        async def invoke(payload: bytes) -> Any:
            return await server.functions.InvokeFunction(
                pb.InvokeFunctionRequest(
                    registration=ref, input=payload, content_type="application/json"
                )
            )

        reply = await invoke(b'{"name": "Ada"}')
        assert reply.content_type == "application/json"
        assert json.loads(reply.output) == {"message": "Hi, Ada!", "runtime": "bash"}
        reply = await invoke(b'{"name": "$(touch pwned)"}')
        assert json.loads(reply.output)["message"] == "Hi, $(touch pwned)!"
        assert not (fn_dir / "pwned").exists()
        assert json.loads((await invoke(b"{}")).output)["message"] == "Hi, world!"
        with pytest.raises(purerpc.UnknownError, match="status 2; stderr tail: hello: empty name"):
            await invoke(b'{"name": ""}')
