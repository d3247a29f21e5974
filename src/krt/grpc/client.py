"""One HTTP/2 connection carrying unary gRPC calls, with cancellation that reaches the server.

Used by the gateway (to runtimed) and by runtimed's data plane (to the Runtime Server and
to peer runtimed).

Why not ``purerpc.Client``: its channel cannot send a ``grpc-timeout``, never resets a
stream whose caller was cancelled (so the server keeps running the call), and leaves a call
waiting forever when the connection drops. This module keeps purerpc's sans-IO pieces (its
:class:`~purerpc.grpclib.connection.GRPCConnection` over ``h2`` does framing, headers and
trailers) and adds only the trio I/O around them:

* one reader task and one writer task per connection, owned by the connection's own nursery
  (never by a request), so a cancelled request can never interrupt a half-written frame; on
  plain TCP a request's bytes are handed to the kernel by the calling task with one
  synchronous, non-blocking write (:mod:`krt.grpc.direct_writes`: nothing to interrupt), and
  whatever the socket does not take at once is left to the writer task;
* a cancelled or timed-out call sends ``RST_STREAM(CANCEL)`` at once, which is how every
  gRPC client signals cancellation (seed 000, Invoke Contract; issue 8: "when the caller
  disconnects, the invocation is cancelled all the way down");
* a lost connection fails every call on it with :class:`ConnectionLostError`; nothing is
  retried here (the gateway never retries after dispatch).
"""

from __future__ import annotations

import datetime
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import h2.errors
import h2.events
import h2.exceptions
import trio
from purerpc.grpclib.buffers import MessageWriteBuffer
from purerpc.grpclib.config import GRPCConfiguration
from purerpc.grpclib.events import (
    MessageReceived,
    ResponseEnded,
    ResponseReceived,
    WindowUpdated,
)
from purerpc.grpclib.exceptions import ProtocolError
from purerpc.grpclib.exceptions import StreamClosedError as PurerpcStreamClosedError

from krt.grpc.closed_streams import handle_closed_streams
from krt.grpc.direct_reads import receive_when_ready
from krt.grpc.direct_writes import plain_socket_fd, write_now
from krt.grpc.event_translation import LeanGrpcConnection
from krt.grpc.header_checks import outbound_metadata
from krt.grpc.hpack_encoding import LiteralHpackEncoder, install_decoder
from krt.grpc.unreadable_messages import MessageUnreadable
from krt.kube.http11_errors import describe_failure

log = logging.getLogger(__name__)

#: Largest response message accepted (bytes); a larger one fails the call with RESOURCE_EXHAUSTED.
DEFAULT_MAX_MESSAGE_BYTES: Final = 16 * 1024 * 1024
_READ_CHUNK: Final = 65536
#: plain TCP connections are read with ``os.read`` after a readiness wait (see ``_receive``).
DIRECT_READS = True

Metadata = Sequence[tuple[str, str]]


class GrpcStatusError(Exception):
    """The server answered the call with a non-OK gRPC status.

    Attributes:
        code: the numeric gRPC status code (``grpc-status``), e.g. 5 for NOT_FOUND.
        message: ``grpc-message``, percent-decoded (may be empty).
        trailers: the other trailing metadata, lowercase names.
    """

    def __init__(self, code: int, message: str, trailers: Metadata = ()) -> None:
        self.code = code
        self.message = message
        self.trailers = tuple(trailers)
        super().__init__(f"gRPC status {code}: {message}")


class ConnectionLostError(Exception):
    """The connection failed before the call got its status; the outcome is unknown.

    Attributes:
        dispatched: ``True`` once the request headers may have reached the server (the call
            may have run), ``False`` when nothing was sent (safe to try another connection).
    """

    def __init__(self, message: str, *, dispatched: bool) -> None:
        self.dispatched = dispatched
        super().__init__(message)


@dataclass(eq=False, slots=True)
class _Call:
    """The state of one in-flight unary call (a single HTTP/2 stream)."""

    done: trio.Event = field(default_factory=trio.Event)
    #: set while the call waits for flow-control window (most calls never do)
    window: trio.Event | None = None
    message: bytes | None = None
    status: int | None = None
    status_message: str = ""
    trailers: Metadata = ()
    error: BaseException | None = None


