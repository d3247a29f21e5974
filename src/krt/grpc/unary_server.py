"""Serving one HTTP/2 connection whose methods are all unary, without per-stream queues.

Used by :class:`krt.grpc.server.CallHandler` when every method it serves is unary, which is
every method of ``executor.v1`` (seed 002): runtimed's FunctionRuntime proxy and both
built-in Runtime Servers, so every invoke crosses this loop twice and every task-Run RPC
(Execute, Status, List, Forget) once.

purerpc's server socket gives each stream two anyio memory streams, a flow-control event and
a stream object, sends every event through them to the call's task, and runs the call's task
from the request headers on, which then waits for the message and the end of the request.
For a unary call that machinery is most of the server's cost per call. Here the connection's
reader keeps a small record per stream (the request headers and the one message) and starts
the call's task only once the request is complete, so the task never waits for input; the
answer (headers, message, trailers) is queued on purerpc's sans-IO
:class:`~purerpc.grpclib.connection.GRPCConnection` in one go and leaves in one write: by the
call's own task on plain TCP when the socket takes it (:mod:`krt.grpc.direct_writes`), else
by a writer task owned by the connection. The HTTP/2 and gRPC framing (h2, purerpc's message
buffers, header parsing and trailers) are purerpc's; request headers are checked by
:mod:`krt.grpc.header_checks` (h2's rules in one pass) and repeated header blocks are
encoded and decoded from memory (:mod:`krt.grpc.hpack_encoding`). Measured against the
stream loop of :mod:`krt.grpc.server` (echo method, 3,000 sequential calls with a JWT-sized
token, client and server in separate processes): about 20% less server CPU per call (480-540
-> 360-410 microseconds on the shared 2-core machine, HPACK changes included) before those
three changes, which take another 16% of the instructions of a call (client and server
together, callgrind: 2.71 -> 2.28 million) and leave 4 task steps per call instead of 8.

Per-call policy, as in :mod:`krt.grpc.server`: each call runs in its own cancel scope; a
stream reset (the client cancelled) cancels exactly that call, a closed connection cancels
all of them, ``grpc-timeout`` bounds the call (DEADLINE_EXCEEDED, measured from the request
headers), undecodable requests and broken framing are INVALID_ARGUMENT, unexpected
exceptions INTERNAL, and status messages are bounded (:mod:`krt.grpc.status_messages`).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, NoReturn

import anyio
import anyio.abc
import h2.errors
import h2.events
import h2.exceptions
import trio
from purerpc import Service
from purerpc.grpclib.buffers import MessageWriteBuffer
from purerpc.grpclib.config import GRPCConfiguration
from purerpc.grpclib.connection import GRPCConnection
from purerpc.grpclib.events import (
    MessageReceived,
    RequestEnded,
    RequestReceived,
    WindowUpdated,
)
from purerpc.grpclib.exceptions import GRPCError, ProtocolError
from purerpc.grpclib.status import Status, StatusCode

from krt.grpc import closed_streams
from krt.grpc.direct_writes import plain_socket_fd, write_now
from krt.grpc.header_checks import check_request_headers
from krt.grpc.hpack_encoding import LiteralHpackEncoder, install_decoder
from krt.grpc.status_messages import bounded, describe, status_for_error

__all__ = ["UnaryConnection", "current_call_scope"]

log = logging.getLogger("krt.grpc.server")

_READ_CHUNK: Final = 65536
_PROTO: Final = "+proto"

_CALL_SCOPE: Final[contextvars.ContextVar[trio.CancelScope | None]] = contextvars.ContextVar(
    "krt_grpc_call_scope", default=None
)


def current_call_scope() -> trio.CancelScope | None:
    """The cancel scope of the unary call the current task serves, or ``None`` outside one.

    Its ``cancel_called`` turns true synchronously in the connection's read loop, before any
    later frame of the connection is processed, when the client resets the call's stream or
    the connection ends (and when ``grpc-timeout`` passes). A method holding a per-Run
    resource records it, so a later call can tell a holder being cancelled (it lets go within
    a scheduler pass or two) from a live one (issue 8: a caller that disconnects frees the
    slot, and the next invoke succeeds at once).
    """
    return _CALL_SCOPE.get()


@dataclass(frozen=True, slots=True)
class _Reset:
    """The client reset a stream (purerpc drops h2's ``StreamReset``)."""

    stream_id: int


class _ServerConnection(GRPCConnection):  # type: ignore[misc]
    """purerpc's sans-IO server connection, reporting stream resets as :class:`_Reset`.

    Received header blocks are checked by :func:`krt.grpc.header_checks.check_request_headers`
    (h2's rules in one pass) instead of h2's generator chain, which is switched off.
    """

    def __init__(self, config: GRPCConfiguration) -> None:
        super().__init__(config)
        self.h2_connection.config.validate_inbound_headers = False

    def _stream_reset(self, event: h2.events.StreamReset) -> list[Any]:
        self.message_read_buffers.pop(event.stream_id, None)
        return [_Reset(event.stream_id)]

    def _refuse(self, error: h2.exceptions.ProtocolError) -> NoReturn:
        # as h2 does for a header block it rejects: GOAWAY(PROTOCOL_ERROR), then the error
        with contextlib.suppress(h2.exceptions.H2Error):
            self.h2_connection.close_connection(error_code=h2.errors.ErrorCodes.PROTOCOL_ERROR)
        raise error

    def _request_received(self, event: h2.events.RequestReceived) -> list[Any]:
        try:
            check_request_headers(event.headers, trailers=False)
        except h2.exceptions.ProtocolError as error:
            self._refuse(error)
        return super()._request_received(event)  # type: ignore[no-any-return]

    def _trailers_received(self, event: h2.events.TrailersReceived) -> list[Any]:
        try:
            check_request_headers(event.headers, trailers=True)
        except h2.exceptions.ProtocolError as error:
            self._refuse(error)
        return super()._trailers_received(event)  # type: ignore[no-any-return]


@dataclass(eq=False, slots=True)
class _Call:
    """One unary call: its request, its one message, its cancel scope."""

    request: RequestReceived
    method: Any  # purerpc's BoundRPCMethod
    timeout: float
    deadline: float
    message: bytes | None = None
    messages: int = 0
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    reset: bool = False
    responded: bool = False
    window: trio.Event | None = None


class UnaryConnection:
    """Serves the unary calls of one accepted connection until the peer closes it.

    Args:
        sock: the accepted byte stream (TCP, or TLS with ALPN ``h2``); the caller closes it.
        services: ``{"package.Service": purerpc.Service}``, every method unary.
        config: purerpc's server configuration (``client_side=False``).
    """

    def __init__(
        self,
        sock: anyio.abc.ByteStream,
        services: Mapping[str, Service],
        config: GRPCConfiguration,
    ) -> None:
        self._sock = sock
        self._services = services
        self._h2 = _ServerConnection(config)
        closed_streams.limit_closed_stream_memory(self._h2.h2_connection)
        # every header this side sends is built by purerpc (fixed lowercase names, a
        # percent-encoded status message): h2's per-call outbound checks only re-check it.
        # Requests are still validated (they come from any client), by _ServerConnection.
        self._h2.h2_connection.encoder = LiteralHpackEncoder()
        install_decoder(self._h2.h2_connection)
        h2_config = self._h2.h2_connection.config
        h2_config.validate_outbound_headers = False
        h2_config.normalize_outbound_headers = False
        self._calls: dict[int, _Call] = {}
        self._wake = trio.Event()
        #: plain TCP: answers are written by the call's task at once (krt.grpc.direct_writes)
        self._fd = plain_socket_fd(sock)
        self._writing = False
        self._pending = b""

    @property
    def h2_connection(self) -> Any:
        """The connection's :class:`h2.connection.H2Connection` (for inspection in tests)."""
        return self._h2.h2_connection

    async def serve(self) -> None:
        """Read and answer calls until the peer closes the connection; then cancel the rest.

        Raises:
            Exception: whatever broke the connection (h2 or purerpc rejecting what the peer
                sent, a transport error other than the peer going away); calls on it are
                cancelled first.
        """
        self._h2.initiate_connection()
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._writer)
                try:
                    await self._read(nursery)
                finally:
                    # the peer closed the connection (or broke it): no call on it can be
                    # answered; each call's own scope too, so current_call_scope() shows it
                    for call in self._calls.values():
                        call.scope.cancel()
                    nursery.cancel_scope.cancel()
        finally:
            self._fd = None  # the caller closes the socket next

    async def _writer(self) -> None:
        h2_connection = self._h2.h2_connection
        while True:
            data = h2_connection.data_to_send()
            if self._pending:
                data, self._pending = self._pending + data, b""
            if data:
                self._writing = True
                try:
                    await self._sock.send(data)
                finally:
                    self._writing = False
                continue
            await self._wake.wait()
            self._wake = trio.Event()

    def _flush(self) -> None:
        """Send what h2 queued: at once on a plain socket if it takes it, else by the writer."""
        if self._fd is not None and not self._writing and not self._pending:
            data = self._h2.h2_connection.data_to_send()
            if not data:
                return
            self._pending = write_now(self._fd, data)
            if not self._pending:
                return
        self._wake.set()

    async def _read(self, nursery: trio.Nursery) -> None:
        h2_connection = self._h2.h2_connection
        while True:
            try:
                data = await self._sock.receive(_READ_CHUNK)
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                return
            for event in self._h2.receive_data(data):
                self._on_event(event, nursery)
            # SETTINGS/PING acknowledgements, window updates, early answers
            if getattr(h2_connection, "_data_to_send", True):
                self._flush()

    def _on_event(self, event: Any, nursery: trio.Nursery) -> None:
        if isinstance(event, RequestReceived):
            self._on_request(event)
            return
        if isinstance(event, WindowUpdated):
            if event.stream_id == 0:
                for waiting in self._calls.values():
                    if waiting.window is not None:
                        waiting.window.set()
            elif (updated := self._calls.get(event.stream_id)) is not None:
                if updated.window is not None:
                    updated.window.set()
            return
        call = self._calls.get(event.stream_id)
        if call is None:
            return
        if isinstance(event, MessageReceived):
            self._h2.acknowledge_received_data(event.stream_id, event.flow_controlled_length)
            call.messages += 1
            if call.message is None:
                call.message = event.data
        elif isinstance(event, RequestEnded):
            nursery.start_soon(self._run_call, event.stream_id, call)
        elif isinstance(event, _Reset):
            del self._calls[event.stream_id]
            call.reset = True
            call.scope.cancel()
            if call.window is not None:
                call.window.set()

    def _on_request(self, request: RequestReceived) -> None:
        service = self._services.get(request.service_name)
        method = None if service is None else service.methods.get(request.method_name)
        if service is None or method is None:
            what = (
                f"service {request.service_name}"
                if service is None
                else f"method {request.service_name}/{request.method_name}"
            )
            self._answer_status(
                request.stream_id,
                Status(StatusCode.UNIMPLEMENTED, f"{what} is not implemented"),
                headers_sent=False,
            )
            return
        timeout = math.inf if request.timeout is None else request.timeout.total_seconds()
        deadline = trio.current_time() + timeout
        self._calls[request.stream_id] = _Call(request, method, timeout=timeout, deadline=deadline)

    async def _run_call(self, stream_id: int, call: _Call) -> None:
        _CALL_SCOPE.set(call.scope)  # this task's own context: no reset needed
        try:
            await self._run_call_in_scope(stream_id, call)
        except Exception as exc:  # one broken stream must not drop the connection's other calls
            log.info("call dropped", extra={"stream_id": stream_id, "error": describe(exc)})
        finally:
            if self._calls.get(stream_id) is call:
                del self._calls[stream_id]

    async def _run_call_in_scope(self, stream_id: int, call: _Call) -> None:
        with call.scope:
            call.scope.deadline = call.deadline
            response, status = await self._call_method(call)
            # a method that finished without a checkpoint after its caller reset the
            # stream: the reset cancelled it and h2 has forgotten the stream
            await trio.lowlevel.checkpoint_if_cancelled()
            if status is None:
                await self._answer(stream_id, call, response)
            else:
                self._answer_status(stream_id, status, headers_sent=False)
        if call.scope.cancelled_caught:
            if call.reset:
                log.info("call cancelled by the client", extra={"stream_id": stream_id})
            else:
                self._answer_status(
                    stream_id,
                    Status(
                        StatusCode.DEADLINE_EXCEEDED,
                        f"the call's deadline (grpc-timeout {call.timeout:g} s) passed before "
                        "it finished",
                    ),
                    headers_sent=call.responded,
                )

    async def _call_method(self, call: _Call) -> tuple[bytes, Status | None]:
        """Decode the request, run the method, encode its answer.

        Returns:
            ``(serialized response, None)``, or ``(b"", status)`` when the request could not
            be decoded, the method failed or its return value cannot be serialized.
        """
        request = call.request
        signature = call.method.signature
        try:
            if call.message is None:
                raise ProtocolError("Expected one message, got zero")
            if call.messages > 1:
                raise ProtocolError("Expected one message, got multiple")
            message = signature.request_type.FromString(call.message)
            response = await call.method.method_fn(message, request=request)
            return bytes(response.SerializeToString()), None
        except Exception as error:
            name = f"{request.service_name}/{request.method_name}"
            return b"", status_for_error(error, request_type=signature.request_type, name=name)

    async def _answer(self, stream_id: int, call: _Call, payload: bytes) -> None:
        """Queue headers, the message and OK trailers; wait for flow control if it must."""
        buffer = MessageWriteBuffer(None, len(payload) + 5)
        buffer.write_message(payload, False)
        try:
            self._h2.start_response(stream_id, _PROTO)
            call.responded = True
            while buffer:
                window = self._h2.flow_control_window(stream_id)
                if window <= 0:
                    self._flush()
                    call.window = trio.Event()
                    await call.window.wait()
                    continue
                self._h2.send_data(stream_id, buffer.data_to_send(min(window, len(buffer))))
            self._h2.end_response(stream_id, Status(StatusCode.OK))
        except (GRPCError, h2.exceptions.ProtocolError):
            return  # the stream closed under the answer (the peer went away or reset it)
        finally:
            self._flush()

    def _answer_status(self, stream_id: int, status: Status, *, headers_sent: bool) -> None:
        """Queue response headers (unless sent) and ``status`` trailers; a dead stream is ignored.

        Args:
            stream_id: the call's stream.
            status: the call's outcome (its message is bounded here).
            headers_sent: the response headers went out already (a deadline passed while the
                answer waited for flow control): only the trailers follow.
        """
        try:
            if not headers_sent:
                self._h2.start_response(stream_id, _PROTO)
            self._h2.end_response(stream_id, bounded(status))
        except (GRPCError, h2.exceptions.ProtocolError, TypeError):
            return  # reset or already closed by the peer: nobody is left to tell
        finally:
            self._flush()
