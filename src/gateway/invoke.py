"""Dispatch one validated invoke request to runtimed with FunctionRuntime.InvokeFunction.

Seed 002, "proxy hop with empty registration_id": the gateway sends ``registration.run_uid``
= the Run UID from the path and an empty ``registration_id`` (runtimed fills in the owner's
private one), the invocation ID, the JSON body as ``input`` with ``content_type``
``application/json`` and ``timeout_millis``. The caller's token travels as gRPC metadata
``authorization: Bearer <token>`` together with ``x-kruntime-namespace`` and
``x-kruntime-runtime`` (runtimed authorizes the exact Run with them).

Deadlines: ``timeout_millis`` is the invocation timeout (the client's ``X-Kruntime-Timeout``,
at most the gateway's maximum). The gRPC call carries ``grpc-timeout`` = timeout + a grace
(so the Runtime's own DEADLINE_EXCEEDED can come back first) and the gateway enforces the
same bound locally with a cancel scope; expiry resets the stream (the server sees the
cancellation) and answers 504. Nothing is ever retried after dispatch: a connection that
breaks once the request may have been sent is a 502 ``InvocationInterrupted`` without
``Retry-After`` (seed 000: "a connection failure may have an unknown execution outcome").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

import trio
from google.protobuf.message import DecodeError

from gateway.errors import HttpError
from gateway.mapping import (
    error_for_status,
    interrupted,
    output_content_type,
    outputs_header,
    unavailable,
)
from gateway.pool import ChannelPool, ConnectFailedError, PoolKey, ServiceNotFoundError
from krt.api import invoke_headers
from krt.api.endpoint import FunctionEndpointRef
from krt.grpc.client import ConnectionLostError, GrpcStatusError
from krt.proto.executor.v1 import runtime_pb2 as pb

SERVICE: Final = "executor.v1.FunctionRuntime"
METHOD: Final = "InvokeFunction"
JSON: Final = "application/json"
NAMESPACE_METADATA: Final = invoke_headers.NAMESPACE_METADATA
RUNTIME_METADATA: Final = invoke_headers.RUNTIME_METADATA


@dataclass(frozen=True, slots=True)
class InvokeRequest:
    """A validated invoke request.

    Attributes:
        ref: the namespace, Runtime and Run UID from the path.
        token: the caller's bearer token (never logged).
        invocation_id: the client's or a generated ID (at most 128 bytes, visible ASCII).
        body: the JSON request body (at most 1 MiB).
        timeout_seconds: the invocation timeout (seconds, > 0).
    """

    ref: FunctionEndpointRef
    token: str
    invocation_id: str
    body: bytes
    timeout_seconds: float


@dataclass(frozen=True, slots=True)
class InvokeResult:
    """What a successful invocation returns to the client.

    Attributes:
        output: the function's output bytes (the 200 body).
        content_type: the 200 ``Content-Type``.
        outputs: the ``X-Kruntime-Outputs`` header value, or ``None`` for no outputs.
    """

    output: bytes
    content_type: str
    outputs: str | None


class Invoker:
    """Turns an :class:`InvokeRequest` into an InvokeFunction call and maps the answer.

    Args:
        pool: connections to the Runtime Services.
        deadline_grace_seconds: added to the invocation timeout for the gRPC deadline
            (seconds).
        retry_after_seconds: ``Retry-After`` of a 503 unless runtimed says otherwise
            (seconds).
    """

    def __init__(
        self, pool: ChannelPool, *, deadline_grace_seconds: float, retry_after_seconds: int
    ) -> None:
        self._pool = pool
        self._grace = deadline_grace_seconds
        self._retry_after = retry_after_seconds

    @staticmethod
    def grpc_request(request: InvokeRequest) -> pb.InvokeFunctionRequest:
        """The InvokeFunction request for ``request`` (empty registration ID, seed 002)."""
        return pb.InvokeFunctionRequest(
            registration=pb.FunctionRegistration(run_uid=request.ref.uid, registration_id=""),
            invocation_id=request.invocation_id,
            input=request.body,
            content_type=JSON,
            # round first: 2.007 s * 1000 is 2007.0000000000002 in floating point
            timeout_millis=max(1, math.ceil(round(request.timeout_seconds * 1000, 3))),
        )

    async def invoke(self, request: InvokeRequest) -> InvokeResult:
        """Call runtimed once and return the function's result.

        Returns:
            The output, its content type and the outputs header.

        Raises:
            HttpError: the mapped error (docs/gateway.md, "Status codes"): 404 when the
                Runtime's Service name does not exist, 503 when no connection could be made
                or it broke before the request was sent, 502 ``InvocationInterrupted`` when
                it broke after (the invocation may have run; never retried), 504 at the
                deadline, 4xx/5xx for a gRPC status.
        """
        ref = request.ref
        metadata = (
            ("authorization", f"Bearer {request.token}"),
            (NAMESPACE_METADATA, ref.namespace),
            (RUNTIME_METADATA, ref.runtime),
        )
        payload = self.grpc_request(request).SerializeToString()
        deadline = request.timeout_seconds + self._grace
        raw: bytes | None = None
        with trio.move_on_after(deadline):
            try:
                raw = await self._pool.unary_call(
                    PoolKey(ref.namespace, ref.runtime),
                    SERVICE,
                    METHOD,
                    payload,
                    metadata=metadata,
                    timeout_seconds=deadline,
                )
            except ServiceNotFoundError as exc:
                raise HttpError(
                    404,
                    "FunctionNotFound",
                    f"no Runtime {ref.runtime!r} in namespace {ref.namespace} ({exc})",
                ) from None
            except ConnectFailedError as exc:
                raise unavailable(
                    str(exc), retry_after=self._retry_after, reason="RuntimeUnreachable"
                ) from None
            except ConnectionLostError as exc:
                if exc.dispatched:
                    raise interrupted(
                        f"the connection to the Runtime Service broke during the call ({exc})"
                    ) from None
                raise unavailable(
                    f"connection to the Runtime Service failed ({exc}); nothing was sent",
                    retry_after=self._retry_after,
                    reason="RuntimeUnreachable",
                ) from None
            except GrpcStatusError as exc:
                raise error_for_status(
                    exc.code, exc.message, exc.trailers, retry_after=self._retry_after
                ) from None
        if raw is None:
            raise HttpError(
                504,
                "InvocationTimeout",
                f"no answer within {deadline:.3f} seconds (timeout {request.timeout_seconds:.3f}"
                f" s + grace {self._grace:.3f} s); the invocation was cancelled",
            )
        try:
            response = pb.InvokeFunctionResponse.FromString(raw)
        except DecodeError as exc:
            raise HttpError(
                500, "InternalError", f"runtimed sent an unreadable InvokeFunctionResponse: {exc}"
            ) from None
        return InvokeResult(
            output=response.output,
            content_type=output_content_type(response.content_type),
            outputs=outputs_header(response.outputs),
        )
