"""The gateway's HTTPS ASGI app: ``POST /v1/namespaces/{ns}/runtimes/{rt}/functions/{uid}:invoke``.

Seed 000, Runtime Gateway and Invoke Contract; seed 001, Runtime Gateway. The path is parsed
with :func:`krt.api.endpoint.parse_function_endpoint_path`, the helper runtimed uses to build
``status.endpoint.url``, so the published URL is exactly what this app routes.

Per request: route (404/405), validate in the documented order without dispatching
(:mod:`gateway.validation`: 401, 415, 413, 400), then one InvokeFunction call
(:mod:`gateway.invoke`) raced against the client's disconnect: if the client goes away first,
the call's cancel scope is cancelled at once (by hypercorn's disconnect callback,
:mod:`gateway.disconnects`, or by a task watching ``receive()``), which resets the gRPC
stream, so runtimed and the Runtime Server see the cancellation and free the Run's
invocation slot. A later invoke of the same Run is not forwarded while such a cancellation
is still unwinding here (:mod:`krt.invocation_slots`), so the reset reaches runtimed first.
Every response, success or error, carries ``X-Kruntime-Invocation-ID``.
"""

from __future__ import annotations

import logging
from typing import Final

import trio

from gateway.disconnects import EXTENSION as DISCONNECT_EXTENSION
from gateway.disconnects import DisconnectSignal
from gateway.errors import HttpError
from gateway.invoke import Invoker, InvokeRequest, InvokeResult
from gateway.logs import InvocationLog
from gateway.mapping import OUTPUTS_HEADER
from gateway.metrics import CLIENT_CLOSED_CODE, GatewayMetrics
from gateway.validation import (
    MAX_BODY_BYTES,
    bearer_token,
    check_content_length,
    check_content_type,
    check_json,
    invocation_id_of,
    requested_timeout,
    too_large,
)
from krt.api.endpoint import FunctionEndpointRef, parse_function_endpoint_path
from krt.api.errors import EndpointPathError
from krt.api.invoke_headers import INVOCATION_ID_HEADER
from krt.asgi import Receive, Scope, Send, answer_lifespan, send_response
from krt.invocation_slots import InvocationSlots

log = logging.getLogger("gateway.invoke")

INVOCATION_ID_RESPONSE_HEADER: Final = INVOCATION_ID_HEADER.lower()
_JSON: Final = "application/json"


#: After an early rejection, unread request bytes discarded (never stored) so the client can
#: read the response before the connection closes (a lingering close, RFC 9112 section 9.6).
DRAIN_MAX_BYTES: Final = 4 * MAX_BODY_BYTES
#: ... for at most this long (seconds).
DRAIN_SECONDS: Final = 2.0


class ClientGoneError(Exception):
    """The client disconnected before the response could be sent."""


class RequestBody:
    """The request body as ASGI delivers it: read at most the limit, or discard the rest.

    Args:
        receive: the ASGI receive callable of the request.
    """

    def __init__(self, receive: Receive) -> None:
        self._receive = receive
        self.complete = False
        self.gone = False

    async def read(self, declared: int | None) -> bytes:
        """Read the whole body, stopping at the first message that crosses the limit.

        Args:
            declared: ``Content-Length`` (bytes) for the error message, if sent.

        Raises:
            HttpError: 413 once more than :data:`MAX_BODY_BYTES` arrived.
            ClientGoneError: the client disconnected.
        """
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                self.gone = True
                raise ClientGoneError
            chunk = message.get("body", b"")
            size += len(chunk)
            if not message.get("more_body", False):
                self.complete = True
            if size > MAX_BODY_BYTES:
                raise too_large(declared)
            chunks.append(chunk)
            if self.complete:
                return b"".join(chunks)

    async def discard_rest(self) -> None:
        """Drop unread body bytes (bounded in bytes and seconds); the response is sent already."""
        if self.complete or self.gone:
            return
        discarded = 0
        with trio.move_on_after(DRAIN_SECONDS):
            while discarded <= DRAIN_MAX_BYTES:
                message = await self._receive()
                if message["type"] == "http.disconnect":
                    return
                discarded += len(message.get("body", b""))
                if not message.get("more_body", False):
                    return


