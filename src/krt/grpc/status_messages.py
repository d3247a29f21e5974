"""What a gRPC server says when a call fails: bounded status messages, error descriptions.

Shared by both server connection loops (:mod:`krt.grpc.server` and
:mod:`krt.grpc.unary_server`), so a failed call reads the same whichever loop served it.

:func:`status_fields` builds the ``grpc-status``/``grpc-message`` fields the unary loop sends.
Its ``grpc-message`` is encoded as the gRPC HTTP/2 protocol asks (only ``%`` and bytes
outside printable ASCII are percent-encoded; purerpc encodes every space and punctuation
mark too) and sent as a never-indexed HPACK literal: a message usually names the call's own
ID ("execution <uid> not found"), so indexing it, as purerpc's trailers are, put a new entry
in both sides' HPACK tables on every failed call, evicted older ones and made every block
the encoder and the client's decoder remembered stale (issue 6).
"""

from __future__ import annotations

import logging
import urllib.parse
from collections.abc import Iterable
from typing import Any, Final

import hpack
from google.protobuf.message import DecodeError
from purerpc.grpclib.exceptions import GRPCError, RpcFailedError
from purerpc.grpclib.status import Status, StatusCode

log = logging.getLogger("krt.grpc.server")

#: a status message is cut so that its percent-encoded form (the ``grpc-message`` trailer)
#: stays within this many bytes, well under the 8 KiB metadata limit of grpcio clients.
MAX_STATUS_MESSAGE_BYTES: Final = 4096
_CUT_MARKER: Final = " ...[truncated]"
#: a character percent-encodes to at most this many bytes (4 UTF-8 bytes, 3 each).
_MAX_ENCODED_PER_CHAR: Final = 12
#: sent unencoded in ``grpc-message`` besides letters, digits and ``_.-~`` (which
#: ``urllib.parse.quote`` never encodes): printable ASCII except ``%`` (gRPC over HTTP/2,
#: "Percent-Byte-Unencoded": %x20-%x24 / %x26-%x7E).
_UNENCODED_PUNCTUATION: Final = "".join(
    chr(c) for c in range(0x20, 0x7F) if not chr(c).isalnum() and chr(c) not in "%_.-~"
)


class StatusWithTrailers(Status):  # type: ignore[misc]
    """A :class:`~purerpc.grpclib.status.Status` that ends its call with custom trailers too.

    A servicer raises ``purerpc.RpcFailedError(StatusWithTrailers(code, message, trailers))``
    to send trailing metadata with an error status (purerpc's ``RpcFailedError`` carries only
    the code and message), e.g. runtimed's ``x-kruntime-retry-after`` for the gateway.

    Args:
        status_code: the gRPC status.
        status_message: the ``grpc-message`` (bounded as any other).
        trailers: ``(name, value)`` pairs: lowercase names that are not ``grpc-`` reserved
            ones, printable ASCII values.

    Raises:
        ValueError: a name is not lowercase, is reserved (``grpc-...``) or a value is not
            printable ASCII.
    """

    def __init__(
        self,
        status_code: StatusCode | int,
        status_message: str = "",
        trailers: Iterable[tuple[str, str]] = (),
    ) -> None:
        super().__init__(status_code, status_message)
        pairs = tuple((str(name), str(value)) for name, value in trailers)
        for name, value in pairs:
            if not name or name != name.lower() or name.startswith(("grpc-", ":")):
                raise ValueError(f"trailer name {name!r} must be lowercase and not reserved")
            if not (value.isascii() and value.isprintable()):
                raise ValueError(f"trailer {name!r}: value must be printable ASCII")
        self.trailers = pairs


def fit_status_message(message: str, limit: int = MAX_STATUS_MESSAGE_BYTES) -> str:
    """Return ``message``, cut (with a marker) so its percent-encoding has at most ``limit`` bytes.

    Args:
        message: the status detail (anything UTF-8 cannot encode becomes ``?``).
        limit: the bound of ``urllib.parse.quote(message, safe="")`` in bytes (as purerpc
            encodes the ``grpc-message`` trailer).
    """
    if message.isascii():
        if len(message) * 3 <= limit:  # fits however it is encoded: no need to encode it
            return message
    else:
        message = message.encode("utf-8", "replace").decode("utf-8")
        if len(message) * _MAX_ENCODED_PER_CHAR <= limit:
            return message
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
    """``status`` with its message made valid UTF-8 and cut by :func:`fit_status_message`.

    The trailers of a :class:`StatusWithTrailers` are kept.
    """
    message = fit_status_message(status.status_message or "")
    if isinstance(status, StatusWithTrailers):
        return StatusWithTrailers(status.status_code, message, status.trailers)
    return Status(status.status_code, message)


def encode_status_message(message: str) -> str:
    """Percent-encode ``message`` for ``grpc-message`` (gRPC over HTTP/2, "Responses").

    Only ``%`` and what is not printable ASCII are encoded, so the result is never longer
    than ``urllib.parse.quote(message, safe="")`` (the bound of :func:`fit_status_message`).

    Args:
        message: valid UTF-8 text (see :func:`bounded`).
    """
    if message.isascii() and message.isprintable() and "%" not in message:
        return message
    return urllib.parse.quote(message, safe=_UNENCODED_PUNCTUATION)


def status_fields(status: Status) -> list[tuple[str, str]]:
    """The ``grpc-status`` and (if any) ``grpc-message`` header fields of ``status``.

    The message is bounded (:func:`bounded`), encoded by :func:`encode_status_message` and
    marked never-indexed (an :class:`hpack.NeverIndexedHeaderTuple`): see the module
    docstring. The fields end a response, as trailers or in a Trailers-Only response.
    """
    fields: list[tuple[str, str]] = [("grpc-status", str(status.int_value))]
    message = fit_status_message(status.status_message or "")
    if message:
        fields.append(hpack.NeverIndexedHeaderTuple("grpc-message", encode_status_message(message)))
    if isinstance(status, StatusWithTrailers):
        fields.extend(status.trailers)
    return fields


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
        if isinstance(error.status, StatusWithTrailers):
            return error.status
        return Status(error.status.status_code, error.status.status_message)
    if isinstance(error, DecodeError):
        type_name = request_type.DESCRIPTOR.full_name
        return Status(StatusCode.INVALID_ARGUMENT, f"request is not a valid {type_name}: {error}")
    if isinstance(error, GRPCError):
        return Status(StatusCode.INVALID_ARGUMENT, f"{type(error).__name__}: {error}")
    log.error("internal error", exc_info=error, extra={"rpc": name})
    return Status(StatusCode.INTERNAL, f"internal error: {type(error).__name__}: {error}")
