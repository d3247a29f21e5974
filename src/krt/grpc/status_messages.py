"""What a gRPC server says when a call fails: bounded status messages, error descriptions.

Shared by both server connection loops (:mod:`krt.grpc.server` and
:mod:`krt.grpc.unary_server`), so a failed call reads the same whichever loop served it.
"""

from __future__ import annotations

import logging
import urllib.parse
from typing import Any, Final

from google.protobuf.message import DecodeError
from purerpc.grpclib.exceptions import GRPCError, RpcFailedError
from purerpc.grpclib.status import Status, StatusCode

log = logging.getLogger("krt.grpc.server")

#: a status message is cut so that its percent-encoded form (the ``grpc-message`` trailer)
#: stays within this many bytes, well under the 8 KiB metadata limit of grpcio clients.
MAX_STATUS_MESSAGE_BYTES: Final = 4096
_CUT_MARKER: Final = " ...[truncated]"


def fit_status_message(message: str, limit: int = MAX_STATUS_MESSAGE_BYTES) -> str:
    """Return ``message``, cut (with a marker) so its percent-encoding has at most ``limit`` bytes.

    Args:
        message: the status detail (anything UTF-8 cannot encode becomes ``?``).
        limit: the bound of ``urllib.parse.quote(message, safe="")`` in bytes (as purerpc
            encodes the ``grpc-message`` trailer).
    """
    message = message.encode("utf-8", "replace").decode("utf-8")
    if len(urllib.parse.quote(message, safe="")) <= limit:
        return message
    budget = limit - len(urllib.parse.quote(_CUT_MARKER, safe=""))
    used = 0
    end = 0
    for end, char in enumerate(message):  # noqa: B007 - ``end`` is read after the loop
        used += len(urllib.parse.quote(char, safe=""))
        if used > budget:
            break
    return message[:end] + _CUT_MARKER


def bounded(status: Status) -> Status:
    """``status`` with its message made valid UTF-8 and cut by :func:`fit_status_message`."""
    return Status(status.status_code, fit_status_message(status.status_message or ""))


def describe(exc: BaseException) -> str:
    """``Type: message`` of ``exc``, or of the exceptions inside an exception group."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(describe(inner) for inner in exc.exceptions)
    return f"{type(exc).__name__}: {exc}"


def status_for_error(error: Exception, *, request_type: Any, name: str) -> Status:
    """The status answering a call whose method (or request decoding) raised ``error``.

    Args:
        error: what the method raised, or the request's decoding or framing error.
        request_type: the method's request message class (named in INVALID_ARGUMENT).
        name: ``package.Service/Method``, logged with an unexpected exception.

    Returns:
        The method's own status for ``RpcFailedError``; INVALID_ARGUMENT for an undecodable
        request or broken framing (e.g. more than one request message); INTERNAL, logged
        with its traceback, for anything else.
    """
    if isinstance(error, RpcFailedError):
        return Status(error.status.status_code, error.status.status_message)
    if isinstance(error, DecodeError):
        type_name = request_type.DESCRIPTOR.full_name
        return Status(StatusCode.INVALID_ARGUMENT, f"request is not a valid {type_name}: {error}")
    if isinstance(error, GRPCError):
        return Status(StatusCode.INVALID_ARGUMENT, f"{type(error).__name__}: {error}")
    log.error("internal error", exc_info=error, extra={"rpc": name})
    return Status(StatusCode.INTERNAL, f"internal error: {type(error).__name__}: {error}")