@dataclass(frozen=True, slots=True)
class _StreamReset:
    stream_id: int
    error_code: int


@dataclass(frozen=True, slots=True)
class _GoAway:
    error_code: int


def _trust_responses(h2_connection: Any) -> None:
    """Skip h2's validation of response headers: purerpc parses them strictly itself.

    purerpc requires ``:status`` 200, ``content-type application/grpc*`` and ``grpc-status``
    in the trailers, so a malformed response still fails its call (the connection reports a
    protocol error). h2 runs its checks as a chain of generators per header and call, a few
    percent of the client's CPU per call. Outbound headers keep h2's normalization and
    checks (caller metadata: names lowercased, values stripped, connection headers refused).
    ``validate_inbound_headers`` is a documented ``H2Configuration`` setting (h2 3.x, 4.x).

    Outbound, h2's normalization and checks are off too: the headers purerpc builds are
    valid by construction, and :meth:`GrpcConnection.unary_call` passes the caller's
    metadata through :func:`krt.grpc.header_checks.outbound_metadata` (h2's rules in one
    pass: names lowercased, values stripped, connection headers dropped, bad fields refused).
    """
    config = h2_connection.config
    config.validate_inbound_headers = False
    config.validate_outbound_headers = False
    config.normalize_outbound_headers = False


class _Connection(LeanGrpcConnection):
    """purerpc's sans-IO gRPC connection, reporting stream resets and GOAWAY.

    purerpc drops both events; a client needs them to fail the affected calls at once.
    """

    def _stream_reset(self, event: h2.events.StreamReset) -> list[Any]:
        self.forget_stream(event.stream_id)
        return [_StreamReset(event.stream_id, int(event.error_code))]

    def _connection_terminated(self, event: h2.events.ConnectionTerminated) -> list[Any]:
        return [_GoAway(int(event.error_code))]