class GatewayApp:
    """The invoke front door as an ASGI app (hypercorn serves it over TLS).

    Args:
        invoker: dispatches validated requests to runtimed.
        metrics: where invocations are counted.
        default_timeout_seconds: invocation timeout when the client sends none (seconds).
        max_timeout_seconds: the largest timeout a client may ask for (seconds).
    """

    def __init__(
        self,
        invoker: Invoker,
        metrics: GatewayMetrics,
        *,
        default_timeout_seconds: float,
        max_timeout_seconds: float,
    ) -> None:
        self._invoker = invoker
        self._metrics = metrics
        self._default_timeout = default_timeout_seconds
        self._max_timeout = max_timeout_seconds
        #: invocations dispatched and not finished, by Run (:mod:`krt.invocation_slots`)
        self.in_flight = InvocationSlots()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """ASGI entry point: lifespan, ``GET /healthz`` and the invoke route."""
        if scope["type"] == "lifespan":
            await answer_lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        if scope["path"] == "/healthz" and scope["method"] in ("GET", "HEAD"):
            await send_response(send, 200, b"ok\n", [("content-type", "text/plain")])
            return
        start = trio.current_time()
        self._metrics.in_flight.inc()
        try:
            await self._handle(scope, receive, send, start)
        finally:
            self._metrics.in_flight.dec()

    async def _handle(self, scope: Scope, receive: Receive, send: Send, start: float) -> None:
        headers = scope["headers"]
        invocation_id, id_error = invocation_id_of(headers)
        fields = {"invocation_id": invocation_id}
        error: HttpError | None = None
        result: InvokeResult | None = None
        body = RequestBody(receive)
        upstream_ms = 0.0
        try:
            ref = self._route(scope)
            fields.update(namespace=ref.namespace, runtime=ref.runtime, run_uid=ref.uid)
            request = await self._validate(scope, body, ref, invocation_id, id_error)
            dispatched = trio.current_time()
            result = await self._dispatch(
                request, receive, scope.get("extensions", {}).get(DISCONNECT_EXTENSION)
            )
            upstream_ms = round((trio.current_time() - dispatched) * 1000, 3)
        except HttpError as exc:
            error = exc
        except ClientGoneError:
            pass
        # metrics and the log line come first, so they are complete once the client has its
        # response (the latency excludes writing the response to the socket)
        elapsed = trio.current_time() - start
        # the line's fields are built only when INFO is on (not per request below the level)
        invocation_log = InvocationLog(log, fields) if log.isEnabledFor(logging.INFO) else None
        duration_ms = round(elapsed * 1000, 3)
        if error is not None:
            self._metrics.record(error.status, elapsed)
            if invocation_log is not None:
                invocation_log.info(
                    "invoke rejected" if error.status < 500 else "invoke failed",
                    extra={
                        "code": error.status,
                        "reason": error.reason,
                        "error": error.message[:500],
                        "duration_ms": duration_ms,
                    },
                )
            await self._send_error(send, error, invocation_id, body)
        elif result is not None:
            self._metrics.record(200, elapsed)
            if invocation_log is not None:
                invocation_log.info(
                    "invoked",
                    extra={
                        "code": 200,
                        "output_bytes": len(result.output),
                        "duration_ms": duration_ms,
                        "upstream_ms": upstream_ms,
                    },
                )
            await self._send_result(send, result, invocation_id)
        else:
            self._metrics.record(CLIENT_CLOSED_CODE, elapsed)
            if invocation_log is not None:
                invocation_log.info(
                    "client disconnected; invocation cancelled",
                    extra={"code": int(CLIENT_CLOSED_CODE), "duration_ms": duration_ms},
                )

    @staticmethod
    def _route(scope: Scope) -> FunctionEndpointRef:
        raw_path = scope.get("raw_path")
        path = raw_path.decode("latin-1") if raw_path else scope["path"]
        try:
            ref = parse_function_endpoint_path(path)
        except EndpointPathError as exc:
            raise HttpError(
                404,
                "NotFound",
                f"{exc.detail[:300]}",
            ) from None
        if scope["method"] != "POST":
            raise HttpError(
                405,
                "MethodNotAllowed",
                f"{scope['method'][:20]} is not allowed; invoke with POST",
                headers={"allow": "POST"},
            )
        return ref

    async def _validate(
        self,
        scope: Scope,
        body_reader: RequestBody,
        ref: FunctionEndpointRef,
        invocation_id: str,
        id_error: HttpError | None,
    ) -> InvokeRequest:
        headers = scope["headers"]
        token = bearer_token(headers)
        check_content_type(headers)
        declared = check_content_length(headers)
        body = await body_reader.read(declared)
        check_json(body)
        if id_error is not None:
            raise id_error
        timeout = requested_timeout(
            headers, default=self._default_timeout, maximum=self._max_timeout
        )
        return InvokeRequest(ref, token, invocation_id, body, timeout)

    async def _dispatch(
        self, request: InvokeRequest, receive: Receive, disconnect: DisconnectSignal | None
    ) -> InvokeResult:
        """Invoke, cancelling the call the moment the client disconnects.

        With hypercorn's disconnect callback (:mod:`gateway.disconnects`) the call's cancel
        scope is cancelled by the disconnect itself; otherwise a task watches ``receive()``.
        Either way the call is recorded in :attr:`in_flight` with that scope, and waits first
        for an abandoned invocation of the same Run to finish unwinding
        (:mod:`krt.invocation_slots`), so its reset reaches runtimed before this request.
        """
        if disconnect is not None:
            with trio.CancelScope() as scope:
                disconnect.cancel_on_disconnect(scope)
                try:
                    return await self._invoke_in(scope, request)
                finally:
                    disconnect.cancel_on_disconnect(None)
            raise ClientGoneError  # only a disconnect cancels this scope
        result: InvokeResult | None = None
        error: HttpError | None = None
        gone = False
        async with trio.open_nursery() as nursery:

            async def watch_disconnect() -> None:
                nonlocal gone
                while (await receive())["type"] != "http.disconnect":
                    pass
                gone = True
                nursery.cancel_scope.cancel()

            nursery.start_soon(watch_disconnect)
            try:
                result = await self._invoke_in(nursery.cancel_scope, request)
            except HttpError as exc:
                error = exc
            nursery.cancel_scope.cancel()
        if gone and result is None and error is None:
            raise ClientGoneError
        if error is not None:
            raise error
        assert result is not None
        return result

    async def _invoke_in(self, scope: trio.CancelScope, request: InvokeRequest) -> InvokeResult:
        """One upstream call recorded in :attr:`in_flight` (``scope``: its disconnect scope)."""
        async with self.in_flight.passage(request.ref, call=scope):
            return await self._invoker.invoke(request)

    @staticmethod
    async def _send_error(
        send: Send, error: HttpError, invocation_id: str, body: RequestBody
    ) -> None:
        headers = [
            ("content-type", _JSON),
            (INVOCATION_ID_RESPONSE_HEADER, invocation_id),
            ("cache-control", "no-store"),
            *error.headers.items(),
        ]
        await send_response(
            send,
            error.status,
            error.body(invocation_id),
            headers,
            before_end=None if body.complete or body.gone else body.discard_rest,
        )

    @staticmethod
    async def _send_result(send: Send, result: InvokeResult, invocation_id: str) -> None:
        headers = [
            ("content-type", result.content_type),
            (INVOCATION_ID_RESPONSE_HEADER, invocation_id),
            ("cache-control", "no-store"),
        ]
        if result.outputs is not None:
            headers.append((OUTPUTS_HEADER, result.outputs))
        await send_response(send, 200, result.output, headers)
