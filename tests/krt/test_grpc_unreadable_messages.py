"""A request message the server cannot read fails only its own call (krt.grpc.unreadable_messages).

Over the message limit: RESOURCE_EXHAUSTED; compressed without (or with ``identity``)
``grpc-encoding``, or not decompressible: INTERNAL; compressed with an encoding the server
lacks: UNIMPLEMENTED with ``grpc-accept-encoding`` (grpc/grpc doc/statuscodes.md; messages
as grpc-go words them). The connection and every other call on it go on: a call in flight
on another stream of the same connection finishes, and new calls are served. A body still
arriving is reset (``RST_STREAM(NO_ERROR)`` after the status), never buffered, and its bytes
go back to the connection's flow-control window.

Compressed messages are read as gRPC peers send them (gzip format for ``gzip``; purerpc
refused it) and never inflate past the message limit (krt.grpc.read_buffers): a grpcio
client's gzip call is answered, a compression bomb is RESOURCE_EXHAUSTED.

Each test but the two controls (``deflate`` and purerpc's zlib-format ``gzip``, read before
too) fails without the fix: purerpc's parser raised out of the connection's
``receive_data`` and the server dropped the connection (every call on it).

A raw h2 client (HTTP/2 exactly as sent) drives both server loops: the unary one
(:class:`krt.grpc.unary_server.UnaryConnection`, all of ``executor.v1``) and purerpc's
stream machinery (:class:`krt.grpc.server.CallHandler` with a streaming method).
"""

from __future__ import annotations

import gzip
import struct
import urllib.parse
import zlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
import grpc
import h2.config
import h2.connection
import h2.errors
import h2.events
import purerpc
import pytest
import trio
from hyperframe.frame import DataFrame  # type: ignore[import-untyped]
from purerpc.grpclib.config import GRPCConfiguration
from purerpc.grpclib.exceptions import UnsupportedMessageEncodingError

from krt.grpc.client import GrpcConnection, GrpcStatusError
from krt.grpc.read_buffers import DecompressedTooLargeError, decompress
from krt.grpc.server import CallHandler
from krt.grpc.unary_server import UnaryConnection
from krt.proto.executor.v1 import runtime_grpc
from krt.proto.executor.v1 import runtime_pb2 as pb

SERVICE = "executor.v1.FunctionRuntime"
OK, RESOURCE_EXHAUSTED, UNIMPLEMENTED, INTERNAL = 0, 8, 12, 13
#: the message limit of the test servers (bytes); CallHandler's own is purerpc's 32 MiB.
LIMIT = 64 * 1024
HUGE = b"\x00\xff\xff\xff\xff"  # a message declaring 4 GiB - 1


def frame(payload: bytes, *, compressed: bool = False) -> bytes:
    return struct.pack(">?I", compressed, len(payload)) + payload


def invoke(invocation_id: str, data: bytes = b"") -> bytes:
    return frame(
        pb.InvokeFunctionRequest(invocation_id=invocation_id, input=data).SerializeToString()
    )


class Echo(runtime_grpc.FunctionRuntimeServicer):  # type: ignore[misc]
    """Echoes the input; ``slow`` waits for :attr:`release`; ``big`` answers 300 kB."""

    def __init__(self) -> None:
        self.release = trio.Event()
        self.started = trio.Event()

    async def InvokeFunction(self, message: Any) -> Any:  # noqa: N802
        if message.invocation_id == "slow":
            self.started.set()
            await self.release.wait()
        output = b"x" * 300_000 if message.invocation_id == "big" else message.input
        return pb.InvokeFunctionResponse(invocation_id=message.invocation_id, output=output)


@dataclass
class Reply:
    """What came back on one stream."""

    data: bytearray = field(default_factory=bytearray)
    fields: dict[str, str] = field(default_factory=dict)
    ended: bool = False
    reset: int | None = None