class GrpcConnection:
    """A client HTTP/2 connection for unary gRPC calls.

    Lifecycle: construct it over a connected stream, run :meth:`run` in a nursery with
    ``await nursery.start(conn.run)``, make calls with :meth:`unary_call`, stop it with
    :meth:`close` (or cancel the nursery). It takes ownership of the stream.

    Args:
        stream: a connected byte stream (TCP, or TLS with ALPN ``h2``).
        authority: the ``:authority`` pseudo-header, ``host:port``.
        scheme: ``http`` or ``https``.
        max_message_bytes: largest response message accepted (bytes).
    """

    def __init__(
        self,
        stream: trio.abc.Stream,
        *,
        authority: str,
        scheme: str = "http",
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    ) -> None:
        self._stream = stream
        self._authority = authority
        self._scheme = scheme
        self._h2 = _Connection(
            GRPCConfiguration(client_side=True, max_message_length=max_message_bytes)
        )
        self._h2.h2_connection.encoder = LiteralHpackEncoder()
        install_decoder(self._h2.h2_connection)
        _trust_responses(self._h2.h2_connection)
        handle_closed_streams(self._h2.h2_connection)
        self._calls: dict[int, _Call] = {}
        self._request_headers: dict[tuple[str, str], list[tuple[str, str]]] = {}
        self._wake = trio.Event()
        #: bytes taken from h2 but not sent yet, for the writer to send first
        self._pending = bytearray()
        #: plain TCP: requests are written by the calling task at once (krt.grpc.direct_writes)
        self._fd = plain_socket_fd(stream)
        self._writing = False
        self._accepting = True
        self._closed = trio.Event()
        self._cancel_scope: trio.CancelScope | None = None
        self.close_reason = ""

    @property
    def usable(self) -> bool:
        """Whether new calls may start on this connection (running, no GOAWAY, not closed)."""
        return self._accepting and not self._closed.is_set()

    @property
    def in_flight(self) -> int:
        """Number of calls currently waiting for their status."""
        return len(self._calls)

    async def wait_closed(self) -> None:
        """Return once the connection has stopped (for any reason)."""
        await self._closed.wait()

    def close(self, reason: str = "closed") -> None:
        """Stop the connection; calls still waiting fail with :class:`ConnectionLostError` now.

        The waiting calls are failed synchronously (``dispatched=True``, the message is
        ``reason``), so a caller holding this connection needs no cancel scope per call to
        abandon them; the connection's tasks stop at their next scheduling point.

        Args:
            reason: why, recorded as :attr:`close_reason` unless the connection already
                ended for another reason.
        """
        self._accepting = False
        if not self._closed.is_set():
            self.close_reason = self.close_reason or reason
            self._fail_waiting(self.close_reason)
        if self._cancel_scope is not None:
            self._cancel_scope.cancel()

    def _fail_waiting(self, reason: str) -> None:
        """Fail every call still waiting for its status with :class:`ConnectionLostError`."""
        for call in self._calls.values():
            if not call.done.is_set():
                call.error = ConnectionLostError(reason, dispatched=True)
                call.done.set()
            if call.window is not None:
                call.window.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Drive the connection until it closes; call :meth:`unary_call` meanwhile.

        Sends the HTTP/2 preface, calls ``task_status.started()``, then reads until the peer
        closes, a protocol error occurs or :meth:`close` is called. Never raises for a
        connection failure: it records :attr:`close_reason` and fails the pending calls.
        """
        try:
            with trio.CancelScope() as scope:
                self._cancel_scope = scope
                try:
                    async with trio.open_nursery() as nursery:
                        self._h2.initiate_connection()
                        nursery.start_soon(self._writer)
                        task_status.started()
                        await self._reader()
                        nursery.cancel_scope.cancel()
                except* (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as group:
                    self.close_reason = describe_failure(group.exceptions[0])
                except* (ProtocolError, h2.exceptions.H2Error, KeyError, ValueError) as group:
                    # h2 or purerpc rejected what the peer sent (KeyError/ValueError: purerpc's
                    # parser on malformed frames); the connection is unusable either way
                    why = describe_failure(group.exceptions[0])
                    self.close_reason = f"the server broke the HTTP/2 protocol ({why})"
            if scope.cancelled_caught and not self.close_reason:
                self.close_reason = "closed"
        finally:
            self._fd = None  # the stream is closed below
            self._accepting = False
            self._closed.set()
            self._fail_waiting(self.close_reason or "connection closed")
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(self._stream)

    def _plain_headers(self, service: str, method: str) -> list[tuple[str, str]]:
        """The request headers of a call without metadata, timeout or message type.

        Exactly the list purerpc's ``start_request`` builds for such a call (its default
        configuration adds no encoding or user-agent headers), built once per method and
        connection: rebuilding and re-sanitizing it was ~10% of a call's send path.
        """
        key = (service, method)
        headers = self._request_headers.get(key)
        if headers is None:
            headers = self._request_headers[key] = [
                (":method", "POST"),
                (":scheme", self._scheme),
                (":path", f"/{service}/{method}"),
                (":authority", self._authority),
                ("te", "trailers"),
                ("content-type", "application/grpc+proto"),
            ]
        return headers

    def _flush(self) -> None:
        """Send what h2 queued: at once on a plain socket if it takes it, else by the writer."""
        if self._fd is not None and not self._writing:
            data = self._h2.data_to_send()
            if self._pending:
                data = bytes(self._pending) + data
                self._pending.clear()
            if not data:
                return
            rest = write_now(self._fd, data)
            if not rest:
                return
            self._pending += rest
        self._wake.set()

    def _reset_quietly(self, stream_id: int) -> None:
        """Send ``RST_STREAM(CANCEL)`` unless the stream is already closed."""
        try:
            self._h2.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
        except h2.exceptions.H2Error:
            return
        self._flush()

    async def _writer(self) -> None:
        while True:
            data = self._h2.data_to_send()
            if self._pending:
                data = bytes(self._pending) + data
                self._pending.clear()
            if data:
                self._writing = True
                try:
                    await self._stream.send_all(data)
                finally:
                    self._writing = False
                continue
            await self._wake.wait()
            self._wake = trio.Event()

    async def _receive(self) -> bytes | bytearray:
        """The next bytes from the server; empty once it closed the connection.

        Plain TCP is read with one system call after a readiness wait
        (:mod:`krt.grpc.direct_reads`), other streams (TLS) through the stream.

        Raises:
            trio.BrokenResourceError: the connection broke (e.g. reset by the server).
        """
        if (fd := self._fd) is None or not DIRECT_READS:
            return await self._stream.receive_some(_READ_CHUNK)
        try:
            return await receive_when_ready(fd, _READ_CHUNK)
        except OSError as exc:  # as trio's socket stream reports it
            raise trio.BrokenResourceError(f"socket connection broken: {exc}") from exc

    async def _reader(self) -> None:
        while True:
            data = await self._receive()
            if not data:
                self.close_reason = self.close_reason or "peer closed the connection"
                return
            events = self._h2.receive_data(data)
            for event in events:
                self._dispatch(event)
            # wake the writer only when h2 has something to answer (SETTINGS/PING acks,
            # window updates): most reads (a response) need no answer, and a needless wakeup
            # costs a scheduler pass per response
            reply = self._h2.data_to_send()
            if reply:
                self._pending += reply
                self._flush()

    def _dispatch(self, event: Any) -> None:
        if isinstance(event, WindowUpdated):
            if event.stream_id == 0:
                for waiting in self._calls.values():
                    if waiting.window is not None:
                        waiting.window.set()
            elif (updated := self._calls.get(event.stream_id)) is not None:
                if updated.window is not None:
                    updated.window.set()
            return
        if isinstance(event, _GoAway):
            self._accepting = False
            self.close_reason = f"GOAWAY (error code {event.error_code})"
            return
        call = self._calls.get(getattr(event, "stream_id", -1))
        if call is None:
            # bytes of a call that ended already go back to the connection window
            if isinstance(event, MessageReceived | MessageUnreadable):
                self._h2.acknowledge_received_data(event.stream_id, event.flow_controlled_length)
            return
        if isinstance(event, MessageReceived):
            self._h2.acknowledge_received_data(event.stream_id, event.flow_controlled_length)
            if call.message is not None:
                call.error = GrpcStatusError(13, "unary call received more than one message")
                call.done.set()
            else:
                call.message = event.data
        elif isinstance(event, ResponseEnded):
            call.status = int(event.status.int_value)
            call.status_message = event.status.status_message or ""
            call.trailers = tuple(event.custom_metadata)
            call.done.set()
        elif isinstance(event, _StreamReset):
            if call.window is not None:  # a request body waiting for window: stop sending
                call.window.set()
            if call.done.is_set():
                # e.g. RST_STREAM(NO_ERROR) after the trailers: the server answered before
                # the request body was all sent (RFC 9113 section 8.1); the answer stands
                return
            call.error = GrpcStatusError(
                _reset_status(event.error_code), f"stream reset by server (code {event.error_code})"
            )
            call.done.set()
        elif isinstance(event, ResponseReceived):
            pass
        elif isinstance(event, MessageUnreadable):
            # over max_message_bytes, or not decompressible: this call fails, the rest go on
            if not call.done.is_set():
                call.error = GrpcStatusError(
                    int(event.status.int_value), event.status.status_message or ""
                )
                call.done.set()
            self._reset_quietly(event.stream_id)
            self._h2.acknowledge_received_data(event.stream_id, event.flow_controlled_length)

    async def _send_body(self, stream_id: int, call: _Call, payload: bytes) -> bool:
        """Send the request message and end the request, respecting flow control.

        Returns:
            ``True`` once the request is complete; ``False`` when the server answered or
            reset the stream first (the rest is not sent; the caller resets the stream).
        """
        h2_connection = self._h2.h2_connection
        try:
            if len(payload) + 5 <= self._h2.flow_control_window(stream_id):
                # the usual case: the whole message in one DATA frame that ends the request
                # (the uncompressed gRPC message prefix, as purerpc's MessageWriteBuffer)
                prefix = b"\x00" + len(payload).to_bytes(4, "big")
                h2_connection.send_data(stream_id, prefix + payload, end_stream=True)
                return True
            buffer = MessageWriteBuffer(None, len(payload) + 5)
            buffer.write_message(payload, False)
            while buffer:
                if call.done.is_set():
                    return False
                window = self._h2.flow_control_window(stream_id)
                if window <= 0:
                    self._flush()
                    call.window = trio.Event()
                    await call.window.wait()
                    continue
                chunk = buffer.data_to_send(min(window, len(buffer)))
                # the last DATA frame ends the request (purerpc's end_request sends an extra
                # empty frame for that: one more frame to build, send and parse per call)
                self._h2.send_data(stream_id, chunk, end_stream=not buffer)
        except (h2.exceptions.StreamClosedError, PurerpcStreamClosedError):
            return False
        finally:
            # the headers and every frame queued so far leave together (one write)
            self._flush()
        return True

    async def unary_call(
        self,
        service: str,
        method: str,
        payload: bytes,
        *,
        metadata: Metadata = (),
        timeout_seconds: float | None = None,
        message_type: str | None = None,
    ) -> bytes:
        """Make one unary call and return the serialized response message.

        The caller bounds the wait with a cancel scope; when that scope (or any outer one)
        cancels the call, the stream is reset with ``CANCEL`` before ``Cancelled`` propagates.

        Args:
            service: full service name, e.g. ``executor.v1.FunctionRuntime``.
            method: method name, e.g. ``InvokeFunction``.
            payload: the serialized request message.
            metadata: custom metadata, lowercase ASCII names (no ``grpc-`` prefix).
            timeout_seconds: sent as ``grpc-timeout`` (rounded up to milliseconds); ``None``
                sends none. Enforcing it locally is the caller's job.
            message_type: optional ``grpc-message-type`` header.

        Returns:
            The response message bytes.

        Raises:
            ConnectionLostError: the connection is not usable or failed during the call
                (``dispatched`` says whether the request may have reached the server).
            GrpcStatusError: the server answered with a non-OK status (or reset the stream,
                or broke the unary protocol: INTERNAL).
        """
        if not self.usable:
            raise ConnectionLostError(
                f"connection not usable: {self.close_reason or 'closing'}", dispatched=False
            )
        timeout = None
        if timeout_seconds is not None:
            timeout = datetime.timedelta(milliseconds=max(1, math.ceil(timeout_seconds * 1000)))
        try:
            stream_id = self._h2.get_next_available_stream_id()
            if metadata or timeout is not None or message_type is not None:
                if metadata:
                    metadata = outbound_metadata(metadata, authority=self._authority)
                self._h2.start_request(
                    stream_id,
                    self._scheme,
                    service,
                    method,
                    message_type,
                    self._authority,
                    timeout,
                    "+proto",
                    metadata,
                )
            else:
                self._h2.h2_connection.send_headers(
                    stream_id, self._plain_headers(service, method), end_stream=False
                )
        except h2.exceptions.H2Error as exc:
            self._accepting = False
            why = describe_failure(exc)
            raise ConnectionLostError(f"cannot open a stream: {why}", dispatched=False) from exc
        call = _Call()
        self._calls[stream_id] = call
        try:
            if not await self._send_body(stream_id, call, payload):
                self._reset_quietly(stream_id)
            await call.done.wait()
        except BaseException:
            if not call.done.is_set() and not self._closed.is_set():
                self._reset_quietly(stream_id)
            raise
        finally:
            del self._calls[stream_id]
            self._h2.forget_stream(stream_id)
        if call.error is not None:
            raise call.error
        if call.status != 0:
            raise GrpcStatusError(call.status or 2, call.status_message, call.trailers)
        if call.message is None:
            raise GrpcStatusError(13, "OK status without a response message")
        return call.message


def _reset_status(error_code: int) -> int:
    """gRPC status for a stream reset by the server (the gRPC HTTP/2 spec's mapping)."""
    if error_code == h2.errors.ErrorCodes.REFUSED_STREAM:
        return 14  # UNAVAILABLE: not processed, like a refused connection
    if error_code == h2.errors.ErrorCodes.CANCEL:
        return 1  # CANCELLED
    if error_code == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM:
        return 8  # RESOURCE_EXHAUSTED
    return 13  # INTERNAL
