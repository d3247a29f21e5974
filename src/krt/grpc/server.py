"""The gRPC server connection handler: purerpc's wire code, our per-call cancellation policy.

Used by the Runtime Servers (:mod:`servers.common.app`) and by runtimed's data plane
(:mod:`runtimed.dataplane.server`).

purerpc 0.8.0 (pinned, see pyproject.toml) parses HTTP/2 and gRPC framing well, but its
server-side :class:`purerpc.server.ConnectionHandler` does not honour the caller's context:

* an HTTP/2 ``RST_STREAM`` (the client cancelled the call, or its deadline passed) is
  dropped, and a closed TCP connection leaves every in-flight handler running, so a cancelled
  InvokeFunction kept its worker busy and its in-flight slot taken until the handler's own
  timeout (seed 002, "Built-in Runtime Requirements": adapters honour context cancellation);
* the ``grpc-timeout`` request header is parsed but never enforced;
* a request that fails to parse (invalid UTF-8 in a string field, corrupt wire format) is
  answered CANCELLED with the ``repr`` of an exception tuple;
* a status message is percent-encoded without a bound, so a 4 KiB non-ASCII error detail
  becomes a 12 KiB trailer that grpcio clients reject (RESOURCE_EXHAUSTED, which runtimed
  would map to HTTP 429).

:class:`CallHandler` replaces that handler. Each call runs in its own trio cancel scope: a
stream reset cancels exactly that call, a closed connection cancels all calls on it, and
``grpc-timeout`` bounds the call (DEADLINE_EXCEEDED). Undecodable requests are
INVALID_ARGUMENT, unexpected exceptions INTERNAL, and every status message is made valid
UTF-8 and shortened to fit :data:`MAX_STATUS_MESSAGE_BYTES` once encoded. A request
message purerpc cannot read (over its 32 MiB limit: RESOURCE_EXHAUSTED; not decompressible:
INTERNAL or UNIMPLEMENTED), which made purerpc's parser raise and drop the connection with
every call on it, fails only its own call (:mod:`krt.grpc.unreadable_messages`). The HTTP/2
and message framing stay purerpc's; the per-call policy is ours because purerpc offers no
hook for it (its handler's stream-reset and disconnect handling cannot be configured).

Per-call cost (every invoke crosses this handler twice: runtimed, then the Runtime Server):
a unary answer (headers, message, trailers) is queued in one go and leaves in one write,
where purerpc sent the headers before running the method (two packets, two wakeups of the
client); the read loop queues events without a scheduler pass each, the call takes queued
events without one, and the writer is woken only with bytes to send. Measured with a trio
instrument, a call costs 7 task steps here instead of 13.5 (tests/krt/test_grpc_wire_writes.py).
Services whose methods are all unary (every ``executor.v1`` service) go further: their
connections are served by :mod:`krt.grpc.unary_server` (no per-stream queues or stream
objects, and on plain TCP no writer-task wakeups: 4 task steps per call for client and
server together instead of 11, and well under the server CPU per call of the loop below).
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Final

import anyio.abc
import h2.events
import h2.exceptions
import trio
from purerpc import Cardinality, Service
from purerpc.grpc_proto import GRPCProtoSocket, GRPCProtoStream
from purerpc.grpclib.connection import GRPCConfiguration, GRPCConnection
from purerpc.grpclib.events import (
    MessageReceived,
    RequestEnded,
    RequestReceived,
    ResponseEnded,
    WindowUpdated,
)
from purerpc.grpclib.exceptions import GRPCError
from purerpc.grpclib.status import Status, StatusCode
from purerpc.wrappers import (
    call_server_stream_stream,
    call_server_stream_unary,
    call_server_unary_stream,
    call_server_unary_unary,
    extract_message_from_singleton_stream,
)

from krt.grpc.closed_streams import handle_closed_streams
from krt.grpc.read_buffers import ReadBuffer
from krt.grpc.status_messages import (
    MAX_STATUS_MESSAGE_BYTES,
    bounded,
    describe,
    fit_status_message,
    status_for_error,
)
from krt.grpc.unary_server import UnaryConnection
from krt.grpc.unreadable_messages import MessageUnreadable, receive_buffered_data, refuse_message

__all__ = ["MAX_STATUS_MESSAGE_BYTES", "CallHandler", "fit_status_message"]

log = logging.getLogger(__name__)

_CALLERS: Final[Mapping[Cardinality, Callable[[Any, GRPCProtoStream], Awaitable[None]]]] = {
    Cardinality.UNARY_UNARY: call_server_unary_unary,
    Cardinality.UNARY_STREAM: call_server_unary_stream,
    Cardinality.STREAM_UNARY: call_server_stream_unary,
    Cardinality.STREAM_STREAM: call_server_stream_stream,
}


class _ResetAwareConnection(GRPCConnection):  # type: ignore[misc]
    """purerpc's HTTP/2 state machine, reporting stream resets instead of dropping them."""

    def __init__(self, config: GRPCConfiguration, on_reset: Callable[[int], None]) -> None:
        super().__init__(config)
        handle_closed_streams(self.h2_connection)
        self._on_reset = on_reset

    def _stream_reset(self, event: h2.events.StreamReset) -> list[Any]:
        self.message_read_buffers.pop(event.stream_id, None)
        self._on_reset(event.stream_id)
        return []

    def _request_received(self, event: h2.events.RequestReceived) -> list[Any]:
        events: list[Any] = super()._request_received(event)
        # our buffer: gRPC's gzip, decompression bounded (krt.grpc.read_buffers)
        self.message_read_buffers[event.stream_id] = ReadBuffer(
            events[0].message_encoding, self.config.max_message_length
        )
        return events

    def _data_received(self, event: h2.events.DataReceived) -> list[Any]:
        # an unreadable message fails its stream (MessageUnreadable), not the connection
        return receive_buffered_data(self, event, GRPCConnection._data_received)