class RawClient:
    """An h2 client over one connection; several streams at once, frames exactly as given."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.h2.initiate_connection()
        self.replies: dict[int, Reply] = {}

    async def flush(self) -> None:
        await self.stream.send_all(self.h2.data_to_send())

    async def start(
        self,
        method: str,
        data: bytes,
        *,
        end: bool = True,
        headers: tuple[tuple[str, str], ...] = (),
    ) -> int:
        """Open a stream sending ``data`` (chunked to 16 KiB frames); end it if ``end``."""
        stream_id = self.h2.get_next_available_stream_id()
        self.h2.send_headers(
            stream_id,
            [
                (":method", "POST"),
                (":scheme", "http"),
                (":path", f"/{SERVICE}/{method}"),
                (":authority", "test"),
                ("te", "trailers"),
                ("content-type", "application/grpc+proto"),
                *headers,
            ],
        )
        self.replies[stream_id] = Reply()
        await self.send(stream_id, data, end=end)
        return stream_id

    async def send(self, stream_id: int, data: bytes, *, end: bool = False) -> None:
        for start in range(0, len(data), 16384):
            self.h2.send_data(stream_id, data[start : start + 16384])
        if end:
            self.h2.end_stream(stream_id)
        await self.flush()

    async def until_done(self, stream_id: int) -> Reply:
        """Read the connection until ``stream_id`` ended or was reset (fails if it closes)."""
        reply = self.replies[stream_id]
        while not (reply.ended or reply.reset is not None):
            data = await self.stream.receive_some(65536)
            assert data, "the server closed the connection"
            for event in self.h2.receive_data(data):
                self._on(event)
            await self.flush()
        return reply

    async def settle(self) -> None:
        """Read what the server sends within a moment (a reset after the trailers)."""
        with trio.move_on_after(0.2):
            while True:
                data = await self.stream.receive_some(65536)
                assert data, "the server closed the connection"
                for event in self.h2.receive_data(data):
                    self._on(event)
                await self.flush()

    def _on(self, event: Any) -> None:
        if isinstance(event, h2.events.ConnectionTerminated):
            raise AssertionError(f"GOAWAY from the server: {event}")
        reply = self.replies.get(getattr(event, "stream_id", 0))
        if reply is None:
            return
        if isinstance(event, h2.events.DataReceived):
            reply.data += event.data
            self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        elif isinstance(event, h2.events.ResponseReceived | h2.events.TrailersReceived):
            reply.fields.update(
                (k.decode(), urllib.parse.unquote(v.decode())) for k, v in event.headers
            )
        elif isinstance(event, h2.events.StreamEnded):
            reply.ended = True
        elif isinstance(event, h2.events.StreamReset):
            reply.reset = int(event.error_code)


@dataclass
class Server:
    port: int
    echo: Echo
    #: the unary loop's connections, in accept order (for inspecting their h2 state)
    connections: list[UnaryConnection]

    async def client(self) -> RawClient:
        client = RawClient(await trio.open_tcp_stream("127.0.0.1", self.port))
        await client.flush()
        return client


@pytest.fixture
async def server(nursery: trio.Nursery) -> Server:
    """The unary loop with a 64 KiB message limit, as CallHandler runs it."""
    echo = Echo()
    connections: list[UnaryConnection] = []
    config = GRPCConfiguration(client_side=False, max_message_length=LIMIT)

    async def handle(sock: anyio.abc.SocketStream) -> None:
        async with sock:
            connection = UnaryConnection(sock, {SERVICE: echo.service}, config)
            connections.append(connection)
            await connection.serve()

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    nursery.start_soon(listener.serve, handle)
    return Server(int(listener.extra(anyio.abc.SocketAttribute.local_port)), echo, connections)


def window_all_returned(h2_connection: Any) -> bool:
    """Whether every byte the connection's peer sent was handed back to its window (h2 3.2)."""
    manager = h2_connection._inbound_flow_control_window_manager
    return bool(manager.current_window_size + manager._bytes_processed == manager.max_window_size)


