"""The gateway's 503 messages say in words what went wrong, never a Python repr.

``RuntimeUnreachable`` bodies used to carry ``BrokenResourceError()`` or
``OSError('all attempts to connect to ... failed')``; the status, reason and Retry-After
stay as they were.
"""

from __future__ import annotations

import contextlib
import functools
import re
import socket
import ssl
import struct

import pytest
import trio
import trustme
from conftest import NAMESPACE, RUNTIME, StackFactory

from gateway.pool import ConnectFailedError, PoolKey, open_channel_pool
from gateway.targets import StaticResolver, Target, service_dns_name
from krt.grpc.client import ConnectionLostError, GrpcConnection

SERVICE = "executor.v1.FunctionRuntime"
#: A Python repr inside a message: ``OSError(``, ``BrokenResourceError()``, ``<object at``.
REPR = re.compile(r"\w+Error\(|\w+\(\)|<\w[^>]* at 0x")


def error_body(response: object) -> dict[str, object]:
    body = response.json()  # type: ignore[attr-defined]
    error = body["error"]
    assert isinstance(error, dict)
    return error


async def closed_port() -> int:
    sock = trio.socket.socket()
    await sock.bind(("127.0.0.1", 0))
    port = int(sock.getsockname()[1])
    sock.close()
    return port


async def reset_after_the_request(stream: trio.SocketStream) -> None:
    """Read the request, then reset the connection (RST, as a crashed runtimed's kernel)."""
    await stream.receive_some(65536)
    await trio.sleep(0.05)  # let the whole request arrive before the reset
    stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    stream.socket.close()


async def test_a_refused_connection_reads_connection_refused(gateway_stack: StackFactory) -> None:
    port = await closed_port()
    resolver = StaticResolver({service_dns_name(NAMESPACE, RUNTIME): Target("127.0.0.1", port)})
    async with gateway_stack(resolver=resolver) as stack:
        response = await stack.invoke()
    assert response.status_code == 503
    assert response.headers["retry-after"] == "1"
    error = error_body(response)
    assert error["reason"] == "RuntimeUnreachable"
    assert error["message"] == (
        f"cannot connect to the Service of Runtime {NAMESPACE}/{RUNTIME} at 127.0.0.1:{port}: "
        "connection refused"
    )


async def test_a_connection_reset_during_the_call_reads_as_words(
    gateway_stack: StackFactory,
) -> None:
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            functools.partial(trio.serve_tcp, reset_after_the_request, 0, host="127.0.0.1")
        )
        port = listeners[0].socket.getsockname()[1]
        target = {service_dns_name(NAMESPACE, RUNTIME): Target("127.0.0.1", port)}
        async with gateway_stack(resolver=StaticResolver(target)) as stack:
            response = await stack.invoke()
        nursery.cancel_scope.cancel()
    # the request was sent: it may have run, so no "retry later" 503 (seed 000, F6)
    assert response.status_code == 502
    assert "retry-after" not in response.headers
    error = error_body(response)
    assert error["reason"] == "InvocationInterrupted"
    message = str(error["message"])
    assert message == (
        "the connection to the Runtime Service broke during the call (the server reset the "
        "connection); the invocation may have run and was not retried"
    )


class BrokenStream(trio.abc.Stream):
    """A transport that breaks on the first read the way trio reports it (no message)."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await trio.lowlevel.checkpoint()

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.checkpoint()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        await trio.lowlevel.checkpoint()
        raise self.error

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (trio.BrokenResourceError(), "the server closed the connection"),
        (ConnectionResetError(104, "Connection reset by peer"), "the server reset the connection"),
    ],
)
async def test_a_broken_transport_is_the_close_reason_in_words(
    error: BaseException, reason: str
) -> None:
    conn = GrpcConnection(BrokenStream(error), authority="127.0.0.1:1")
    async with trio.open_nursery() as nursery:
        await nursery.start(conn.run)
        await conn.wait_closed()
    assert conn.close_reason == reason
    with pytest.raises(ConnectionLostError) as lost:
        await conn.unary_call(SERVICE, "InvokeFunction", b"")
    assert str(lost.value) == f"connection not usable: {reason}"
    assert not REPR.search(str(lost.value))


async def test_a_resolver_that_never_answers_reads_no_answer_within(
    autojump_clock: trio.abc.Clock,
) -> None:
    class Hanging:
        async def resolve(self, namespace: str, runtime: str) -> Target:
            await trio.sleep_forever()
            raise AssertionError("unreachable")

    async with open_channel_pool(Hanging(), connect_timeout_seconds=5.0) as pool:
        with pytest.raises(ConnectFailedError) as failed:
            await pool.unary_call(PoolKey("ns", "py"), SERVICE, "InvokeFunction", b"")
    assert str(failed.value) == (
        "cannot connect to the Service of Runtime ns/py: no answer within 5 s "
        "(resolving the Service)"
    )


async def test_a_failed_tls_handshake_is_named_so() -> None:
    async def not_tls(stream: trio.SocketStream) -> None:
        await stream.receive_some(65536)
        await stream.send_all(b"HTTP/1.1 400 Bad Request\r\n\r\n")
        await stream.aclose()

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            functools.partial(trio.serve_tcp, not_tls, 0, host="127.0.0.1")
        )
        port = listeners[0].socket.getsockname()[1]
        resolver = StaticResolver({"runtime-py.ns.svc": Target("127.0.0.1", port)})
        context = ssl.create_default_context()
        async with open_channel_pool(resolver, ssl_context=context) as pool:
            with pytest.raises(ConnectFailedError) as failed:
                await pool.unary_call(PoolKey("ns", "py"), SERVICE, "InvokeFunction", b"")
        nursery.cancel_scope.cancel()
    text = str(failed.value)
    assert text.startswith(
        f"cannot connect to the Service of Runtime ns/py at 127.0.0.1:{port}: "
        "TLS handshake failed: "
    )
    assert not REPR.search(text)


async def test_a_certificate_for_another_name_is_certificate_verify_failed() -> None:
    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("someone-else.example").configure_cert(server_context)

    async def serve(stream: trio.SSLStream[trio.SocketStream]) -> None:
        with contextlib.suppress(trio.BrokenResourceError):
            await stream.do_handshake()

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            functools.partial(trio.serve_ssl_over_tcp, serve, 0, server_context, host="127.0.0.1")
        )
        port = listeners[0].transport_listener.socket.getsockname()[1]
        target = Target("127.0.0.1", port, server_name="runtime-py.ns.svc")
        resolver = StaticResolver({"runtime-py.ns.svc": target})
        client_context = ssl.create_default_context()
        ca.configure_trust(client_context)
        async with open_channel_pool(resolver, ssl_context=client_context) as pool:
            with pytest.raises(ConnectFailedError) as failed:
                await pool.unary_call(PoolKey("ns", "py"), SERVICE, "InvokeFunction", b"")
        nursery.cancel_scope.cancel()
    assert str(failed.value).startswith(
        f"cannot connect to the Service of Runtime ns/py at 127.0.0.1:{port}: "
        "TLS handshake failed: certificate verify failed: "
    )