class _CallStream(GRPCProtoStream):  # type: ignore[misc]
    """purerpc's server stream, taking events already queued without a scheduler pass.

    purerpc's ``_receive`` awaits the queue's ``receive``, which yields to trio's scheduler
    even when the event is waiting (a unary call's three events usually are), once per
    event and call. Taking a queued event directly skips those passes; an empty queue still
    waits in purerpc's ``_receive``. The bookkeeping after taking an event is purerpc's.
    """

    async def _receive(self) -> Any:
        try:
            event = self._incoming_events[1].receive_nowait()
        except anyio.WouldBlock:
            return await super()._receive()
        if isinstance(event, MessageReceived):
            self._grpc_connection.acknowledge_received_data(
                self._stream_id, event.flow_controlled_length
            )
            await self._socket.flush()
        elif isinstance(event, RequestEnded | ResponseEnded):
            self._end_stream_event = event
        else:
            self._start_stream_event = event
        return event


class _CallSocket(GRPCProtoSocket):  # type: ignore[misc]
    """A server-side purerpc socket whose streams can be cancelled by the peer.

    Its writer task is woken only when there is something to write: purerpc "flushes" after
    every read and every acknowledgement, and waking the writer for nothing costs a
    scheduler pass each time.
    """

    StreamClass = _CallStream

    def __init__(
        self,
        config: GRPCConfiguration,
        sock: anyio.abc.SocketStream,
        on_reset: Callable[[int], None],
    ) -> None:
        super().__init__(config, sock)
        connection = _ResetAwareConnection(config, self._reset)
        self._grpc_connection = connection
        self._socket._grpc_connection = connection
        self._on_reset_stream = on_reset
        writer = self._socket
        h2_connection = connection.h2_connection

        async def flush() -> None:
            # h2 queues outgoing frames in ``_data_to_send`` (h2 3.x and 4.x); if it is
            # missing, wake the writer every time as purerpc does
            if getattr(h2_connection, "_data_to_send", True):
                writer._flush_event.set()

        writer.flush = flush

    def _reset(self, stream_id: int) -> None:
        self._streams.pop(stream_id, None)
        self._on_reset_stream(stream_id)

    def _refuse(self, event: MessageUnreadable) -> None:
        """Fail the call of an unreadable request message: cancel its task, answer its status.

        The call's task is cancelled as for a stream reset (it waits for its request, or
        streams answers that can no longer end well); its status, a reset of the rest of
        its request body and the window update are queued here (the read loop flushes).
        """
        stream = self._streams.get(event.stream_id)
        log.info(
            "request message unreadable",
            extra={"stream_id": event.stream_id, "status": event.status.status_message},
        )
        self._reset(event.stream_id)
        refuse_message(
            self._grpc_connection.h2_connection,
            event,
            headers_sent=stream is not None and _response_started(stream),
        )

    async def _listen(self) -> AsyncIterator[GRPCProtoStream]:
        """Read the connection; queue each stream's events; yield each new stream once.

        purerpc's own loop awaits ``send`` on each stream's (unbounded) queue, a scheduler
        pass per event; this one queues with ``send_nowait``, which never blocks on an
        unbounded queue. Events of a stream that is gone (reset) are dropped instead of
        failing the whole connection.
        """
        streams: dict[int, Any] = self._streams
        while True:
            try:
                data = await self._socket.recv(self._receive_buffer_size)
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                return
            events = self._grpc_connection.receive_data(data)
            await self._socket.flush()
            for event in events:
                if isinstance(event, WindowUpdated):
                    waiting = (
                        streams.values()
                        if event.stream_id == 0
                        else ([streams[event.stream_id]] if event.stream_id in streams else [])
                    )
                    for stream in waiting:
                        await stream._set_flow_control_update()
                    continue
                if isinstance(event, RequestReceived):
                    self._allocate_stream(event.stream_id)
                elif isinstance(event, MessageUnreadable):
                    self._refuse(event)
                    continue
                stream = streams.get(event.stream_id)
                if stream is None:
                    continue
                stream._incoming_events[0].send_nowait(event)
                if isinstance(event, RequestReceived):
                    yield stream
                elif isinstance(event, RequestEnded | ResponseEnded):
                    stream._close_remote()


