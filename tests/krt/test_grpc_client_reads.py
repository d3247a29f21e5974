"""krt.grpc.client: direct reads on plain TCP, and close() failing waiting calls at once."""

from __future__ import annotations

import socket
import struct
from typing import Any

import anyio
import anyio.abc
import pytest
import trio
import trio.testing

from krt.grpc import client as client_module
from krt.grpc.client import ConnectionLostError, GrpcConnection, GrpcStatusError
from krt.grpc.direct_reads import receive_when_ready
from krt.grpc.server import CallHandler
from krt.proto.executor.v1 import runtime_grpc
from krt.proto.executor.v1 import runtime_pb2 as pb

SERVICE = "executor.v1.FunctionRuntime"


class Echo(runtime_grpc.FunctionRuntimeServicer):  # type: ignore[misc]
    def __init__(self) -> None:
        self.release = trio.Event()
        self.started = trio.Event()

    async def InvokeFunction(self, message: Any) -> Any:  # noqa: N802
        if message.invocation_id == "hang":
            self.started.set()
            await self.release.wait()
        if message.invocation_id == "missing":
            from purerpc import NotFoundError

            raise NotFoundError("no such thing")
        return pb.InvokeFunctionResponse(invocation_id=message.invocation_id, output=message.input)


async def start(nursery: trio.Nursery, echo: Echo) -> GrpcConnection:
    handler = CallHandler({SERVICE: echo.service})
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    nursery.start_soon(listener.serve, handler)
    conn = GrpcConnection(await trio.open_tcp_stream("127.0.0.1", port), authority="x")
    await nursery.start(conn.run)
    return conn


def invoke(invocation_id: str, data: bytes = b"") -> bytes:
    return pb.InvokeFunctionRequest(invocation_id=invocation_id, input=data).SerializeToString()


async def test_receive_when_ready_reads_waits_and_reports_eof() -> None:
    left, right = socket.socketpair()
    left.setblocking(False)
    with left, right:
        async with trio.open_nursery() as nursery:
            got: list[bytes] = []

            async def read() -> None:
                got.append(await receive_when_ready(left.fileno(), 4))

            nursery.start_soon(read)
            await trio.testing.wait_all_tasks_blocked()
            assert got == []  # waits for readiness
            right.send(b"abcdefgh")
        assert got == [b"abcd"]  # at most max_bytes
        assert await receive_when_ready(left.fileno(), 100) == b"efgh"
        right.close()
        assert await receive_when_ready(left.fileno(), 100) == b""


@pytest.mark.parametrize("direct_reads", [True, False])
async def test_answers_and_statuses_arrive_with_either_reader(
    direct_reads: bool, nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(client_module, "DIRECT_READS", direct_reads)
    reads = []

    async def counted(fd: int, max_bytes: int) -> bytes:
        reads.append(fd)
        return await receive_when_ready(fd, max_bytes)

    monkeypatch.setattr(client_module, "receive_when_ready", counted)
    conn = await start(nursery, Echo())
    with trio.fail_after(10):
        for size in (0, 10, 300_000):  # a big answer spans many reads
            answer = await conn.unary_call(SERVICE, "InvokeFunction", invoke("a", b"x" * size))
            assert pb.InvokeFunctionResponse.FromString(answer).output == b"x" * size
        assert bool(reads) is direct_reads
        with pytest.raises(GrpcStatusError) as status:
            await conn.unary_call(SERVICE, "InvokeFunction", invoke("missing"))
        assert (status.value.code, status.value.message) == (5, "no such thing")
    conn.close()


@pytest.mark.parametrize("direct_reads", [True, False])
async def test_a_server_reset_fails_the_call_and_says_so(
    direct_reads: bool, nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ECONNRESET on a direct read is a broken connection, as trio's stream reports it."""
    monkeypatch.setattr(client_module, "DIRECT_READS", direct_reads)
    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    conn = GrpcConnection(await trio.open_tcp_stream("127.0.0.1", port), authority="x")
    await nursery.start(conn.run)
    accepted, _ = await listener.accept()
    with trio.fail_after(10):

        async def reset_soon() -> None:
            await accepted.recv(65536)  # the preface and the request
            accepted.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            accepted.close()

        nursery.start_soon(reset_soon)
        with pytest.raises(ConnectionLostError) as lost:
            await conn.unary_call(SERVICE, "InvokeFunction", invoke("a"))
        assert lost.value.dispatched
        await conn.wait_closed()
    assert "reset" in conn.close_reason
    listener.close()


async def test_close_fails_waiting_calls_before_any_task_runs(nursery: trio.Nursery) -> None:
    """A caller (runtimed's ServerChannel) abandons a connection with close(): every waiting
    call has failed with the given reason when close() returns, with no scheduling pass."""
    echo = Echo()
    conn = await start(nursery, echo)
    outcomes: list[BaseException] = []

    async def call() -> None:
        try:
            await conn.unary_call(SERVICE, "InvokeFunction", invoke("hang"))
        except ConnectionLostError as exc:
            outcomes.append(exc)

    with trio.fail_after(10):
        async with trio.open_nursery() as calls:
            calls.start_soon(call)
            calls.start_soon(call)
            await echo.started.wait()
            await trio.testing.wait_all_tasks_blocked()
            conn.close("connection lost")
            waiting = list(conn._calls.values())
            assert len(waiting) == 2
            assert all(c.done.is_set() for c in waiting)
            assert all(str(c.error) == "connection lost" for c in waiting)
        assert [(str(e), e.dispatched) for e in outcomes] == [("connection lost", True)] * 2
        await conn.wait_closed()
    assert conn.close_reason == "connection lost"
    assert not conn.usable
    echo.release.set()