async def test_an_over_limit_message_fails_its_call_and_the_other_calls_go_on(
    server: Server,
) -> None:
    """A body declaring 4 GiB, still arriving: RESOURCE_EXHAUSTED, then RST_STREAM(NO_ERROR);
    a call in flight on the same connection finishes, later calls are served, nothing of
    the body is kept and the connection window gets every byte back."""
    client = await server.client()
    with trio.fail_after(10):
        slow = await client.start("InvokeFunction", invoke("slow", b"in flight"))
        await server.echo.started.wait()
        huge = await client.start("InvokeFunction", HUGE + b"\x07" * 40_000, end=False)
        reply = await client.until_done(huge)
        await client.settle()
        assert reply.fields["grpc-status"] == str(RESOURCE_EXHAUSTED), reply
        assert reply.fields["grpc-message"] == (
            f"grpc: received message larger than max (4294967295 vs. {LIMIT})"
        )
        assert reply.reset == h2.errors.ErrorCodes.NO_ERROR
        assert reply.data == b""
        # frames of the body already on their way when the reset left: dropped by h2
        # (written raw: the client's own h2 state knows the stream is reset)
        for _ in range(3):
            late = DataFrame(huge)
            late.data = b"\x07" * 16_000
            await client.stream.send_all(late.serialize())
        server.echo.release.set()
        answer = await client.until_done(slow)
        assert answer.fields["grpc-status"] == str(OK)
        assert pb.InvokeFunctionResponse.FromString(bytes(answer.data[5:])).output == b"in flight"
        later = await client.until_done(await client.start("InvokeFunction", invoke("a", b"b")))
        assert later.fields["grpc-status"] == str(OK)
    (connection,) = server.connections
    assert huge not in connection._h2.message_read_buffers
    assert window_all_returned(connection.h2_connection)


async def test_an_over_limit_message_split_over_frames_is_resource_exhausted(
    server: Server,
) -> None:
    """The prefix split over two DATA frames, request ended: the status, no reset."""
    client = await server.client()
    with trio.fail_after(10):
        stream_id = await client.start("InvokeFunction", HUGE[:2], end=False)
        await client.send(stream_id, HUGE[2:], end=True)
        reply = await client.until_done(stream_id)
        await client.settle()
        assert reply.fields["grpc-status"] == str(RESOURCE_EXHAUSTED), reply
        assert reply.reset is None
        ok = await client.until_done(await client.start("InvokeFunction", invoke("a")))
        assert ok.fields["grpc-status"] == str(OK)
    assert window_all_returned(server.connections[0].h2_connection)


@pytest.mark.parametrize(
    ("encoding", "data", "status", "message"),
    [
        (None, b"", INTERNAL, "grpc: compressed flag set with identity or empty encoding"),
        ("identity", b"x", INTERNAL, "grpc: compressed flag set with identity or empty encoding"),
        ("gzip", b"not zlib", INTERNAL, "grpc: failed to decompress the received message: "),
        ("br", b"x", UNIMPLEMENTED, 'grpc: Decompressor is not installed for grpc-encoding "br"'),
    ],
    ids=["no-encoding", "identity", "corrupt-gzip", "unsupported-br"],
)
async def test_a_compressed_message_the_server_cannot_read_fails_only_its_call(
    server: Server, encoding: str | None, data: bytes, status: int, message: str
) -> None:
    client = await server.client()
    headers = () if encoding is None else (("grpc-encoding", encoding),)
    with trio.fail_after(10):
        slow = await client.start("InvokeFunction", invoke("slow", b"in flight"))
        await server.echo.started.wait()
        bad = await client.start("InvokeFunction", frame(data, compressed=True), headers=headers)
        reply = await client.until_done(bad)
        assert reply.fields["grpc-status"] == str(status), reply
        assert reply.fields["grpc-message"].startswith(message)
        if status == UNIMPLEMENTED:
            assert reply.fields["grpc-accept-encoding"] == "identity,gzip,deflate"
        server.echo.release.set()
        assert (await client.until_done(slow)).fields["grpc-status"] == str(OK)
        ok = await client.until_done(await client.start("InvokeFunction", invoke("a")))
        assert ok.fields["grpc-status"] == str(OK)
    assert window_all_returned(server.connections[0].h2_connection)


@pytest.mark.parametrize(
    ("encoding", "compress"),
    [("gzip", gzip.compress), ("gzip", zlib.compress), ("deflate", zlib.compress)],
    ids=["gzip", "gzip-as-purerpc-sends-it", "deflate"],
)
async def test_a_compressed_message_is_served(
    server: Server, encoding: str, compress: Callable[[bytes], bytes]
) -> None:
    """gRPC's gzip is the gzip format (purerpc refused it: "incorrect header check");
    purerpc's own "gzip" (the zlib format) and deflate (zlib) are read as before."""
    client = await server.client()
    payload = pb.InvokeFunctionRequest(invocation_id="z", input=b"zz").SerializeToString()
    with trio.fail_after(10):
        stream_id = await client.start(
            "InvokeFunction",
            frame(compress(payload), compressed=True),
            headers=(("grpc-encoding", encoding),),
        )
        reply = await client.until_done(stream_id)
    assert reply.fields["grpc-status"] == str(OK), reply
    assert pb.InvokeFunctionResponse.FromString(bytes(reply.data[5:])).output == b"zz"


