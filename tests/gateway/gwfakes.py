"""A fake FunctionRuntime (runtimed's gateway-facing side) served by purerpc on port 0.

The fake answers ``InvokeFunction`` with a scripted behaviour (echo, any gRPC status, a
delay) and records every request, its metadata and whether it was cancelled.

purerpc's stock server ignores ``RST_STREAM``, so a server built on it never learns that a
client cancelled a call. The server here hooks purerpc's sans-IO connection to turn a stream
reset into cancellation of that stream's handler: exactly what a conforming gRPC server
(grpcio, grpclib, Go) does and what runtimed must do (docs/gateway.md, "Cancellation").
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
import h2.events
import purerpc
import trio
from anyio.streams.tls import TLSListener
from purerpc.grpc_proto import GRPCProtoSocket
from purerpc.grpclib.config import GRPCConfiguration
from purerpc.grpclib.connection import GRPCConnection
from purerpc.server import ConnectionHandler

from krt.proto.executor.v1 import runtime_grpc
from krt.proto.executor.v1 import runtime_pb2 as pb

Behaviour = Callable[[pb.InvokeFunctionRequest], Awaitable[pb.InvokeFunctionResponse]]


@dataclass
class Received:
    """One InvokeFunction call as the fake saw it."""

    request: pb.InvokeFunctionRequest
    metadata: dict[str, str]
    timeout: float | None
    cancelled: bool = False
    finished: bool = False


async def echo(request: pb.InvokeFunctionRequest) -> pb.InvokeFunctionResponse:
    """Echo the input back as JSON output with one structured output."""
    return pb.InvokeFunctionResponse(
        registration=request.registration,
        invocation_id=request.invocation_id,
        output=request.input,
        content_type="application/json",
        outputs={"size": str(len(request.input))},
    )


def fail_with(code: purerpc.StatusCode, message: str = "") -> Behaviour:
    """A behaviour answering every call with gRPC status ``code``."""

    async def behaviour(request: pb.InvokeFunctionRequest) -> pb.InvokeFunctionResponse:
        raise purerpc.RpcFailedError(purerpc.Status(code, message or code.name))

    return behaviour


def delay_then(seconds: float, then: Behaviour = echo) -> Behaviour:
    """A behaviour that sleeps ``seconds`` (trio time) before ``then``."""

    async def behaviour(request: pb.InvokeFunctionRequest) -> pb.InvokeFunctionResponse:
        await trio.sleep(seconds)
        return await then(request)

    return behaviour


def respond(**fields: Any) -> Behaviour:
    """A behaviour answering with a fixed InvokeFunctionResponse built from ``fields``."""

    async def behaviour(request: pb.InvokeFunctionRequest) -> pb.InvokeFunctionResponse:
        return pb.InvokeFunctionResponse(invocation_id=request.invocation_id, **fields)

    return behaviour


@dataclass
class FakeFunctionRuntime(runtime_grpc.FunctionRuntimeServicer):  # type: ignore[misc]
    """Scripted FunctionRuntime: set :attr:`behaviour`, read :attr:`received`."""

    behaviour: Behaviour = echo
    received: list[Received] = field(default_factory=list)
    started: trio.Event = field(default_factory=trio.Event)
    cancelled: trio.Event = field(default_factory=trio.Event)

    async def InvokeFunction(  # noqa: N802 - gRPC method name
        self, input_message: pb.InvokeFunctionRequest, request: Any
    ) -> pb.InvokeFunctionResponse:
        timeout = request.timeout.total_seconds() if request.timeout is not None else None
        entry = Received(input_message, dict(request.custom_metadata), timeout)
        self.received.append(entry)
        self.started.set()
        try:
            response = await self.behaviour(input_message)
        except trio.Cancelled:
            entry.cancelled = True
            self.cancelled.set()
            raise
        entry.finished = True
        return response


class _ResetAwareConnection(GRPCConnection):  # type: ignore[misc]
    def __init__(self, config: GRPCConfiguration, on_reset: Callable[[int], None]) -> None:
        super().__init__(config)
        self._on_reset = on_reset

    def _stream_reset(self, event: h2.events.StreamReset) -> list[Any]:
        self._on_reset(event.stream_id)
        self.message_read_buffers.pop(event.stream_id, None)
        return []


class _ResetAwareSocket(GRPCProtoSocket):  # type: ignore[misc]
    def __init__(self, config: GRPCConfiguration, sock: Any, on_reset: Callable[[int], None]):
        super().__init__(config, sock)
        connection = _ResetAwareConnection(config, on_reset)
        self._grpc_connection = connection
        self._socket._grpc_connection = connection


class _CancellingHandler(ConnectionHandler):  # type: ignore[misc]
    """purerpc's connection handler, with RST_STREAM cancelling that stream's handler."""

    async def __call__(self, stream_: anyio.abc.SocketStream) -> None:
        scopes: dict[int, trio.CancelScope] = {}

        def on_reset(stream_id: int) -> None:
            if (scope := scopes.get(stream_id)) is not None:
                scope.cancel()

        async def handle(stream: Any) -> None:
            with trio.CancelScope() as scope:
                scopes[stream.stream_id] = scope
                try:
                    await self.request_received(stream)
                finally:
                    scopes.pop(stream.stream_id, None)

        try:
            async with _ResetAwareSocket(self.config, stream_, on_reset) as grpc_socket:
                async with trio.open_nursery() as nursery:
                    async for stream in grpc_socket.listen():
                        nursery.start_soon(handle, stream)
                    # like a real server: the connection is gone, so are its calls
                    nursery.cancel_scope.cancel()
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass


async def serve_fake(
    servicer: FakeFunctionRuntime,
    *,
    ssl_context: ssl.SSLContext | None = None,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``servicer`` on 127.0.0.1, port 0 (TLS with ``ssl_context``); yields the port."""
    tcp = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = int(tcp.extra(anyio.abc.SocketAttribute.local_port))
    listener: Any = tcp
    if ssl_context is not None:
        listener = TLSListener(tcp, ssl_context, standard_compatible=False)
    async with listener:
        handler = _CancellingHandler(
            {"executor.v1.FunctionRuntime": servicer.service}, purerpc.Server(port=port)
        )
        task_status.started(port)
        await listener.serve(handler)


