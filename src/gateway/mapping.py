"""From an InvokeFunction result to the HTTP response (pure functions).

Seed 000, Runtime Gateway and Invoke Contract, seed 002, Invocation Semantics and Limits and
Error Mapping. The gRPC status runtimed (or the Runtime Server behind it) answers with decides
the HTTP status; docs/gateway.md "Status codes" is the contract runtimed follows:

=====================  ====  ==============================================================
gRPC status            HTTP  meaning
=====================  ====  ==============================================================
OK                     200   the function's output, its content type, outputs header
INVALID_ARGUMENT       400   runtimed rejected the request itself
UNAUTHENTICATED        401   token missing, invalid or expired (SelfSubjectAccessReview)
PERMISSION_DENIED      403   caller may not ``get`` this Run
NOT_FOUND              404   unknown UID, UID/object mismatch, Run not of this Runtime
RESOURCE_EXHAUSTED     429   one invocation already in flight (no queue)
FAILED_PRECONDITION    503   known Run not ready, recovering, terminating, stale owner
UNAVAILABLE            503   owner unreachable or cache behind (also: no connection)
ABORTED                502   interrupted after dispatch (a connection broke): may have run
CANCELLED              502   the registration was drained or superseded mid-invocation
DEADLINE_EXCEEDED      504   the invocation timed out
UNKNOWN                500   handler error, message ``"<ErrorType>: <message>"``
anything else          500   INTERNAL, UNIMPLEMENTED, DATA_LOSS, ...: runtime error
=====================  ====  ==============================================================

503 responses carry ``Retry-After`` (seconds): runtimed may send the trailer
``x-kruntime-retry-after`` (integer seconds, 1-300); otherwise the gateway's default. The
trailer value ``never`` (a Run that has ended and will never accept invokes again) means a
503 without ``Retry-After``.

A 502 ``InvocationInterrupted`` carries none: the invocation was dispatched and may have run
(seed 000: "a connection failure may have an unknown execution outcome"), so a blind retry
could run it twice; only the caller knows whether its handler is idempotent.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Final

from purerpc.grpclib.status import StatusCode

from gateway.errors import HttpError
from krt.api import invoke_headers
from krt.api.errors import OutputsError
from krt.api.outputs import validate_outputs
from krt.grpc.client import Metadata

#: Response header carrying the invocation's structured outputs as a JSON object.
OUTPUTS_HEADER: Final = invoke_headers.OUTPUTS_HEADER.lower()
#: Trailer runtimed may set to choose the ``Retry-After`` of a 503 (integer seconds).
RETRY_AFTER_TRAILER: Final = "x-kruntime-retry-after"
MAX_RETRY_AFTER_SECONDS: Final = 300
#: The trailer value meaning "do not retry": the 503 gets no ``Retry-After``.
RETRY_NEVER: Final = "never"
#: Error messages from upstream are cut to this many characters in the JSON body.
MAX_ERROR_MESSAGE_CHARS: Final = 2048
DEFAULT_OUTPUT_CONTENT_TYPE: Final = "application/json"

_CONTENT_TYPE: Final = re.compile(r"[\x20-\x7e]{1,256}")
_ERROR_TYPE: Final = re.compile(r"([A-Za-z_][A-Za-z0-9_.]{0,127}): ")

_SIMPLE: Final[Mapping[int, tuple[int, str]]] = {
    StatusCode.INVALID_ARGUMENT.value: (400, "InvalidArgument"),
    StatusCode.UNAUTHENTICATED.value: (401, "Unauthorized"),
    StatusCode.PERMISSION_DENIED.value: (403, "Forbidden"),
    StatusCode.NOT_FOUND.value: (404, "FunctionNotFound"),
    StatusCode.RESOURCE_EXHAUSTED.value: (429, "TooManyRequests"),
    StatusCode.DEADLINE_EXCEEDED.value: (504, "InvocationTimeout"),
}
_UNAVAILABLE: Final = frozenset(
    {StatusCode.FAILED_PRECONDITION.value, StatusCode.UNAVAILABLE.value}
)
#: Codes meaning "dispatched, then cut off": runtimed's ABORTED (its connection to the
#: Runtime Server or owner broke after sending) and the Runtime Server's CANCELLED (the
#: registration was drained or superseded while the handler ran).
_INTERRUPTED: Final = frozenset({StatusCode.ABORTED.value, StatusCode.CANCELLED.value})
#: ``reason`` of an invocation cut off after dispatch (HTTP 502, no ``Retry-After``).
INTERRUPTED_REASON: Final = "InvocationInterrupted"
#: What every :data:`INTERRUPTED_REASON` message ends with.
INTERRUPTED_OUTCOME: Final = "the invocation may have run and was not retried"


def status_name(code: int) -> str:
    """The gRPC status name for ``code`` (``"CODE_<n>"`` for an unknown number)."""
    try:
        return str(StatusCode(code).name)
    except ValueError:
        return f"CODE_{code}"


def retry_after_seconds(trailers: Metadata, default: int) -> int | None:
    """The ``Retry-After`` for a 503: the upstream trailer if valid, else ``default``.

    Returns:
        Seconds, or ``None`` when runtimed sent ``never`` (send no ``Retry-After``).
    """
    for name, value in trailers:
        if name != RETRY_AFTER_TRAILER:
            continue
        value = value.strip()
        if value.isascii() and value.isdigit():
            return max(1, min(int(value[:6]), MAX_RETRY_AFTER_SECONDS))
        if value == RETRY_NEVER:
            return None
    return default


def unavailable(
    message: str, *, retry_after: int | None, reason: str = "FunctionUnavailable"
) -> HttpError:
    """A 503 with ``Retry-After: retry_after`` (seconds; ``None``: no ``Retry-After``)."""
    headers = {} if retry_after is None else {"retry-after": str(retry_after)}
    return HttpError(503, reason, message, headers=headers)


def interrupted(message: str, details: Mapping[str, object] | None = None) -> HttpError:
    """A 502 ``InvocationInterrupted`` (no ``Retry-After``): dispatched, outcome unknown.

    Args:
        message: what broke, e.g. ``"the connection to the Runtime Service broke (...)"``;
            :data:`INTERRUPTED_OUTCOME` is appended.
        details: extra members of the error body (``grpcCode``).
    """
    return HttpError(
        502, INTERRUPTED_REASON, f"{message}; {INTERRUPTED_OUTCOME}", details=details or {}
    )


def error_for_status(
    code: int, message: str, trailers: Metadata = (), *, retry_after: int = 1
) -> HttpError:
    """The HTTP error for a non-OK gRPC status from runtimed.

    Args:
        code: gRPC status code (non-zero).
        message: ``grpc-message``.
        trailers: trailing metadata (``x-kruntime-retry-after`` is honoured for 503).
        retry_after: default ``Retry-After`` for 503 (seconds).
    """
    message = message[:MAX_ERROR_MESSAGE_CHARS]
    name = status_name(code)
    details = {"grpcCode": name}
    if code in _SIMPLE:
        status, reason = _SIMPLE[code]
        headers = {"www-authenticate": "Bearer"} if status == 401 else {}
        return HttpError(status, reason, message or name, headers=headers, details=details)
    if code in _INTERRUPTED:
        return interrupted(message or name, details)
    if code in _UNAVAILABLE:
        error = unavailable(message or name, retry_after=retry_after_seconds(trailers, retry_after))
        return HttpError(error.status, error.reason, error.message, error.headers, details)
    if code == StatusCode.UNKNOWN.value:
        match = _ERROR_TYPE.match(message)
        error_type = match.group(1) if match else "UNKNOWN"
        return HttpError(
            500,
            "HandlerError",
            message or "the handler failed",
            details={**details, "errorType": error_type},
        )
    return HttpError(
        500,
        "InternalError",
        message or name,
        details={**details, "errorType": name},
    )


def output_content_type(content_type: str) -> str:
    """The ``Content-Type`` of a 200: the function's, if a sane header value, else JSON."""
    if not content_type:
        return DEFAULT_OUTPUT_CONTENT_TYPE
    if not _CONTENT_TYPE.fullmatch(content_type):
        return "application/octet-stream"
    return content_type


def outputs_header(outputs: Mapping[str, str]) -> str | None:
    """The ``X-Kruntime-Outputs`` value: compact ASCII JSON, or ``None`` for no outputs.

    Keys and values are bounded by the Run outputs limits (64 keys, 4 KiB per value, 16 KiB
    in all); non-ASCII and control characters are ``\\u`` escaped, so the value is always a
    legal header value (worst case about 96 KiB, typically far less).

    Raises:
        HttpError: 500 ``InvalidOutputs`` when the Runtime broke an outputs bound.
    """
    if not outputs:
        return None
    try:
        checked = validate_outputs(outputs)
    except OutputsError as exc:
        raise HttpError(
            500,
            "InvalidOutputs",
            f"the Runtime returned outputs that break a bound: {exc}",
            details={"bound": exc.bound},
        ) from None
    return json.dumps(checked, separators=(",", ":"), ensure_ascii=True)
