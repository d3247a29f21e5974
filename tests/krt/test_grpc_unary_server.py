"""The unary connection loop (krt.grpc.unary_server) behind CallHandler, at the HTTP/2 level.

A raw h2 client (HTTP/2's default 64 KiB windows, as grpcio keeps them) drives it, so flow
control, request framing errors and unknown methods are seen exactly as a peer sees them.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.abc
import h2.config
import h2.connection
import h2.events
import purerpc
import pytest
import trio
import trio.testing

from krt.grpc.client import GrpcConnection, GrpcStatusError
from krt.grpc.server import CallHandler
from krt.proto.executor.v1 import runtime_grpc
from krt.proto.executor.v1 import runtime_pb2 as pb

SERVICE = "executor.v1.FunctionRuntime"
INVALID_ARGUMENT, DEADLINE_EXCEEDED, UNIMPLEMENTED, INTERNAL = 3, 4, 12, 13


class Echo(runtime_grpc.FunctionRuntimeServicer):  # type: ignore[misc]
    async def InvokeFunction(self, message: Any) -> Any:  # noqa: N802
        if message.invocation_id == "not-a-message":
            return "a str has no SerializeToString"
        if message.invocation_id == "slow":
            await trio.sleep(3600)
        output = b"x" * 300_000 if message.invocation_id == "big" else message.input
        return pb.InvokeFunctionResponse(invocation_id=message.invocation_id, output=output)


def frame(message: bytes) -> bytes:
    return b"\0" + len(message).to_bytes(4, "big") + message


class RawClient:
    """An h2 client with default settings: 64 KiB stream and connection windows."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.h2.initiate_connection()

    async def flush(self) -> None:
        await self.stream.send_all(self.h2.data_to_send())

    async def call(
        self,
        method: str,
        messages: list[bytes],
        *,
        grpc_timeout: str | None = None,
        acknowledge: bool = True,
    ) -> tuple[bytes, dict[str, str]]:
        """Send one request (any number of messages) and read the whole answer."""
        stream_id = self.h2.get_next_available_stream_id()
        headers = [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", f"/{SERVICE}/{method}"),
            (":authority", "test"),
            ("te", "trailers"),
            ("content-type", "application/grpc+proto"),
        ]
        if grpc_timeout is not None:
            headers.append(("grpc-timeout", grpc_timeout))
        self.h2.send_headers(stream_id, headers)
        for message in messages:
            self.h2.send_data(stream_id, frame(message))
        self.h2.end_stream(stream_id)
        await self.flush()
        body = bytearray()
        trailers: dict[str, str] = {}
        while True:
            data = await self.stream.receive_some(65536)
            assert data, "the server closed the connection"
            for event in self.h2.receive_data(data):
                if isinstance(event, h2.events.DataReceived):
                    body += event.data
                    # acknowledge only once the frame is read: the server must wait for it
                    if acknowledge:
                        self.h2.acknowledge_received_data(event.flow_controlled_length, stream_id)
                elif isinstance(event, h2.events.TrailersReceived | h2.events.ResponseReceived):
                    trailers.update(
                        (k.decode(), urllib.parse.unquote(v.decode()))
                        for k, v in event.headers
                        if k.startswith(b"grpc-")
                    )
                elif isinstance(event, h2.events.StreamEnded):
                    await self.flush()
                    return bytes(body), trailers
            await self.flush()


@pytest.fixture
async def port(nursery: trio.Nursery) -> int:
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    nursery.start_soon(listener.serve, CallHandler({SERVICE: Echo().service}))
    return int(listener.extra(anyio.abc.SocketAttribute.local_port))


async def raw_client(port: int) -> RawClient:
    client = RawClient(await trio.open_tcp_stream("127.0.0.1", port))
    await client.flush()
    return client


def test_an_all_unary_service_set_is_served_by_the_unary_loop() -> None:
    assert CallHandler({SERVICE: Echo().service}).unary_only

    streaming = purerpc.Service("test.Streaming")

    async def numbers(message: Any) -> AsyncIterator[Any]:
        yield message

    streaming.add_method(
        "Numbers",
        numbers,
        purerpc.RPCSignature(purerpc.Cardinality.UNARY_STREAM, pb.HealthRequest, pb.HealthResponse),
    )
    assert not CallHandler({SERVICE: Echo().service, "test.Streaming": streaming}).unary_only


async def test_a_large_answer_waits_for_the_clients_window(port: int) -> None:
    """300 kB against a 64 KiB window: sent in steps as the client acknowledges."""
    client = await raw_client(port)
    request = pb.InvokeFunctionRequest(invocation_id="big")
    with trio.fail_after(10):
        body, trailers = await client.call("InvokeFunction", [request.SerializeToString()])
    assert trailers["grpc-status"] == "0"
    answer = pb.InvokeFunctionResponse.FromString(body[5:])
    assert (answer.invocation_id, len(answer.output)) == ("big", 300_000)


