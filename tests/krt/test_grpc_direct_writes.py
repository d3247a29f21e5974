"""krt.grpc.direct_writes: bytes written by the producing task on plain TCP, in order, never on TLS."""

from __future__ import annotations

import socket
import ssl
from typing import Any

import anyio
import anyio.abc
import pytest
import trio
import trio.testing
import trustme

from krt.grpc import client as client_module
from krt.grpc import unary_server
from krt.grpc.client import GrpcConnection
from krt.grpc.direct_writes import plain_socket_fd, write_now
from krt.grpc.server import CallHandler
from krt.proto.executor.v1 import runtime_grpc
from krt.proto.executor.v1 import runtime_pb2 as pb

SERVICE = "executor.v1.FunctionRuntime"


class Echo(runtime_grpc.FunctionRuntimeServicer):  # type: ignore[misc]
    async def InvokeFunction(self, message: Any) -> Any:  # noqa: N802
        return pb.InvokeFunctionResponse(invocation_id=message.invocation_id, output=message.input)


def test_write_now_returns_what_a_full_socket_did_not_take() -> None:
    left, right = socket.socketpair()
    with left, right:
        left.setblocking(False)
        data = bytes(range(256)) * 40_000  # 10 MB: far more than a socket buffer
        rest = write_now(left.fileno(), data)
        assert 0 < len(rest) < len(data)
        assert data.endswith(rest)
        assert write_now(left.fileno(), b"more") == b"more"  # still full: nothing taken


def test_write_now_leaves_everything_to_the_writer_on_a_broken_socket() -> None:
    left, right = socket.socketpair()
    left.setblocking(False)
    right.close()
    with left:
        assert write_now(left.fileno(), b"data") == b"data"


async def test_only_plain_sockets_get_a_descriptor() -> None:
    a, b = trio.socket.socketpair()
    plain = trio.SocketStream(a)
    assert plain_socket_fd(plain) == a.fileno()
    ca = trustme.CA()
    context = ssl.create_default_context()
    ca.configure_trust(context)
    assert plain_socket_fd(trio.SSLStream(plain, context, server_hostname="x")) is None
    assert plain_socket_fd(trio.testing.memory_stream_pair()[0]) is None
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener:
        client = await anyio.connect_tcp("127.0.0.1", port)
        async with client:
            assert (
                plain_socket_fd(client)
                == client.extra(anyio.abc.SocketAttribute.raw_socket).fileno()
            )
    b.close()
    await plain.aclose()


@pytest.mark.parametrize("size", [10, 1_000_000, 3_000_000])
async def test_large_requests_and_answers_arrive_whole_and_in_order(
    size: int, nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bigger than the (shrunk) socket buffers: a direct write takes part, the writer task
    sends the rest, and no other write may slip in between."""
    partial = {"client": 0, "server": 0}

    def counting(side: str) -> Any:
        def write(fd: int, data: bytes) -> bytes:
            rest = write_now(fd, data)
            partial[side] += bool(rest)
            return rest

        return write

    monkeypatch.setattr(client_module, "write_now", counting("client"))
    monkeypatch.setattr(unary_server, "write_now", counting("server"))
    handler = CallHandler({SERVICE: Echo().service})

    async def serve(sock: anyio.abc.SocketStream) -> None:
        raw = sock.extra(anyio.abc.SocketAttribute.raw_socket)
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        await handler(sock)

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    nursery.start_soon(listener.serve, serve)
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    conn = GrpcConnection(stream, authority="x")
    await nursery.start(conn.run)
    data = bytes(range(251)) * (size // 251 + 1)
    with trio.fail_after(20):
        # settings exchanged: the server's large windows let a request go in one write
        await conn.unary_call(SERVICE, "InvokeFunction", b"")
        async with trio.open_nursery() as calls:
            for index in range(4):  # concurrent calls share the connection

                async def call(index: int = index) -> None:
                    request = pb.InvokeFunctionRequest(invocation_id=str(index), input=data)
                    answer = await conn.unary_call(
                        SERVICE, "InvokeFunction", request.SerializeToString()
                    )
                    response = pb.InvokeFunctionResponse.FromString(answer)
                    assert (response.invocation_id, response.output) == (str(index), data)

                calls.start_soon(call)
                await trio.sleep(0.005)  # the writer task is mid-send when the next call starts
    conn.close()
    await conn.wait_closed()
    assert conn._fd is None  # forgotten before the socket closed
    if size > 100_000:  # the writer tasks did take over
        assert partial["client"] > 0
        assert partial["server"] > 0


async def test_a_server_connection_forgets_its_descriptor_before_the_socket_closes() -> None:
    left, right = trio.socket.socketpair()
    from anyio._backends._trio import SocketStream

    connection = unary_server.UnaryConnection(
        SocketStream(left), {SERVICE: Echo().service}, unary_server.GRPCConfiguration(False)
    )
    assert connection._fd == left.fileno()
    right.close()  # the peer goes away: serve returns
    with trio.fail_after(5):
        try:
            await connection.serve()
        except* (anyio.BrokenResourceError, BrokenPipeError):
            pass  # the server's preface may meet the closed peer
    assert connection._fd is None
    left.close()
