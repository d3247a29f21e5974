"""How few writes a unary call takes (krt.grpc): the invoke hot path's per-call costs.

* the client sends header strings as plain HPACK literals, so a ~1 KiB bearer token is not
  Huffman-coded by pure Python on every call (and not decoded on every call by the server);
* the server (:class:`krt.grpc.server.CallHandler`) writes a unary answer's headers,
  message and trailers with one ``send``, and an error's headers with its trailers.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import anyio.abc
import purerpc
import pytest
import trio
import trio.testing

from krt.grpc import direct_writes, unary_server
from krt.grpc.client import GrpcConnection, GrpcStatusError
from krt.grpc.server import CallHandler
from krt.proto.executor.v1 import runtime_grpc
from krt.proto.executor.v1 import runtime_pb2 as pb

SERVICE = "executor.v1.FunctionRuntime"
TOKEN = "eyJhbGciOiJSUzI1NiJ9." + "QUJD" * 200 + ".c2ln"


class Echo(runtime_grpc.FunctionRuntimeServicer):  # type: ignore[misc]
    async def InvokeFunction(self, message: Any) -> Any:  # noqa: N802
        if message.invocation_id == "fail":
            raise purerpc.NotFoundError("no such registration")
        return pb.InvokeFunctionResponse(invocation_id=message.invocation_id, output=message.input)


class CountingStream(anyio.abc.SocketStream):
    """An accepted socket that counts the server's writes."""

    def __init__(self, inner: anyio.abc.SocketStream) -> None:
        self.inner = inner
        self.sends = 0

    async def send(self, item: bytes) -> None:
        self.sends += 1
        await self.inner.send(item)

    async def receive(self, max_bytes: int = 65536) -> bytes:
        return await self.inner.receive(max_bytes)

    async def send_eof(self) -> None:
        await self.inner.send_eof()

    async def aclose(self) -> None:
        await self.inner.aclose()

    @property
    def extra_attributes(self) -> Any:
        return self.inner.extra_attributes


def payload(invocation_id: str) -> bytes:
    request = pb.InvokeFunctionRequest(invocation_id=invocation_id, input=b'{"n": 1}')
    return bytes(request.SerializeToString())


