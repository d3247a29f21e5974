"""The unary connection loop (krt.grpc.unary_server) behind CallHandler, at the HTTP/2 level.

A raw h2 client (HTTP/2's default 64 KiB windows, as grpcio keeps them) drives it, so flow
control, request framing errors and unknown methods are seen exactly as a peer sees them.
"""

from __future__ import annotations

import logging
import socket
import struct
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
import trio.lowlevel
import trio.testing

from krt.grpc import direct_writes, unary_server
from krt.grpc.client import GrpcConnection, GrpcStatusError
from krt.grpc.server import CallHandler
from krt.grpc.unary_server import runs_inline
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


def request_headers(method: str) -> list[tuple[str, str]]:
    return [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", f"/{SERVICE}/{method}"),
        (":authority", "test"),
        ("te", "trailers"),
        ("content-type", "application/grpc+proto"),
    ]


def frame(message: bytes) -> bytes:
    return b"\0" + len(message).to_bytes(4, "big") + message


class RawClient:
    """An h2 client with default settings: 64 KiB stream and connection windows."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.h2.initiate_connection()
        #: (event type name, whether it ended the stream) of each response header block
        self.header_blocks: list[tuple[str, bool]] = []

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
        headers = request_headers(method)
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
                    self.header_blocks.append(
                        (type(event).__name__, event.stream_ended is not None)
                    )
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


async def test_an_error_is_trailers_only_and_its_message_never_enters_the_hpack_tables(
    port: int,
) -> None:
    """An error answer is one HEADERS frame ending the stream (gRPC's Trailers-Only), and
    its grpc-message, which names the call's own IDs, is never indexed: a table entry per
    failed call evicted the blocks both sides remember (krt.grpc.hpack_encoding)."""
    client = await raw_client(port)
    request = pb.InvokeFunctionRequest(invocation_id="n").SerializeToString()
    with trio.fail_after(10):
        for n in range(50):
            client.header_blocks.clear()
            _, trailers = await client.call(f"NoSuchMethod{n}", [request])
            assert trailers["grpc-status"] == str(UNIMPLEMENTED)
            assert (
                trailers["grpc-message"] == f"method {SERVICE}/NoSuchMethod{n} is not implemented"
            )
            assert client.header_blocks == [("ResponseReceived", True)]
        client.header_blocks.clear()
        _, trailers = await client.call("InvokeFunction", [request])
    assert trailers["grpc-status"] == "0"
    assert client.header_blocks == [("ResponseReceived", False), ("TrailersReceived", True)]
    names = {name for name, _ in client.h2.decoder.header_table.dynamic_entries}
    assert names <= {b"content-type", b"grpc-status"}, names


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


class Instant(runtime_grpc.FunctionRuntimeServicer):  # type: ignore[misc]
    """A service whose InvokeFunction answers at once (run inline), except when told not to."""

    def __init__(self) -> None:
        self.closed_after_awaiting = 0

    async def InvokeFunction(self, message: Any) -> Any:  # noqa: N802
        if message.invocation_id == "awaits":
            try:
                await trio.lowlevel.checkpoint()
            finally:
                self.closed_after_awaiting += 1
        if message.invocation_id == "raises":
            raise purerpc.NotFoundError("no such thing")
        output = b"x" * 300_000 if message.invocation_id == "big" else message.input
        return pb.InvokeFunctionResponse(invocation_id=message.invocation_id, output=output)


class SpawnCounter(trio.abc.Instrument):
    def __init__(self) -> None:
        self.spawned = 0

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self.spawned += 1


@pytest.fixture
async def instant(nursery: trio.Nursery) -> tuple[int, Instant]:
    servicer = Instant()
    service = runs_inline(servicer.service, "InvokeFunction")
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    nursery.start_soon(listener.serve, CallHandler({SERVICE: service}))
    return int(listener.extra(anyio.abc.SocketAttribute.local_port)), servicer


def test_runs_inline_names_only_methods_the_service_has() -> None:
    with pytest.raises(KeyError):
        runs_inline(Instant().service, "NoSuchMethod")


async def test_an_inline_method_runs_in_the_reader_without_a_task_per_call(
    instant: tuple[int, Instant],
) -> None:
    port, _ = instant
    client = await raw_client(port)
    with trio.fail_after(10):
        await client.call("InvokeFunction", [pb.InvokeFunctionRequest().SerializeToString()])
        counter = SpawnCounter()
        trio.lowlevel.add_instrument(counter)
        try:
            for index in range(20):
                request = pb.InvokeFunctionRequest(invocation_id=f"c{index}", input=b"in")
                body, trailers = await client.call("InvokeFunction", [request.SerializeToString()])
                assert trailers["grpc-status"] == "0"
                answer = pb.InvokeFunctionResponse.FromString(body[5:])
                assert (answer.invocation_id, answer.output) == (f"c{index}", b"in")
        finally:
            trio.lowlevel.remove_instrument(counter)
    assert counter.spawned == 0


async def test_inline_answers_of_one_read_leave_in_one_write(
    instant: tuple[int, Instant], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three requests arrive together: their three answers (an error among them) are one
    write, and each stream gets its own answer."""
    writes: list[bytes] = []

    def counting_write_now(fd: int, data: bytes) -> bytes:
        writes.append(data)
        return direct_writes.write_now(fd, data)

    monkeypatch.setattr(unary_server, "write_now", counting_write_now)
    port, _ = instant
    client = await raw_client(port)
    await client.call("InvokeFunction", [pb.InvokeFunctionRequest().SerializeToString()])
    writes.clear()
    streams = {}
    for name in ("one", "raises", "three"):
        stream_id = client.h2.get_next_available_stream_id()
        client.h2.send_headers(stream_id, request_headers("InvokeFunction"))
        message = pb.InvokeFunctionRequest(invocation_id=name).SerializeToString()
        client.h2.send_data(stream_id, frame(message), end_stream=True)
        streams[stream_id] = name
    await client.flush()
    ended: dict[int, str] = {}
    with trio.fail_after(10):
        while len(ended) < 3:
            for event in client.h2.receive_data(await client.stream.receive_some(65536)):
                if isinstance(event, h2.events.TrailersReceived | h2.events.ResponseReceived):
                    status = dict(event.headers).get(b"grpc-status")
                    if status is not None:
                        ended[event.stream_id] = status.decode()
    assert ended == {
        stream_id: ("5" if name == "raises" else "0") for stream_id, name in streams.items()
    }
    assert len(writes) == 1


async def test_an_inline_method_that_awaits_is_closed_and_answered_internal(
    instant: tuple[int, Instant], caplog: pytest.LogCaptureFixture
) -> None:
    port, servicer = instant
    client = await raw_client(port)
    request = pb.InvokeFunctionRequest(invocation_id="awaits").SerializeToString()
    with trio.fail_after(10):
        body, trailers = await client.call("InvokeFunction", [request])
        assert (body, trailers["grpc-status"]) == (b"", str(INTERNAL))
        assert "marked runs_inline but awaited" in trailers["grpc-message"]
        assert servicer.closed_after_awaiting == 1  # not left suspended
        _, trailers = await client.call(
            "InvokeFunction", [pb.InvokeFunctionRequest(invocation_id="normal").SerializeToString()]
        )
    assert trailers["grpc-status"] == "0"
    assert any(r.getMessage() == "internal error" for r in caplog.records)


async def test_an_inline_call_whose_deadline_passed_is_deadline_exceeded(
    instant: tuple[int, Instant],
) -> None:
    port, _ = instant
    client = await raw_client(port)
    request = pb.InvokeFunctionRequest(invocation_id="late").SerializeToString()
    with trio.fail_after(10):
        body, trailers = await client.call("InvokeFunction", [request], grpc_timeout="0m")
    assert (body, trailers["grpc-status"]) == (b"", str(DEADLINE_EXCEEDED))


async def test_an_inline_answer_larger_than_the_window_waits_for_it(
    instant: tuple[int, Instant],
) -> None:
    port, _ = instant
    client = await raw_client(port)
    request = pb.InvokeFunctionRequest(invocation_id="big").SerializeToString()
    with trio.fail_after(10):
        body, trailers = await client.call("InvokeFunction", [request])
        assert trailers["grpc-status"] == "0"
        answer = pb.InvokeFunctionResponse.FromString(body[5:])
        assert (answer.invocation_id, len(answer.output)) == ("big", 300_000)
        _, trailers = await client.call(
            "InvokeFunction", [pb.InvokeFunctionRequest(invocation_id="small").SerializeToString()]
        )
    assert trailers["grpc-status"] == "0"


async def test_an_inline_answer_waiting_for_the_window_ends_at_the_deadline(
    instant: tuple[int, Instant], autojump_clock: trio.testing.MockClock
) -> None:
    port, _ = instant
    client = await raw_client(port)
    request = pb.InvokeFunctionRequest(invocation_id="big").SerializeToString()
    with trio.fail_after(60):
        body, trailers = await client.call(
            "InvokeFunction", [request], grpc_timeout="5S", acknowledge=False
        )
    assert 0 < len(body) <= 65_535
    assert trailers["grpc-status"] == str(DEADLINE_EXCEEDED)


@pytest.mark.parametrize("direct_reads", [True, False])
async def test_a_peer_that_resets_the_connection_ends_it_quietly(
    port: int,
    direct_reads: bool,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Plain TCP is read with os.read after a readiness wait; a reset (ECONNRESET) ends the
    connection as a clean close does, as the stream's BrokenResourceError did, and the
    server serves the next connection."""
    monkeypatch.setattr(unary_server, "DIRECT_READS", direct_reads)
    caplog.set_level(logging.INFO, logger="krt.grpc.server")
    ended = trio.Event()
    serve = unary_server.UnaryConnection.serve

    async def serve_and_tell(self: unary_server.UnaryConnection) -> None:
        try:
            await serve(self)
        finally:
            ended.set()

    monkeypatch.setattr(unary_server.UnaryConnection, "serve", serve_and_tell)
    ok = pb.InvokeFunctionRequest(invocation_id="a", input=b"in").SerializeToString()
    with trio.fail_after(10):
        client = await raw_client(port)
        body, trailers = await client.call("InvokeFunction", [ok])
        assert trailers["grpc-status"] == "0"
        sock = client.stream.socket
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        await client.stream.aclose()  # linger 0: RST instead of FIN
        await ended.wait()
        second = await raw_client(port)
        _, trailers = await second.call("InvokeFunction", [ok])
        assert trailers["grpc-status"] == "0"
        await second.stream.aclose()
    assert not [r for r in caplog.records if r.getMessage() == "connection dropped"]
