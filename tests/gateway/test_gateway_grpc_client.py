"""The gateway's unary gRPC client and connection pool against a purerpc server."""

from __future__ import annotations

import functools

import purerpc
import pytest
import trio
from gwfakes import FakeFunctionRuntime, delay_then, fail_with, serve_fake

from gateway.pool import ConnectFailedError, PoolKey, open_channel_pool
from gateway.targets import StaticResolver, Target
from krt.grpc.client import ConnectionLostError, GrpcConnection, GrpcStatusError
from krt.proto.executor.v1 import runtime_pb2 as pb

SERVICE = "executor.v1.FunctionRuntime"


def invoke_payload(body: bytes = b"{}") -> bytes:
    request = pb.InvokeFunctionRequest(
        registration=pb.FunctionRegistration(run_uid="uid-1"), invocation_id="i-1", input=body
    )
    return bytes(request.SerializeToString())


async def connect(port: int, nursery: trio.Nursery) -> GrpcConnection:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    conn = GrpcConnection(stream, authority=f"127.0.0.1:{port}")
    await nursery.start(conn.run)
    return conn


async def test_unary_call_sends_metadata_and_timeout_and_returns_the_message() -> None:
    fake = FakeFunctionRuntime()
    async with trio.open_nursery() as nursery:
        port = await nursery.start(serve_fake, fake)
        conn = await connect(port, nursery)
        raw = await conn.unary_call(
            SERVICE,
            "InvokeFunction",
            invoke_payload(b'{"a": 1}'),
            metadata=[("authorization", "Bearer t0k")],
            timeout_seconds=2.5,
        )
        response = pb.InvokeFunctionResponse.FromString(raw)
        assert response.output == b'{"a": 1}'
        assert fake.received[0].metadata["authorization"] == "Bearer t0k"
        assert fake.received[0].timeout == pytest.approx(2.5)
        # connection reuse: a second call on the same connection
        await conn.unary_call(SERVICE, "InvokeFunction", invoke_payload())
        assert len(fake.received) == 2
        nursery.cancel_scope.cancel()


async def test_non_ok_status_is_raised_with_code_and_message() -> None:
    fake = FakeFunctionRuntime(behaviour=fail_with(purerpc.StatusCode.NOT_FOUND, "no such run"))
    async with trio.open_nursery() as nursery:
        port = await nursery.start(serve_fake, fake)
        conn = await connect(port, nursery)
        with pytest.raises(GrpcStatusError) as excinfo:
            await conn.unary_call(SERVICE, "InvokeFunction", invoke_payload())
        assert excinfo.value.code == 5
        assert excinfo.value.message == "no such run"
        nursery.cancel_scope.cancel()


async def test_cancelling_a_call_resets_the_stream_and_the_server_sees_it() -> None:
    fake = FakeFunctionRuntime(behaviour=delay_then(60))
    async with trio.open_nursery() as nursery:
        port = await nursery.start(serve_fake, fake)
        conn = await connect(port, nursery)
        with trio.CancelScope() as scope:

            async def cancel_when_started() -> None:
                await fake.started.wait()
                scope.cancel()

            nursery.start_soon(cancel_when_started)
            await conn.unary_call(SERVICE, "InvokeFunction", invoke_payload())
        with trio.fail_after(2):
            await fake.cancelled.wait()
        assert fake.received[0].cancelled
        assert conn.usable
        assert conn.in_flight == 0
        # the connection stays usable after a cancelled call
        fake.behaviour = delay_then(0)
        await conn.unary_call(SERVICE, "InvokeFunction", invoke_payload())
        nursery.cancel_scope.cancel()


async def test_a_large_request_respects_flow_control() -> None:
    fake = FakeFunctionRuntime()
    body = b"x" * (1024 * 1024)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(serve_fake, fake)
        conn = await connect(port, nursery)
        raw = await conn.unary_call(SERVICE, "InvokeFunction", invoke_payload(body))
        assert pb.InvokeFunctionResponse.FromString(raw).output == body
        nursery.cancel_scope.cancel()


async def test_connection_loss_fails_waiting_calls_as_dispatched() -> None:
    fake = FakeFunctionRuntime(behaviour=delay_then(60))
    async with trio.open_nursery() as nursery:
        port = await nursery.start(serve_fake, fake)
        conn = await connect(port, nursery)

        async def close_soon() -> None:
            await fake.started.wait()
            conn.close()

        nursery.start_soon(close_soon)
        with pytest.raises(ConnectionLostError) as excinfo:
            await conn.unary_call(SERVICE, "InvokeFunction", invoke_payload())
        assert excinfo.value.dispatched
        with pytest.raises(ConnectionLostError) as excinfo:
            await conn.unary_call(SERVICE, "InvokeFunction", invoke_payload())
        assert not excinfo.value.dispatched
        nursery.cancel_scope.cancel()


