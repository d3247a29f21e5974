"""Every gRPC connection remembers a bounded number of closed HTTP/2 streams (issue 10 soak).

h2's default memory is 65,536 closed streams per connection (~10 MiB), filled one entry per
call: the soak's RSS growth in runtimed, the Runtime Server and the gateway.
"""

from __future__ import annotations

from typing import Any

import anyio
import anyio.abc
import h2.config
import h2.connection
import pytest
import trio

from krt.grpc import closed_streams
from krt.grpc.client import GrpcConnection
from krt.grpc.closed_streams import CLOSED_STREAM_MEMORY, limit_closed_stream_memory
from krt.grpc.server import CallHandler
from krt.proto.executor.v1 import runtime_grpc
from krt.proto.executor.v1 import runtime_pb2 as pb

SERVICE = "executor.v1.FunctionRuntime"


class Echo(runtime_grpc.FunctionRuntimeServicer):  # type: ignore[misc]
    async def InvokeFunction(self, message: Any) -> Any:  # noqa: N802
        return pb.InvokeFunctionResponse(invocation_id=message.invocation_id)


def test_the_default_memory_is_far_below_h2s() -> None:
    connection = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    assert len(connection._closed_streams) == 0
    limit_closed_stream_memory(connection)
    assert connection._closed_streams._size_limit == CLOSED_STREAM_MEMORY
    assert CLOSED_STREAM_MEMORY < h2.connection.H2Connection.MAX_CLOSED_STREAMS // 8


@pytest.mark.parametrize("streams", [0, -1])
def test_a_memory_below_one_stream_is_refused(streams: int) -> None:
    connection = h2.connection.H2Connection()
    with pytest.raises(ValueError, match="streams must be >= 1"):
        limit_closed_stream_memory(connection, streams=streams)


def test_an_object_without_h2s_memory_is_refused() -> None:
    with pytest.raises(TypeError, match="no h2 closed-stream memory"):
        limit_closed_stream_memory(object())


async def test_client_and_server_forget_old_closed_streams(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(closed_streams, "CLOSED_STREAM_MEMORY", 8)
    server_connections: list[Any] = []

    handle = closed_streams.handle_closed_streams

    def recording(h2_connection: Any) -> None:
        server_connections.append(h2_connection)
        handle(h2_connection)

    # the unary connection loop (every executor.v1 service) looks the function up at call time
    monkeypatch.setattr(closed_streams, "handle_closed_streams", recording)
    handler = CallHandler({SERVICE: Echo().service})
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, trio.open_nursery() as nursery:
        nursery.start_soon(listener.serve, handler)
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        conn = GrpcConnection(stream, authority=f"127.0.0.1:{port}")
        await nursery.start(conn.run)
        with trio.fail_after(10):
            for n in range(60):
                request = pb.InvokeFunctionRequest(invocation_id=f"inv-{n}")
                await conn.unary_call(SERVICE, "InvokeFunction", request.SerializeToString())
        client_h2 = conn._h2.h2_connection
        # h2 moves closed streams into its memory when it counts the open ones
        assert client_h2.open_outbound_streams == 0
        assert 0 < len(client_h2._closed_streams) <= 8
        assert client_h2.highest_outbound_stream_id >= 2 * 60 - 1
        (server_h2,) = server_connections
        assert server_h2.open_inbound_streams == 0
        assert 0 < len(server_h2._closed_streams) <= 8
        conn.close()
        nursery.cancel_scope.cancel()