async def test_the_bearer_token_is_sent_as_a_plain_literal() -> None:
    client_side, server_side = trio.testing.memory_stream_pair()
    conn = GrpcConnection(client_side, authority="runtimed:9090")
    seen = b""
    async with trio.open_nursery() as nursery:
        await nursery.start(conn.run)
        nursery.start_soon(
            lambda: conn.unary_call(
                SERVICE,
                "InvokeFunction",
                payload("i"),
                metadata=[("authorization", f"Bearer {TOKEN}")],
            )
        )
        with trio.fail_after(5):
            while f"Bearer {TOKEN}".encode() not in seen:
                seen += await server_side.receive_some(65536)
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("direct", [True, False], ids=["direct-writes", "writer-task"])
async def test_a_unary_answer_is_one_write_and_an_error_too(
    direct: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One write per answer, whether the call's task writes it (plain TCP) or the writer."""
    handler = CallHandler({SERVICE: Echo().service})
    accepted: list[CountingStream] = []
    if not direct:
        monkeypatch.setattr(unary_server, "plain_socket_fd", lambda _sock: None)

    def counting_write_now(fd: int, data: bytes) -> bytes:
        accepted[0].sends += 1
        return direct_writes.write_now(fd, data)

    monkeypatch.setattr(unary_server, "write_now", counting_write_now)

    async def serve(sock: anyio.abc.SocketStream) -> None:
        counting = CountingStream(sock)
        accepted.append(counting)
        await handler(counting)

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, trio.open_nursery() as nursery:
        nursery.start_soon(listener.serve, serve)
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        conn = GrpcConnection(stream, authority=f"127.0.0.1:{port}")
        await nursery.start(conn.run)
        with trio.fail_after(10):
            answer = await conn.unary_call(SERVICE, "InvokeFunction", payload("warm-up"))
            assert pb.InvokeFunctionResponse.FromString(answer).invocation_id == "warm-up"
            for invocation_id in ("one", "two", "three"):
                before = accepted[0].sends
                answer = await conn.unary_call(SERVICE, "InvokeFunction", payload(invocation_id))
                assert pb.InvokeFunctionResponse.FromString(answer).output == b'{"n": 1}'
                await trio.testing.wait_all_tasks_blocked()  # a late second write shows here
                assert accepted[0].sends - before == 1
            before = accepted[0].sends
            with pytest.raises(GrpcStatusError) as failed:
                await conn.unary_call(SERVICE, "InvokeFunction", payload("fail"))
            assert failed.value.code == purerpc.StatusCode.NOT_FOUND.value
            assert failed.value.message == "no such registration"
            await trio.testing.wait_all_tasks_blocked()
            assert accepted[0].sends - before == 1
        conn.close()
        nursery.cancel_scope.cancel()


class StepCounter(trio.abc.Instrument):
    """Counts trio task steps (each is a pass through the scheduler for one task)."""

    def __init__(self) -> None:
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps += 1


async def test_a_unary_call_takes_few_scheduler_passes() -> None:
    """Client and server together: 4 task steps per call (purerpc's stock loops: ~20).

    The server starts a call's task only once its request is complete (no per-stream queue to
    wait on); on plain TCP the calling task writes the request and the call's task writes the
    answer (krt.grpc.direct_writes), so neither writer task runs: the client's reader, the
    caller, the server's reader and the call's task are the only steps.
    """
    handler = CallHandler({SERVICE: Echo().service})
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    counter = StepCounter()
    async with listener, trio.open_nursery() as nursery:
        nursery.start_soon(listener.serve, handler)
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        conn = GrpcConnection(stream, authority=f"127.0.0.1:{port}")
        await nursery.start(conn.run)
        with trio.fail_after(10):
            for _ in range(5):
                await conn.unary_call(SERVICE, "InvokeFunction", payload("warm-up"))
            await trio.testing.wait_all_tasks_blocked()
            trio.lowlevel.add_instrument(counter)
            calls = 50
            for index in range(calls):
                await conn.unary_call(SERVICE, "InvokeFunction", payload(f"call-{index}"))
            await trio.testing.wait_all_tasks_blocked()
            trio.lowlevel.remove_instrument(counter)
        assert counter.steps / calls <= 5, f"{counter.steps / calls:.1f} task steps per call"
        conn.close()
        nursery.cancel_scope.cancel()


async def test_a_call_reset_before_its_answer_is_dropped_quietly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The method returns (without a checkpoint) after its caller reset the stream.

    The answer is queued only after the method, so the stream can be gone by then; that is
    a cancelled call, not an internal error, and the connection serves the next call.
    """
    caplog.set_level(logging.INFO, logger="krt.grpc.server")
    entered = trio.Event()
    release = trio.Event()

    class Stubborn(Echo):
        async def InvokeFunction(self, message: Any) -> Any:  # noqa: N802
            if message.invocation_id == "stubborn":
                entered.set()
                with trio.CancelScope(shield=True):
                    await release.wait()
            return await super().InvokeFunction(message)

    handler = CallHandler({SERVICE: Stubborn().service})
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, trio.open_nursery() as nursery:
        nursery.start_soon(listener.serve, handler)
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        conn = GrpcConnection(stream, authority=f"127.0.0.1:{port}")
        await nursery.start(conn.run)
        with trio.fail_after(10):
            async with trio.open_nursery() as calls:
                calls.start_soon(conn.unary_call, SERVICE, "InvokeFunction", payload("stubborn"))
                await entered.wait()
                calls.cancel_scope.cancel()  # the client resets the stream
            await trio.testing.wait_all_tasks_blocked()  # the server has read the reset
            release.set()
            await trio.testing.wait_all_tasks_blocked()
            answer = await conn.unary_call(SERVICE, "InvokeFunction", payload("next"))
            assert pb.InvokeFunctionResponse.FromString(answer).invocation_id == "next"
        conn.close()
        nursery.cancel_scope.cancel()
    assert not [r for r in caplog.records if r.levelname in ("ERROR", "WARNING")]
    assert any(r.getMessage() == "call cancelled by the client" for r in caplog.records)


async def test_the_bearer_token_never_enters_the_compression_table() -> None:
    """Credentials are sent never-indexed; other metadata enters the table as usual."""
    import hpack

    client_side, server_side = trio.testing.memory_stream_pair()
    conn = GrpcConnection(client_side, authority="runtimed:9090")
    received = b""
    async with trio.open_nursery() as nursery:
        await nursery.start(conn.run)
        for invocation_id in ("a", "b"):
            nursery.start_soon(
                lambda invocation_id=invocation_id: conn.unary_call(
                    SERVICE,
                    "InvokeFunction",
                    payload(invocation_id),
                    metadata=[("authorization", f"Bearer {TOKEN}"), ("x-kruntime-runtime", "py")],
                )
            )
            with trio.fail_after(5):
                while received.count(f"Bearer {TOKEN}".encode()) < 2 - (invocation_id == "a"):
                    received += await server_side.receive_some(65536)
        nursery.cancel_scope.cancel()
    decoder = hpack.Decoder()
    blocks = _header_blocks(received[24:])  # after the client preface
    decoded = [decoder.decode(block, raw=True) for block in blocks]
    assert len(decoded) == 2
    for headers in decoded:
        (auth,) = [h for h in headers if h[0] == b"authorization"]
        assert isinstance(auth, hpack.NeverIndexedHeaderTuple)
        assert auth[1] == f"Bearer {TOKEN}".encode()
    assert all(entry[0] != b"authorization" for entry in decoder.header_table.dynamic_entries)
    # other metadata is indexed as usual: the second call refers to the table
    assert (b"x-kruntime-runtime", b"py") in decoder.header_table.dynamic_entries


def _header_blocks(data: bytes) -> list[bytes]:
    """The HEADERS frame payloads (no padding or priority: as h2 sends them) in ``data``."""
    blocks = []
    while len(data) >= 9:
        length = int.from_bytes(data[:3], "big")
        if data[3] == 0x1:  # HEADERS
            blocks.append(data[9 : 9 + length])
        data = data[9 + length :]
    return blocks