class CallHandler:
    """Serves gRPC calls on accepted connections, one trio cancel scope per call.

    Pass an instance to ``anyio`` ``Listener.serve``. When every method is unary (all of
    ``executor.v1``), connections are served by :class:`krt.grpc.unary_server.UnaryConnection`
    (no per-stream queues; the same frames and per-call policy); otherwise by purerpc's
    stream machinery below.

    Args:
        services: ``{"package.Service": purerpc.Service}``.
    """

    def __init__(self, services: Mapping[str, Service]) -> None:
        self._services = dict(services)
        self._config = GRPCConfiguration(client_side=False)
        self.unary_only = all(
            method.signature.cardinality is Cardinality.UNARY_UNARY
            for service in self._services.values()
            for method in service.methods.values()
        )

    async def __call__(self, sock: anyio.abc.SocketStream) -> None:
        """Serve one connection until the peer closes it; then cancel its unfinished calls.

        Never raises: a broken connection is logged and dropped.
        """
        if self.unary_only:
            try:
                async with sock:
                    await UnaryConnection(sock, self._services, self._config).serve()
            except Exception as exc:
                log.info("connection dropped", extra={"error": describe(exc)})
            return
        calls: dict[int, trio.CancelScope] = {}

        def cancel_call(stream_id: int) -> None:
            scope = calls.get(stream_id)
            if scope is not None:
                scope.cancel()

        try:
            # ``async with sock``: neither anyio's listener nor purerpc closes the accepted
            # socket; a connection dropped on error (e.g. an HTTP/2 protocol error) would
            # otherwise stay open and leave the client hanging.
            async with sock, _CallSocket(self._config, sock, cancel_call) as grpc_socket:
                async with trio.open_nursery() as nursery:
                    async for stream in grpc_socket.listen():
                        scope = trio.CancelScope()
                        calls[stream.stream_id] = scope
                        nursery.start_soon(self._serve_call, stream, scope, calls)
                    # the peer closed the connection: no call on it can be answered any more.
                    nursery.cancel_scope.cancel()
        except Exception as exc:
            log.info("connection dropped", extra={"error": describe(exc)})

    async def _serve_call(
        self,
        stream: GRPCProtoStream,
        scope: trio.CancelScope,
        calls: dict[int, trio.CancelScope],
    ) -> None:
        try:
            with scope:
                await self._dispatch(stream)
            if scope.cancelled_caught:
                log.info("call cancelled by the client", extra={"stream_id": stream.stream_id})
        except Exception as exc:  # one broken stream must not drop the connection's other calls
            log.info(
                "call dropped",
                extra={"stream_id": stream.stream_id, "error": describe(exc)},
            )
        finally:
            calls.pop(stream.stream_id, None)

    async def _dispatch(self, stream: GRPCProtoStream) -> None:
        # The response headers are not sent up front: a unary call's headers, message and
        # trailers leave together in one write (see _call_unary_unary), and an error's
        # headers go out with its trailers (_close). The frames are the same as purerpc's.
        event = await stream.receive_event()
        if not isinstance(event, RequestReceived):
            await _close(stream, Status(StatusCode.INTERNAL, "expected request headers"))
            return
        service = self._services.get(event.service_name)
        method = None if service is None else service.methods.get(event.method_name)
        if service is None or method is None:
            what = (
                f"service {event.service_name}"
                if service is None
                else f"method {event.service_name}/{event.method_name}"
            )
            await _close(stream, Status(StatusCode.UNIMPLEMENTED, f"{what} is not implemented"))
            return
        signature = method.signature
        stream.expect_message_type(signature.request_type)
        timeout = math.inf if event.timeout is None else event.timeout.total_seconds()
        with trio.move_on_after(timeout) as deadline:
            status = await _run_method(
                functools.partial(method.method_fn, request=event),
                stream,
                signature,
                f"{event.service_name}/{event.method_name}",
            )
        if deadline.cancelled_caught:
            status = Status(
                StatusCode.DEADLINE_EXCEEDED,
                f"the call's deadline (grpc-timeout {timeout:g} s) passed before it finished",
            )
        if status is not None:
            await _close(stream, status)


