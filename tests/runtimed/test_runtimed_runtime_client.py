"""runtimed's Runtime Server client against the real Bash Runtime Server process."""

from __future__ import annotations

from pathlib import Path

import purerpc
import pytest
import trio
from runtimed_servers import free_port, runtime_server

from krt.grpc.client import GrpcStatusError
from runtimed import server_channel
from runtimed.runtime_client import (
    ExecuteSpec,
    ExecutionStillRunning,
    RpcRejected,
    RuntimeServerClient,
    ServerUnavailable,
    parse_address,
)
from runtimed.server_channel import status_code_name, status_detail
from runtimed.task_decisions import ExecState


async def wait_state(client: RuntimeServerClient, uid: str, *states: ExecState) -> object:
    with trio.fail_after(10):
        while True:
            view = await client.status(uid)
            if view.state in states:
                return view
            await trio.sleep(0.02)


async def test_execute_status_list_forget_cancel_and_health(tmp_path: Path) -> None:
    async with (
        runtime_server("bash", tmp_path / "srv") as (port, _),
        trio.open_nursery() as nursery,
    ):
        client = RuntimeServerClient("127.0.0.1", port)
        await nursery.start(client.run)
        healthy, _ = await client.health()
        assert healthy
        assert (await client.status("nope")).state is ExecState.NOT_FOUND
        work = tmp_path / "srv" / "t1"
        work.mkdir()
        (work / "script").write_text("echo out; echo err >&2; exit 4\n")
        await client.execute(ExecuteSpec(id="t1", working_dir=str(work), entrypoint="script"))
        with pytest.raises(RpcRejected) as rejected:
            await client.execute(ExecuteSpec(id="t1", working_dir=str(work), entrypoint="script"))
        assert rejected.value.code == "ALREADY_EXISTS"
        view = await wait_state(client, "t1", ExecState.FAILED)
        assert view.exit_code == 4  # type: ignore[attr-defined]
        assert view.stdout == "out\n"
        assert view.stderr == "err\n"
        assert set(await client.list()) == {"t1"}
        await client.forget("t1")
        await client.forget("t1")  # idempotent
        assert (await client.status("t1")).state is ExecState.NOT_FOUND
        # a running execution cannot be forgotten; Cancel stops it
        (work / "sleep").write_text("sleep 30\n")
        await client.execute(ExecuteSpec(id="t2", working_dir=str(work), entrypoint="sleep"))
        await wait_state(client, "t2", ExecState.RUNNING)
        with pytest.raises(ExecutionStillRunning):
            await client.forget("t2")
        await client.cancel("t2")
        await client.cancel("unknown")  # idempotent
        await wait_state(client, "t2", ExecState.FAILED)
        await client.forget("t2")
        nursery.cancel_scope.cancel()


async def probe(client: RuntimeServerClient) -> bool | None:
    """True/False: healthy / unavailable at once; None: no answer within 1 s."""
    with trio.move_on_after(1):
        try:
            return (await client.health())[0]
        except ServerUnavailable:
            return False
    return None


async def until(client: RuntimeServerClient, expected: bool) -> None:
    with trio.fail_after(10):
        while await probe(client) is not expected:  # noqa: ASYNC110 - polling a remote state
            await trio.sleep(0.05)


async def test_unreachable_server_fails_fast_then_reconnects(tmp_path: Path) -> None:
    port = free_port()
    async with trio.open_nursery() as nursery:
        client = RuntimeServerClient("127.0.0.1", port)
        await nursery.start(client.run)
        assert await probe(client) is False  # refused: fails fast, no hang
        async with runtime_server("bash", tmp_path / "srv", port=port) as (_, process):
            await until(client, True)
            process.kill()
            await process.wait()
            # the dead connection is noticed within one abandoned call, then calls fail fast
            await until(client, False)
        async with runtime_server("bash", tmp_path / "srv2", port=port):
            await until(client, True)
        assert client.connections >= 2
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("bad", ["nohost", "h:0", "h:70000", ":80", "h:x"])
def test_parse_address_rejects(bad: str) -> None:
    with pytest.raises(ValueError, match="HOST:PORT"):
        parse_address(bad)


def test_parse_address() -> None:
    assert parse_address("127.0.1.5:9091") == ("127.0.1.5", 9091)
    assert parse_address("[::1]:9") == ("::1", 9)


@pytest.mark.parametrize(
    ("code", "error", "name"),
    [
        (5, purerpc.NotFoundError, "NOT_FOUND"),
        (9, purerpc.FailedPreconditionError, "FAILED_PRECONDITION"),
        (6, purerpc.AlreadyExistsError, "ALREADY_EXISTS"),
        (99, purerpc.UnknownError, "UNKNOWN"),
    ],
)
def test_non_ok_statuses_become_purerpc_errors(
    code: int, error: type[purerpc.RpcFailedError], name: str
) -> None:
    failed = server_channel._rpc_failed(GrpcStatusError(code, "detail"))
    assert type(failed) is error
    assert status_code_name(failed) == name
    assert "detail" in status_detail(failed)
