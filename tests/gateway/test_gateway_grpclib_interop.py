"""The gateway's gRPC client against grpclib's server (an independent implementation).

grpclib runs on asyncio in its own thread; the gateway's client runs on trio in the test.
This checks the wire details a conforming server relies on: metadata, ``grpc-timeout``,
non-OK statuses in trailers-only responses, and that cancelling a call (RST_STREAM CANCEL)
cancels the server's handler.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import trio
from grpclib.const import Cardinality, Handler, Status
from grpclib.exceptions import GRPCError
from grpclib.server import Server, Stream

from krt.grpc.client import GrpcConnection, GrpcStatusError
from krt.proto.executor.v1 import runtime_pb2 as pb

SERVICE = "executor.v1.FunctionRuntime"


@dataclass
class GrpclibFake:
    """A FunctionRuntime on grpclib that echoes, fails on demand, or hangs until cancelled."""

    metadata: list[dict[str, str]] = field(default_factory=list)
    deadlines: list[float | None] = field(default_factory=list)
    cancelled: threading.Event = field(default_factory=threading.Event)
    started: threading.Event = field(default_factory=threading.Event)

    async def invoke(self, stream: Stream[Any, Any]) -> None:
        request = await stream.recv_message()
        assert request is not None
        self.metadata.append(dict(stream.metadata or {}))
        self.deadlines.append(stream.deadline.time_remaining() if stream.deadline else None)
        if request.invocation_id == "fail":
            raise GRPCError(Status.NOT_FOUND, "no such run")
        if request.invocation_id == "hang":
            self.started.set()
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
        await stream.send_message(
            pb.InvokeFunctionResponse(invocation_id=request.invocation_id, output=request.input)
        )

    def __mapping__(self) -> dict[str, Handler]:
        return {
            f"/{SERVICE}/InvokeFunction": Handler(
                self.invoke,
                Cardinality.UNARY_UNARY,
                pb.InvokeFunctionRequest,
                pb.InvokeFunctionResponse,
            )
        }


@pytest.fixture
def grpclib_server() -> Iterator[tuple[GrpclibFake, int]]:
    fake = GrpclibFake()
    loop = asyncio.new_event_loop()
    servers: list[Server] = []
    ready = threading.Event()
    port: list[int] = []

    def run() -> None:
        asyncio.set_event_loop(loop)

        async def start() -> None:
            server = Server([fake])  # created on its own loop's thread
            servers.append(server)
            await server.start("127.0.0.1", 0)
            port.append(server._server.sockets[0].getsockname()[1])  # noqa: SLF001
            ready.set()

        loop.run_until_complete(start())
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert ready.wait(10)
    try:
        yield fake, port[0]
    finally:

        async def stop() -> None:
            servers[0].close()
            await servers[0].wait_closed()

        asyncio.run_coroutine_threadsafe(stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


def request(invocation_id: str) -> bytes:
    message = pb.InvokeFunctionRequest(invocation_id=invocation_id, input=b'{"a": 1}')
    return bytes(message.SerializeToString())


async def test_calls_statuses_and_cancellation_against_grpclib(
    grpclib_server: tuple[GrpclibFake, int],
) -> None:
    fake, port = grpclib_server
    async with trio.open_nursery() as nursery:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        conn = GrpcConnection(stream, authority=f"127.0.0.1:{port}")
        await nursery.start(conn.run)

        raw = await conn.unary_call(
            SERVICE,
            "InvokeFunction",
            request("ok"),
            metadata=[("authorization", "Bearer tok"), ("x-kruntime-namespace", "demo")],
            timeout_seconds=20,
        )
        assert pb.InvokeFunctionResponse.FromString(raw).output == b'{"a": 1}'
        assert fake.metadata[0]["authorization"] == "Bearer tok"
        assert fake.metadata[0]["x-kruntime-namespace"] == "demo"
        assert fake.deadlines[0] is not None
        assert 15 < fake.deadlines[0] <= 20

        with pytest.raises(GrpcStatusError) as excinfo:
            await conn.unary_call(SERVICE, "InvokeFunction", request("fail"))
        assert (excinfo.value.code, excinfo.value.message) == (5, "no such run")

        with trio.CancelScope() as scope:

            async def cancel_when_started() -> None:
                await trio.to_thread.run_sync(fake.started.wait, 10)
                scope.cancel()

            nursery.start_soon(cancel_when_started)
            await conn.unary_call(SERVICE, "InvokeFunction", request("hang"))
        assert await trio.to_thread.run_sync(fake.cancelled.wait, 10)
        # the connection stays usable after the reset
        raw = await conn.unary_call(SERVICE, "InvokeFunction", request("again"))
        assert pb.InvokeFunctionResponse.FromString(raw).invocation_id == "again"
        nursery.cancel_scope.cancel()