@pytest.mark.parametrize(
    ("data", "status", "message"),
    [
        (
            zlib.compress(b"\0" * (4 * LIMIT)),
            RESOURCE_EXHAUSTED,
            f"grpc: received message after decompression larger than max {LIMIT}",
        ),
        (
            zlib.compress(b"abc" * 100)[:-6],
            INTERNAL,
            "grpc: failed to decompress the received message: incomplete or truncated stream",
        ),
    ],
    ids=["inflates-past-the-limit", "truncated"],
)
async def test_a_compressed_message_is_read_within_the_limit(
    server: Server, data: bytes, status: int, message: str
) -> None:
    """A message is decompressed to at most the limit: one that inflates past it (a
    compression bomb) fails its call with RESOURCE_EXHAUSTED; the connection serves on."""
    assert len(data) < LIMIT
    client = await server.client()
    with trio.fail_after(10):
        bad = await client.start(
            "InvokeFunction",
            frame(data, compressed=True),
            headers=(("grpc-encoding", "deflate"),),
        )
        reply = await client.until_done(bad)
        assert reply.fields["grpc-status"] == str(status), reply
        assert reply.fields["grpc-message"] == message
        ok = await client.until_done(await client.start("InvokeFunction", invoke("a")))
        assert ok.fields["grpc-status"] == str(OK)


def test_decompress_bounds_its_output_and_names_what_it_refuses() -> None:
    assert decompress(gzip.compress(b"x" * 10), encoding="gzip", limit=10) == b"x" * 10
    with pytest.raises(DecompressedTooLargeError):
        decompress(gzip.compress(b"x" * 11), encoding="gzip", limit=10)
    with pytest.raises(UnsupportedMessageEncodingError, match="Unsupported compression: br"):
        decompress(b"", encoding="br", limit=10)
    with pytest.raises(UnsupportedMessageEncodingError):
        decompress(b"", encoding=None, limit=10)
    with pytest.raises(zlib.error):
        decompress(b"not zlib", encoding="deflate", limit=10)


