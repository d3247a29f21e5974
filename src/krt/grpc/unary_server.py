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
answer (headers, message, trailers; an error is one Trailers-Only block) is queued on the
connection's h2 state machine in one go and leaves in one write: by the call's own task on
plain TCP when the socket takes it (:mod:`krt.grpc.direct_writes`), else by a writer task
owned by the connection. HTTP/2 is h2's, request parsing and message buffers purerpc's
(its sans-IO :class:`~purerpc.grpclib.connection.GRPCConnection`); the fixed response
header blocks and the 5-byte message prefix are built here. Plain TCP is read with one
``os.read`` after a readiness wait (issue 6, Runtime Server calls from another process, 25
in flight: about 6% of the server's CPU per call). Request headers are checked by
:mod:`krt.grpc.header_checks` (h2's rules in one pass, a repeated block once) and repeated
header blocks are encoded and decoded from memory (:mod:`krt.grpc.hpack_encoding`).
Issue 6 (the Bash Runtime Server, 25 calls in flight from another process): those last
changes took server CPU per call from ~160 to ~135 µs (Health) and from ~185 to ~160 µs (a
NOT_FOUND Status) on the shared 2-core machine, and :func:`runs_inline` both to ~115 µs.
Measured against the
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
A request message that cannot be read (over the message limit: RESOURCE_EXHAUSTED; not
decompressible: INTERNAL or UNIMPLEMENTED) fails only its call, whose unread body is reset
and dropped (:mod:`krt.grpc.unreadable_messages`); the connection serves on.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, NoReturn

import anyio
import anyio.abc
import h2.errors
import h2.events
import h2.exceptions
import trio
from purerpc import Service
from purerpc.grpclib.config import GRPCConfiguration
from purerpc.grpclib.events import (
    MessageReceived,
    RequestEnded,
    RequestReceived,
    WindowUpdated,
)
from purerpc.grpclib.exceptions import GRPCError, ProtocolError
from purerpc.grpclib.status import Status, StatusCode

from krt.grpc import closed_streams
from krt.grpc.direct_reads import receive_when_ready
from krt.grpc.direct_writes import plain_socket_fd, write_now
from krt.grpc.event_translation import LeanGrpcConnection
from krt.grpc.header_checks import RequestHeaderChecks
from krt.grpc.hpack_encoding import LiteralHpackEncoder, install_decoder
from krt.grpc.status_messages import describe, status_fields, status_for_error
from krt.grpc.unreadable_messages import MessageUnreadable, refuse_message

__all__ = ["UnaryConnection", "current_call_scope", "runs_inline"]

log = logging.getLogger("krt.grpc.server")

_READ_CHUNK: Final = 65536
#: plain TCP connections are read with ``os.read`` after a readiness wait (see ``_receive``).
DIRECT_READS = True
#: the response headers purerpc's ``start_response(stream_id, "+proto")`` sends.
_RESPONSE_HEADERS: Final = ((":status", "200"), ("content-type", "application/grpc+proto"))
#: the trailers of an answered call (purerpc's ``end_response`` with status OK).
_OK_TRAILERS: Final = (("grpc-status", "0"),)

_CALL_SCOPE: Final[contextvars.ContextVar[trio.CancelScope | None]] = contextvars.ContextVar(
    "krt_grpc_call_scope", default=None
)


#: set on a method's function by :func:`runs_inline`.
_INLINE: Final = "__krt_grpc_runs_inline__"


def runs_inline(service: Service, *methods: str) -> Service:
    """Mark unary methods of ``service`` that never await: the connection's reader runs them.

    Such a method (a lookup in local state, answered at once) is called in the reader task
    as soon as its request is complete, with no task, cancel scope or scheduler pass of its
    own, and its answer joins the others of the same read in one write. Issue 6: the
    Runtime Server's Execute, Status, List, Cancel, Forget and Health are all of this kind;
    a task per call cost about a fifth of the server's CPU per call. An inline call has
    no :func:`current_call_scope`; a ``grpc-timeout`` that passed before it ran is answered
    DEADLINE_EXCEEDED as for any call. Only :class:`UnaryConnection` honours the mark.

    A marked method that awaits anyway is a bug: it is closed at its first suspension and
    the call answered INTERNAL (logged), never left half-run.

    Args:
        service: a purerpc service (e.g. a generated servicer's ``service``).
        methods: names of its methods to run inline.

    Returns:
        ``service``, its methods marked.

    Raises:
        KeyError: ``service`` has no method of one of the names.
    """
    for name in methods:
        setattr(service.methods[name].method_fn, _INLINE, True)
    return service


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


class _ServerConnection(LeanGrpcConnection):
    """purerpc's sans-IO server connection, reporting stream resets as :class:`_Reset`.

    Received header blocks are checked by :class:`krt.grpc.header_checks.RequestHeaderChecks`
    (h2's rules in one pass, a repeated block once) instead of h2's generator chain, which
    is switched off.
    """

    def __init__(self, config: GRPCConfiguration) -> None:
        super().__init__(config)
        self.h2_connection.config.validate_inbound_headers = False
        self._header_checks = RequestHeaderChecks()

    def _stream_reset(self, event: h2.events.StreamReset) -> list[Any]:
        self.forget_stream(event.stream_id)
        return [_Reset(event.stream_id)]

    def _refuse(self, error: h2.exceptions.ProtocolError) -> NoReturn:
        # as h2 does for a header block it rejects: GOAWAY(PROTOCOL_ERROR), then the error
        with contextlib.suppress(h2.exceptions.H2Error):
            self.h2_connection.close_connection(error_code=h2.errors.ErrorCodes.PROTOCOL_ERROR)
        raise error

    def _request_received(self, event: h2.events.RequestReceived) -> list[Any]:
        try:
            self._header_checks.check(event.headers, trailers=False)
        except h2.exceptions.ProtocolError as error:
            self._refuse(error)
        return super()._request_received(event)  # type: ignore[no-any-return]

    def _trailers_received(self, event: h2.events.TrailersReceived) -> list[Any]:
        try:
            self._header_checks.check(event.headers, trailers=True)
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
    inline: bool = False
    message: bytes | None = None
    messages: int = 0
    #: the call's task's scope (inline calls have neither).
    scope: trio.CancelScope | None = None
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
        closed_streams.handle_closed_streams(self._h2.h2_connection)
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
                        if call.scope is not None:
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
            data = await self._receive()
            if not data:
                return
            for event in self._h2.receive_data(data):
                self._on_event(event, nursery)
            # SETTINGS/PING acknowledgements, window updates, early answers
            if getattr(h2_connection, "_data_to_send", True):
                self._flush()

    async def _receive(self) -> bytes:
        """The next bytes from the peer; empty once it closed or broke the connection.

        On plain TCP the reader waits for the socket to be readable, then reads it: one
        system call per read where the stream's ``receive`` makes two once the connection
        is drained (a read that would block, then the one after the wait), and no wrapper
        layers (issue 6). The wait is a scheduling point, as the stream's receive is.
        """
        if (fd := self._fd) is None or not DIRECT_READS:
            try:
                return await self._sock.receive(_READ_CHUNK)
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                return b""
        try:
            return await receive_when_ready(fd, _READ_CHUNK)
        except OSError:  # reset by the peer: as the stream's BrokenResourceError
            return b""

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
            # a stream answered already (an unknown method): its bytes go back to the window
            if isinstance(event, MessageReceived):
                self._h2.acknowledge_received_data(event.stream_id, event.flow_controlled_length)
            elif isinstance(event, MessageUnreadable):
                refuse_message(self._h2.h2_connection, event, headers_sent=True)
            return
        if isinstance(event, MessageReceived):
            self._h2.acknowledge_received_data(event.stream_id, event.flow_controlled_length)
            call.messages += 1
            if call.message is None:
                call.message = event.data
        elif isinstance(event, RequestEnded):
            if call.inline:
                self._run_inline(event.stream_id, call, nursery)
            else:
                call.scope = trio.CancelScope()
                nursery.start_soon(self._run_call, event.stream_id, call)
        elif isinstance(event, _Reset):
            del self._calls[event.stream_id]
            call.reset = True
            if call.scope is not None:
                call.scope.cancel()
            if call.window is not None:
                call.window.set()
        elif isinstance(event, MessageUnreadable):
            # before the request ended, so the call has no task yet: answer it here
            del self._calls[event.stream_id]
            log.info(
                "request message unreadable",
                extra={"stream_id": event.stream_id, "status": event.status.status_message},
            )
            refuse_message(self._h2.h2_connection, event, headers_sent=False)

    def _on_request(self, request: RequestReceived) -> None:
        service = self._services.get(request.service_name)
        method = None if service is None else service.methods.get(request.method_name)
        if service is None or method is None:
            what = (
                f"service {request.service_name}"
                if service is None
                else f"method {request.service_name}/{request.method_name}"
            )
            self._queue_status(  # sent by the reader with the rest of this read's answers
                request.stream_id,
                Status(StatusCode.UNIMPLEMENTED, f"{what} is not implemented"),
                headers_sent=False,
            )
            return
        timeout = math.inf if request.timeout is None else request.timeout.total_seconds()
        deadline = trio.current_time() + timeout
        inline = getattr(method.method_fn, _INLINE, False)
        self._calls[request.stream_id] = _Call(
            request, method, timeout=timeout, deadline=deadline, inline=inline
        )

    def _run_inline(self, stream_id: int, call: _Call, nursery: trio.Nursery) -> None:
        """Run a :func:`runs_inline` method now and queue its answer (the reader flushes it).

        An answer larger than the stream's flow-control window goes to a task of its own,
        which waits for the window as every answer may.
        """
        try:
            if trio.current_time() >= call.deadline:
                del self._calls[stream_id]
                self._queue_status(stream_id, _deadline_status(call), headers_sent=False)
                return
            response, status = self._call_inline(call)
            if status is not None:
                del self._calls[stream_id]
                self._queue_status(stream_id, status, headers_sent=False)
                return
            if len(response) + 5 > self._h2.h2_connection.local_flow_control_window(stream_id):
                call.scope = trio.CancelScope()
                nursery.start_soon(self._run_answer, stream_id, call, response)
                return
            del self._calls[stream_id]
            self._queue_answer(stream_id, call, response)
        except Exception as exc:  # one broken stream must not drop the connection's other calls
            self._calls.pop(stream_id, None)
            log.info("call dropped", extra={"stream_id": stream_id, "error": describe(exc)})

    def _call_inline(self, call: _Call) -> tuple[bytes, Status | None]:
        """:meth:`_call_method` for a method that must not await (run to its end here)."""
        request = call.request
        signature = call.method.signature
        name = f"{request.service_name}/{request.method_name}"
        try:
            coroutine = call.method.method_fn(_decode_request(call), request=request)
            try:
                coroutine.send(None)
            except StopIteration as done:
                return bytes(done.value.SerializeToString()), None
            coroutine.close()
            raise RuntimeError(f"{name} is marked runs_inline but awaited")
        except Exception as error:
            return b"", status_for_error(error, request_type=signature.request_type, name=name)

    async def _run_answer(self, stream_id: int, call: _Call, payload: bytes) -> None:
        """Send an inline call's answer that must wait for flow control (a task of its own)."""
        assert call.scope is not None
        try:
            with call.scope:
                if call.deadline != math.inf:
                    call.scope.deadline = call.deadline
                await self._answer(stream_id, call, payload)
            if call.scope.cancelled_caught and not call.reset:
                self._answer_status(stream_id, _deadline_status(call), headers_sent=call.responded)
        except Exception as exc:
            log.info("call dropped", extra={"stream_id": stream_id, "error": describe(exc)})
        finally:
            if self._calls.get(stream_id) is call:
                del self._calls[stream_id]

    async def _run_call(self, stream_id: int, call: _Call) -> None:
        assert call.scope is not None
        _CALL_SCOPE.set(call.scope)  # this task's own context: no reset needed
        try:
            await self._run_call_in_scope(stream_id, call)
        except Exception as exc:  # one broken stream must not drop the connection's other calls
            log.info("call dropped", extra={"stream_id": stream_id, "error": describe(exc)})
        finally:
            if self._calls.get(stream_id) is call:
                del self._calls[stream_id]

    async def _run_call_in_scope(self, stream_id: int, call: _Call) -> None:
        assert call.scope is not None
        with call.scope:
            if call.deadline != math.inf:  # most calls have none: skip trio's deadline upkeep
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
                self._answer_status(stream_id, _deadline_status(call), headers_sent=call.responded)

    async def _call_method(self, call: _Call) -> tuple[bytes, Status | None]:
        """Decode the request, run the method, encode its answer.

        Returns:
            ``(serialized response, None)``, or ``(b"", status)`` when the request could not
            be decoded, the method failed or its return value cannot be serialized.
        """
        request = call.request
        signature = call.method.signature
        try:
            response = await call.method.method_fn(_decode_request(call), request=request)
            return bytes(response.SerializeToString()), None
        except Exception as error:
            name = f"{request.service_name}/{request.method_name}"
            return b"", status_for_error(error, request_type=signature.request_type, name=name)

    async def _answer(self, stream_id: int, call: _Call, payload: bytes) -> None:
        """Queue headers, the message and OK trailers; wait for flow control if it must.

        The fixed header blocks go to h2 directly and the message gets its gRPC length
        prefix here (an uncompressed-flag byte and a 4-byte big-endian length: gRPC over
        HTTP/2, "Length-Prefixed-Message"): purerpc's ``start_response``/``end_response``
        rebuild the same two lists per call and its ``MessageWriteBuffer`` costs ~4 µs per
        answer for the prefix (issue 6).
        """
        h2_connection = self._h2.h2_connection
        data = b"\0" + len(payload).to_bytes(4, "big") + payload
        try:
            h2_connection.send_headers(stream_id, _RESPONSE_HEADERS)
            call.responded = True
            sent = 0
            while sent < len(data):
                window = min(
                    h2_connection.max_outbound_frame_size,
                    h2_connection.local_flow_control_window(stream_id),
                )
                if window <= 0:
                    self._flush()
                    call.window = trio.Event()
                    await call.window.wait()
                    continue
                chunk = data if sent == 0 and window >= len(data) else data[sent : sent + window]
                h2_connection.send_data(stream_id, chunk)
                sent += len(chunk)
            h2_connection.send_headers(stream_id, _OK_TRAILERS, end_stream=True)
        except (GRPCError, h2.exceptions.ProtocolError):
            return  # the stream closed under the answer (the peer went away or reset it)
        finally:
            self._flush()

    def _queue_answer(self, stream_id: int, call: _Call, payload: bytes) -> None:
        """Queue headers, the message and OK trailers of an answer that fits the window.

        A stream that closed under the answer (the peer reset it or went away) is ignored.
        """
        h2_connection = self._h2.h2_connection
        data = b"\0" + len(payload).to_bytes(4, "big") + payload
        try:
            h2_connection.send_headers(stream_id, _RESPONSE_HEADERS)
            call.responded = True
            frame = h2_connection.max_outbound_frame_size
            if len(data) <= frame:
                h2_connection.send_data(stream_id, data)
            else:
                for start in range(0, len(data), frame):
                    h2_connection.send_data(stream_id, data[start : start + frame])
            h2_connection.send_headers(stream_id, _OK_TRAILERS, end_stream=True)
        except (GRPCError, h2.exceptions.ProtocolError):
            return

    def _answer_status(self, stream_id: int, status: Status, *, headers_sent: bool) -> None:
        """:meth:`_queue_status`, then send what is queued."""
        self._queue_status(stream_id, status, headers_sent=headers_sent)
        self._flush()

    def _queue_status(self, stream_id: int, status: Status, *, headers_sent: bool) -> None:
        """End the call with ``status``; a dead stream is ignored.

        A call that sent nothing yet gets a Trailers-Only response (gRPC over HTTP/2: one
        HEADERS frame with the response headers and the status, ending the stream), as grpcio
        answers an error; purerpc sent a second header block for the trailers.

        Args:
            stream_id: the call's stream.
            status: the call's outcome (its message is bounded here).
            headers_sent: the response headers went out already (a deadline passed while the
                answer waited for flow control): only the trailers follow.
        """
        fields = status_fields(status)
        try:
            self._h2.h2_connection.send_headers(
                stream_id,
                fields if headers_sent else [*_RESPONSE_HEADERS, *fields],
                end_stream=True,
            )
        except (GRPCError, h2.exceptions.ProtocolError, TypeError):
            return  # reset or already closed by the peer: nobody is left to tell


def _deadline_status(call: _Call) -> Status:
    """DEADLINE_EXCEEDED for a call whose ``grpc-timeout`` passed."""
    return Status(
        StatusCode.DEADLINE_EXCEEDED,
        f"the call's deadline (grpc-timeout {call.timeout:g} s) passed before it finished",
    )


def _decode_request(call: _Call) -> Any:
    """The call's one request message, decoded.

    Raises:
        ProtocolError: the call carried no message or more than one (a unary call has one).
        google.protobuf.message.DecodeError: the message does not decode as the request type.
    """
    if call.message is None:
        raise ProtocolError("Expected one message, got zero")
    if call.messages > 1:
        raise ProtocolError("Expected one message, got multiple")
    return call.method.signature.request_type.FromString(call.message)