async def test_pool_reuses_one_connection_and_reconnects_after_loss() -> None:
    fake = FakeFunctionRuntime()
    async with trio.open_nursery() as nursery:
        port = await nursery.start(serve_fake, fake)
        resolver = StaticResolver({"runtime-py.ns.svc": Target("127.0.0.1", port)})
        async with open_channel_pool(resolver) as pool:
            key = PoolKey("ns", "py")
            first = await pool.connection(key)
            async with trio.open_nursery() as calls:
                for _ in range(5):
                    calls.start_soon(
                        pool.unary_call, key, SERVICE, "InvokeFunction", invoke_payload()
                    )
            assert await pool.connection(key) is first
            assert pool.open_connections == 1
            first.close()
            await first.wait_closed()
            await pool.unary_call(key, SERVICE, "InvokeFunction", invoke_payload())
            assert await pool.connection(key) is not first
        nursery.cancel_scope.cancel()


async def test_pool_connect_failure_is_not_dispatched() -> None:
    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()  # nothing listens there now
    resolver = StaticResolver({"runtime-py.ns.svc": Target("127.0.0.1", port)})
    async with open_channel_pool(resolver) as pool:
        with pytest.raises(ConnectFailedError):
            await pool.unary_call(PoolKey("ns", "py"), SERVICE, "InvokeFunction", b"")


@pytest.mark.parametrize(
    "garbage",
    [
        b"this is not HTTP/2 at all" * 10,  # h2 protocol error
        b"",  # the peer closes without a word
    ],
)
async def test_a_peer_speaking_garbage_fails_the_call_not_the_process(garbage: bytes) -> None:
    async def serve_garbage(stream: trio.SocketStream) -> None:
        await stream.receive_some(65536)
        if garbage:
            await stream.send_all(garbage)
        await stream.aclose()

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            functools.partial(trio.serve_tcp, serve_garbage, 0, host="127.0.0.1")
        )
        port = listeners[0].socket.getsockname()[1]
        conn = await connect(port, nursery)
        with pytest.raises(ConnectionLostError) as excinfo:
            await conn.unary_call(SERVICE, "InvokeFunction", invoke_payload())
        assert excinfo.value.dispatched
        assert not conn.usable
        assert conn.close_reason
        nursery.cancel_scope.cancel()


async def test_flow_control_with_default_server_windows() -> None:
    """A server keeping HTTP/2's default 64 KiB windows (like grpcio) gets the body in steps."""
    import h2.config
    import h2.connection
    import h2.events

    received = bytearray()

    async def tiny_window_server(stream: trio.SocketStream) -> None:
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
        conn.initiate_connection()
        await stream.send_all(conn.data_to_send())
        while data := await stream.receive_some(65536):
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.DataReceived):
                    received.extend(event.data)
                    conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, h2.events.StreamEnded):
                    message = invoke_payload(b"ok")  # any message: length-prefixed below
                    conn.send_headers(
                        event.stream_id, [(":status", "200"), ("content-type", "application/grpc")]
                    )
                    conn.send_data(
                        event.stream_id, b"\0" + len(message).to_bytes(4, "big") + message
                    )
                    conn.send_headers(event.stream_id, [("grpc-status", "0")], end_stream=True)
            await stream.send_all(conn.data_to_send())

    body = b"y" * 300_000
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            functools.partial(trio.serve_tcp, tiny_window_server, 0, host="127.0.0.1")
        )
        conn = await connect(listeners[0].socket.getsockname()[1], nursery)
        raw = await conn.unary_call(SERVICE, "InvokeFunction", invoke_payload(body))
        assert raw == invoke_payload(b"ok")
        assert pb.InvokeFunctionRequest.FromString(bytes(received[5:])).input == body
        nursery.cancel_scope.cancel()


async def test_pool_never_retries_after_dispatch() -> None:
    fake = FakeFunctionRuntime(behaviour=delay_then(3600))
    async with trio.open_nursery() as nursery:
        port = await nursery.start(serve_fake, fake)
        resolver = StaticResolver({"runtime-py.ns.svc": Target("127.0.0.1", port)})
        async with open_channel_pool(resolver) as pool:
            key = PoolKey("ns", "py")

            async def drop_connection_when_started() -> None:
                await fake.started.wait()
                (await pool.connection(key)).close()

            nursery.start_soon(drop_connection_when_started)
            with pytest.raises(ConnectionLostError) as excinfo:
                await pool.unary_call(key, SERVICE, "InvokeFunction", invoke_payload())
            assert excinfo.value.dispatched
            assert len(fake.received) == 1  # not sent again on a new connection
        nursery.cancel_scope.cancel()


async def test_pool_replaces_a_dead_connection_before_dispatch() -> None:
    fake = FakeFunctionRuntime()
    async with trio.open_nursery() as nursery:
        port = await nursery.start(serve_fake, fake)
        resolver = StaticResolver({"runtime-py.ns.svc": Target("127.0.0.1", port)})
        async with open_channel_pool(resolver) as pool:
            key = PoolKey("ns", "py")
            first = await pool.connection(key)
            first._accepting = False  # e.g. GOAWAY seen: unusable for new calls
            await pool.unary_call(key, SERVICE, "InvokeFunction", invoke_payload())
            assert len(fake.received) == 1
            assert await pool.connection(key) is not first
        nursery.cancel_scope.cancel()