@pytest.mark.parametrize(
    ("messages", "detail"),
    [(0, "Expected one message, got zero"), (2, "Expected one message, got multiple")],
)
async def test_a_unary_request_without_exactly_one_message_is_invalid(
    port: int, messages: int, detail: str
) -> None:
    client = await raw_client(port)
    request = pb.InvokeFunctionRequest(invocation_id="n").SerializeToString()
    with trio.fail_after(10):
        body, trailers = await client.call("InvokeFunction", [request] * messages)
        assert body == b""
        assert trailers["grpc-status"] == str(INVALID_ARGUMENT)
        assert trailers["grpc-message"] == f"ProtocolError: {detail}"
        # the connection keeps serving
        body, trailers = await client.call("InvokeFunction", [request])
    assert trailers["grpc-status"] == "0"


async def test_an_unknown_method_is_unimplemented_and_the_connection_serves_on(port: int) -> None:
    client = await raw_client(port)
    request = pb.InvokeFunctionRequest(invocation_id="n").SerializeToString()
    with trio.fail_after(10):
        _, trailers = await client.call("NoSuchMethod", [request])
        assert trailers["grpc-status"] == str(UNIMPLEMENTED)
        assert trailers["grpc-message"] == f"method {SERVICE}/NoSuchMethod is not implemented"
        _, trailers = await client.call("InvokeFunction", [request])
    assert trailers["grpc-status"] == "0"


async def test_the_client_ends_a_request_with_its_message_frame() -> None:
    """HEADERS + one DATA frame carrying END_STREAM: no extra empty DATA frame per call."""
    data_frames: list[h2.events.DataReceived] = []

    async def server(stream: trio.SocketStream) -> None:
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
        conn.initiate_connection()
        await stream.send_all(conn.data_to_send())
        while data := await stream.receive_some(65536):
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.DataReceived):
                    data_frames.append(event)
                elif isinstance(event, h2.events.StreamEnded):
                    message = frame(
                        pb.InvokeFunctionResponse(invocation_id="i").SerializeToString()
                    )
                    conn.send_headers(
                        event.stream_id, [(":status", "200"), ("content-type", "application/grpc")]
                    )
                    conn.send_data(event.stream_id, message)
                    conn.send_headers(event.stream_id, [("grpc-status", "0")], end_stream=True)
            await stream.send_all(conn.data_to_send())

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(trio.serve_tcp, server, 0)
        port = listeners[0].socket.getsockname()[1]
        conn = GrpcConnection(await trio.open_tcp_stream("127.0.0.1", port), authority="t")
        await nursery.start(conn.run)
        with trio.fail_after(10):
            request = pb.InvokeFunctionRequest(invocation_id="i").SerializeToString()
            await conn.unary_call(SERVICE, "InvokeFunction", request)
        assert len(data_frames) == 1
        assert data_frames[0].stream_ended is not None
        conn.close()
        nursery.cancel_scope.cancel()


async def test_an_answer_that_cannot_be_serialized_is_internal(port: int) -> None:
    """The method returned something that is not a message: INTERNAL, not a silent drop."""
    client = await raw_client(port)
    request = pb.InvokeFunctionRequest(invocation_id="not-a-message").SerializeToString()
    with trio.fail_after(10):
        body, trailers = await client.call("InvokeFunction", [request])
    assert (body, trailers["grpc-status"]) == (b"", str(INTERNAL))
    assert trailers["grpc-message"].startswith("internal error: AttributeError")


async def test_grpc_timeout_is_measured_from_the_request_headers(
    port: int, autojump_clock: trio.testing.MockClock
) -> None:
    conn = GrpcConnection(await trio.open_tcp_stream("127.0.0.1", port), authority="t")
    async with trio.open_nursery() as nursery:
        await nursery.start(conn.run)
        request = pb.InvokeFunctionRequest(invocation_id="slow").SerializeToString()
        started = trio.current_time()
        with pytest.raises(GrpcStatusError) as failed:
            await conn.unary_call(SERVICE, "InvokeFunction", request, timeout_seconds=2.5)
        assert failed.value.code == DEADLINE_EXCEEDED
        assert "grpc-timeout 2.5 s" in failed.value.message
        assert 2.5 <= trio.current_time() - started < 2.6
        conn.close()


async def test_a_deadline_while_the_answer_waits_for_the_window_ends_it_with_trailers(
    port: int, autojump_clock: trio.testing.MockClock
) -> None:
    """The client never opens its window: the answer stalls, then grpc-timeout ends the call."""
    client = await raw_client(port)
    request = pb.InvokeFunctionRequest(invocation_id="big").SerializeToString()
    with trio.fail_after(60):
        body, trailers = await client.call(
            "InvokeFunction", [request], grpc_timeout="5S", acknowledge=False
        )
    assert 0 < len(body) <= 65_535  # what the window let through
    assert trailers["grpc-status"] == str(DEADLINE_EXCEEDED)
    assert "grpc-timeout 5 s" in trailers["grpc-message"]