async def test_grpcio_gzip_and_over_limit_calls_on_one_channel(nursery: trio.Nursery) -> None:
    """An independent client (grpcio) on one channel: a gzip-compressed call is answered, an
    over-limit one is RESOURCE_EXHAUSTED, and the next call on the channel is answered."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    nursery.start_soon(listener.serve, CallHandler({SERVICE: Echo().service}))
    port = int(listener.extra(anyio.abc.SocketAttribute.local_port))
    limit = 32 * 1024 * 1024  # CallHandler's: purerpc's default

    def calls() -> list[Any]:
        outcomes: list[Any] = []
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = channel.unary_unary(
                f"/{SERVICE}/InvokeFunction",
                request_serializer=pb.InvokeFunctionRequest.SerializeToString,
                response_deserializer=pb.InvokeFunctionResponse.FromString,
            )
            for data, compression in (
                (b"g" * 1000, grpc.Compression.Gzip),
                (b"h" * (limit + 1), grpc.Compression.NoCompression),
                (b"i", grpc.Compression.NoCompression),
            ):
                request = pb.InvokeFunctionRequest(invocation_id="c", input=data)
                try:
                    outcomes.append(call(request, timeout=20, compression=compression).output)
                except grpc.RpcError as error:
                    outcomes.append((error.code(), error.details()))
        return outcomes

    with trio.fail_after(30):
        gzipped, huge, after = await trio.to_thread.run_sync(calls)
    assert gzipped == b"g" * 1000
    size = pb.InvokeFunctionRequest(invocation_id="c", input=b"h" * (limit + 1)).ByteSize()
    assert huge == (
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        f"grpc: received message larger than max ({size} vs. {limit})",
    )
    assert after == b"i"


# --- purerpc's stream loop (CallHandler with a streaming method) ------------------------------


async def _numbers(message: Any) -> AsyncIterator[Any]:
    yield pb.HealthResponse(healthy=True)


@pytest.fixture
async def stream_loop(nursery: trio.Nursery) -> Server:
    echo = Echo()
    streaming = purerpc.Service("test.Streaming")
    streaming.add_method(
        "Numbers",
        _numbers,
        purerpc.RPCSignature(purerpc.Cardinality.UNARY_STREAM, pb.HealthRequest, pb.HealthResponse),
    )
    handler = CallHandler({SERVICE: echo.service, "test.Streaming": streaming})
    assert not handler.unary_only
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    nursery.start_soon(listener.serve, handler)
    return Server(int(listener.extra(anyio.abc.SocketAttribute.local_port)), echo, [])


@pytest.mark.parametrize(
    ("data", "status"),
    [(HUGE + b"\x07" * 1000, RESOURCE_EXHAUSTED), (frame(b"", compressed=True), INTERNAL)],
    ids=["huge", "compressed"],
)
async def test_the_stream_loop_fails_only_the_call_of_an_unreadable_message(
    stream_loop: Server, data: bytes, status: int
) -> None:
    client = await stream_loop.client()
    with trio.fail_after(10):
        slow = await client.start("InvokeFunction", invoke("slow", b"in flight"))
        await stream_loop.echo.started.wait()
        bad = await client.start("InvokeFunction", data, end=False)
        reply = await client.until_done(bad)
        await client.settle()
        assert reply.fields["grpc-status"] == str(status), reply
        assert reply.reset == h2.errors.ErrorCodes.NO_ERROR
        stream_loop.echo.release.set()
        assert (await client.until_done(slow)).fields["grpc-status"] == str(OK)
        ok = await client.until_done(await client.start("InvokeFunction", invoke("a")))
        assert ok.fields["grpc-status"] == str(OK)


# --- our client: an unreadable answer fails its call, not the connection ----------------------


async def test_the_client_fails_only_the_call_of_an_over_limit_answer(server: Server) -> None:
    """A 300 kB answer to a client whose limit is 100 kB: RESOURCE_EXHAUSTED for that call;
    the connection serves the next one."""
    async with trio.open_nursery() as nursery:
        stream = await trio.open_tcp_stream("127.0.0.1", server.port)
        conn = GrpcConnection(stream, authority="test", max_message_bytes=100_000)
        await nursery.start(conn.run)
        request = pb.InvokeFunctionRequest(invocation_id="big").SerializeToString()
        with trio.fail_after(10):
            with pytest.raises(GrpcStatusError) as failed:
                await conn.unary_call(SERVICE, "InvokeFunction", request)
            assert failed.value.code == RESOURCE_EXHAUSTED
            size = pb.InvokeFunctionResponse(invocation_id="big", output=b"x" * 300_000).ByteSize()
            assert failed.value.message == (
                f"grpc: received message larger than max ({size} vs. 100000)"
            )
            ok = pb.InvokeFunctionRequest(invocation_id="a", input=b"b").SerializeToString()
            reply = await conn.unary_call(SERVICE, "InvokeFunction", ok)
        assert pb.InvokeFunctionResponse.FromString(reply).output == b"b"
        conn.close()
        nursery.cancel_scope.cancel()


async def test_the_client_reads_a_status_sent_before_its_request_ended(server: Server) -> None:
    """An over-limit request: the server answers RESOURCE_EXHAUSTED, then resets the rest
    of the body with NO_ERROR; the client reports the status, not the reset."""
    async with trio.open_nursery() as nursery:
        stream = await trio.open_tcp_stream("127.0.0.1", server.port)
        conn = GrpcConnection(stream, authority="test")
        await nursery.start(conn.run)
        request = pb.InvokeFunctionRequest(invocation_id="x", input=b"y" * 200_000)
        with trio.fail_after(10):
            with pytest.raises(GrpcStatusError) as failed:
                await conn.unary_call(SERVICE, "InvokeFunction", request.SerializeToString())
            assert failed.value.code == RESOURCE_EXHAUSTED, failed.value
            ok = pb.InvokeFunctionRequest(invocation_id="a", input=b"b").SerializeToString()
            reply = await conn.unary_call(SERVICE, "InvokeFunction", ok)
        assert pb.InvokeFunctionResponse.FromString(reply).output == b"b"
        conn.close()
        nursery.cancel_scope.cancel()