def _response_started(stream: GRPCProtoStream) -> bool:
    """Whether the response headers of ``stream`` were queued (purerpc's stream state)."""
    return bool(getattr(stream, "_response_started", True))


async def _run_method(
    method_fn: Callable[[Any], Any],
    stream: GRPCProtoStream,
    signature: Any,
    name: str,
) -> Status | None:
    """Run one method; return the error status to send, or None when it answered itself."""
    try:
        if signature.cardinality is Cardinality.UNARY_UNARY:
            await _call_unary_unary(method_fn, stream)
        else:
            await stream.start_response()
            await _CALLERS[signature.cardinality](method_fn, stream)
    except Exception as error:
        return status_for_error(error, request_type=signature.request_type, name=name)
    return None


async def _call_unary_unary(method_fn: Callable[[Any], Any], stream: GRPCProtoStream) -> None:
    """Read the one request, run the method, then answer in one go.

    Response headers, the message and the OK trailers are queued with no checkpoint in
    between, so the connection's writer sends them in one write (one packet, one wakeup of
    the client) instead of sending the headers first and the rest later.
    """
    request = await extract_message_from_singleton_stream(stream)
    response = await method_fn(request)
    # a method that finished without a checkpoint after its caller reset the stream: the
    # reset cancelled this call and h2 has forgotten the stream, so there is nobody to answer
    await trio.lowlevel.checkpoint_if_cancelled()
    try:
        await stream.start_response()
        await stream.send_message(response)
        await stream.close(Status(StatusCode.OK))
    except (GRPCError, h2.exceptions.ProtocolError):
        return  # the stream closed under the answer (the peer went away)


async def _close(stream: GRPCProtoStream, status: Status) -> None:
    """Send ``status`` as the trailers of ``stream`` (message bounded); a dead stream is ignored.

    A response not started yet gets its headers here, just before the trailers (so the
    client sees headers then trailers, as purerpc sends them, in one write).
    """
    try:
        if not _response_started(stream):
            await stream.start_response()
        status = bounded(status)
        await stream.close(status, custom_metadata=getattr(status, "trailers", ()))
    except (GRPCError, h2.exceptions.ProtocolError, TypeError):
        # reset or already closed by the peer: nobody is left to tell.
        pass