def error_body(response: Any) -> dict[str, Any]:
    """The ``error`` object of a gateway JSON error response."""
    body = json.loads(response.content)
    assert set(body) == {"error"}, body
    error: dict[str, Any] = body["error"]
    return error


@dataclass
class AsgiResponse:
    """What an ASGI app sent, and how many receive() calls it made."""

    status: int
    headers: dict[str, str]
    body: bytes
    receives: int
    receives_before_response: int


async def call_asgi(
    app: Any,
    *,
    method: str = "POST",
    path: str,
    headers: list[tuple[bytes, bytes]],
    chunks: list[bytes],
    disconnect_after_body: bool = False,
) -> AsgiResponse:
    """Drive an ASGI app for one HTTP request in memory.

    ``chunks`` are delivered one per ``receive()`` (the last with ``more_body=False``); after
    them ``receive()`` blocks (or returns ``http.disconnect`` at once when
    ``disconnect_after_body``).
    """
    scope = {
        "type": "http",
        "method": method,
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": headers,
    }
    receives = 0
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        nonlocal receives
        receives += 1
        if receives <= len(chunks):
            return {
                "type": "http.request",
                "body": chunks[receives - 1],
                "more_body": receives < len(chunks),
            }
        if disconnect_after_body:
            return {"type": "http.disconnect"}
        await trio.sleep_forever()
        raise AssertionError

    before_response = -1

    async def send(message: dict[str, Any]) -> None:
        nonlocal before_response
        if message["type"] == "http.response.start":
            before_response = receives
        sent.append(message)

    await app(scope, receive, send)
    if not sent:
        return AsgiResponse(0, {}, b"", receives, before_response)
    start, *bodies = sent
    assert start["type"] == "http.response.start"
    response_headers = {k.decode(): v.decode("latin-1") for k, v in start["headers"]}
    return AsgiResponse(
        start["status"],
        response_headers,
        b"".join(m.get("body", b"") for m in bodies),
        receives,
        before_response,
    )
