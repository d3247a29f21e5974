"""Checks an invoke request must pass before anything is dispatched (pure functions).

Seed 000, Invoke Contract, and issue 8: the gateway validates, in this order, and answers

1. ``Authorization: Bearer <token>`` present and well-formed, else 401;
2. ``Content-Type: application/json`` (``charset=utf-8`` allowed), else 415;
3. body at most :data:`MAX_BODY_BYTES` (1 MiB), else 413 (``Content-Length`` is checked
   before any byte of the body is read; a chunked body is counted while it streams);
4. body is one valid JSON text (RFC 8259: UTF-8, no ``NaN``), else 400;
5. ``X-Kruntime-Invocation-ID`` at most 128 bytes of visible ASCII, else 400; an absent (or
   empty) header gets a generated opaque ID;
6. ``X-Kruntime-Timeout`` (optional) a positive integer of milliseconds, else 400.

Every response carries an invocation ID, including the rejections above: when the client's
ID is itself invalid, the response carries a generated one. The I/O (reading headers and the
body) lives in :mod:`gateway.app`; this module only decides.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from typing import Final, NoReturn

from gateway.errors import HttpError
from krt.api import invoke_headers, limits
from krt.api.invoke_headers import wire_name

#: Seed 000, Invoke Contract: "request body: 1 MiB".
MAX_BODY_BYTES: Final = limits.MAX_INVOKE_INPUT_BYTES
#: Seed 000/002: "invocation ID: 128 bytes".
MAX_INVOCATION_ID_BYTES: Final = limits.MAX_INVOCATION_ID_BYTES

INVOCATION_ID_HEADER: Final = wire_name(invoke_headers.INVOCATION_ID_HEADER)
TIMEOUT_HEADER: Final = wire_name(invoke_headers.TIMEOUT_HEADER)

_VISIBLE_ASCII: Final = re.compile(rb"[\x21-\x7e]+")
_TOKEN: Final = re.compile(rb"[\x21-\x7e]+")
_DIGITS: Final = re.compile(rb"[0-9]{1,12}")

Headers = Sequence[tuple[bytes, bytes]]


def header_values(headers: Headers, name: bytes) -> list[bytes]:
    """All values of header ``name`` (lowercase bytes, as ASGI delivers names)."""
    return [value for key, value in headers if key == name]


def new_invocation_id() -> str:
    """A generated opaque invocation ID: 128 random bits as 32 lowercase hex characters."""
    return os.urandom(16).hex()  # what uuid4().hex carries, without building a UUID


def invocation_id_of(headers: Headers) -> tuple[str, HttpError | None]:
    """The invocation ID to use for this request, and the error to report if it is invalid.

    Returns:
        ``(invocation_id, None)`` for a valid or absent header (absent or empty: a new ID);
        ``(generated_id, error)`` for an invalid one: ``error`` is a 400
        ``InvalidInvocationID`` naming the rule, reported after the checks before it.
    """
    values = header_values(headers, INVOCATION_ID_HEADER)
    if len(values) > 1:
        return new_invocation_id(), _bad_id("must be sent at most once")
    value = values[0].strip(b" \t") if values else b""
    if not value:
        return new_invocation_id(), None
    if len(value) > MAX_INVOCATION_ID_BYTES:
        return new_invocation_id(), _bad_id(
            f"is {len(value)} bytes; the limit is {MAX_INVOCATION_ID_BYTES} bytes"
        )
    if not _VISIBLE_ASCII.fullmatch(value):
        return new_invocation_id(), _bad_id("must be visible ASCII (0x21-0x7E) only")
    return value.decode("ascii"), None


def _bad_id(detail: str) -> HttpError:
    return HttpError(400, "InvalidInvocationID", f"X-Kruntime-Invocation-ID {detail}")


def bearer_token(headers: Headers) -> str:
    """The caller's bearer token (never logged).

    Raises:
        HttpError: 401 ``Unauthorized`` when the header is missing, repeated, not the
            ``Bearer`` scheme, or the token is empty or not visible ASCII.
    """
    values = header_values(headers, b"authorization")
    if not values:
        raise _unauthorized("missing Authorization header; send 'Authorization: Bearer <token>'")
    if len(values) > 1:
        raise _unauthorized("the Authorization header must be sent once")
    scheme, _, token = values[0].strip().partition(b" ")
    token = token.strip(b" ")
    if scheme.lower() != b"bearer":
        raise _unauthorized("the Authorization header must use the Bearer scheme")
    if not token or not _TOKEN.fullmatch(token):
        raise _unauthorized("the bearer token is empty or not visible ASCII")
    return token.decode("ascii")


def _unauthorized(message: str) -> HttpError:
    return HttpError(401, "Unauthorized", message, headers={"www-authenticate": "Bearer"})


def check_content_type(headers: Headers) -> None:
    """Require ``Content-Type: application/json`` (parameters: only ``charset=utf-8``).

    Raises:
        HttpError: 415 ``UnsupportedMediaType`` naming what was sent.
    """
    values = header_values(headers, b"content-type")
    if len(values) != 1:
        raise _unsupported("Content-Type must be application/json (sent exactly once)")
    media_type, *params = values[0].decode("latin-1").split(";")
    if media_type.strip().lower() != "application/json":
        raise _unsupported(f"Content-Type {media_type.strip()[:100]!r} is not application/json")
    for param in params:
        name, _, value = param.partition("=")
        if name.strip().lower() != "charset" or value.strip().strip('"').lower() != "utf-8":
            raise _unsupported(
                f"Content-Type parameter {param.strip()[:100]!r} is not supported "
                "(JSON is UTF-8; only charset=utf-8 is accepted)"
            )


def _unsupported(message: str) -> HttpError:
    return HttpError(415, "UnsupportedMediaType", message)


def too_large(size: int | None = None) -> HttpError:
    """The 413 ``RequestTooLarge`` error, naming the 1 MiB limit (``size`` when known)."""
    got = f"{size} bytes" if size is not None else "more than the limit"
    return HttpError(
        413,
        "RequestTooLarge",
        f"request body is {got}; the limit is {MAX_BODY_BYTES} bytes (1 MiB)",
        details={"limitBytes": MAX_BODY_BYTES},
    )


def check_content_length(headers: Headers) -> int | None:
    """The declared body size, checked against the limit before any body byte is read.

    Returns:
        The ``Content-Length`` in bytes, or ``None`` when absent (chunked body).

    Raises:
        HttpError: 413 when it exceeds :data:`MAX_BODY_BYTES`; 400 ``InvalidContentLength``
            when it is not one non-negative integer.
    """
    values = header_values(headers, b"content-length")
    if not values:
        return None
    distinct = {value.strip() for value in values}
    if len(distinct) != 1 or not (value := distinct.pop()).isdigit():
        raise HttpError(400, "InvalidContentLength", "Content-Length is not one integer")
    if len(value) > 12:
        raise too_large()
    size = int(value)
    if size > MAX_BODY_BYTES:
        raise too_large(size)
    return size


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not valid JSON")


def _ignore_number(_text: str) -> int:
    return 0


def check_json(body: bytes) -> None:
    """Require ``body`` to be one JSON text (RFC 8259) in UTF-8.

    Numbers are syntax-checked only (never converted), so a long number is accepted.

    Raises:
        HttpError: 400 ``InvalidJSON`` naming the position of the first error.
    """
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HttpError(400, "InvalidJSON", f"body is not UTF-8 (byte {exc.start})") from None
    if text.startswith("\ufeff"):
        raise HttpError(400, "InvalidJSON", "body starts with a byte order mark")
    try:
        json.loads(
            text,
            parse_int=_ignore_number,
            parse_float=_ignore_number,
            parse_constant=_reject_constant,
        )
    except json.JSONDecodeError as exc:
        raise HttpError(
            400, "InvalidJSON", f"body is not valid JSON: {exc.msg} at byte offset {exc.pos}"
        ) from None
    except ValueError as exc:
        raise HttpError(400, "InvalidJSON", f"body is not valid JSON: {exc}") from None
    except RecursionError:
        raise HttpError(400, "InvalidJSON", "body is nested too deeply") from None


def requested_timeout(headers: Headers, *, default: float, maximum: float) -> float:
    """The invocation timeout in seconds: the client's ``X-Kruntime-Timeout`` or the default.

    Args:
        headers: request headers.
        default: timeout when the header is absent (seconds).
        maximum: upper bound; a larger request is clamped to it (seconds).

    Returns:
        ``min(requested, maximum)`` or ``default`` (seconds).

    Raises:
        HttpError: 400 ``InvalidTimeout`` when the header is repeated or not a positive
            integer of milliseconds.
    """
    values = header_values(headers, TIMEOUT_HEADER)
    if not values:
        return min(default, maximum)
    value = values[0].strip()
    if len(values) > 1 or not _DIGITS.fullmatch(value) or int(value) == 0:
        raise HttpError(
            400,
            "InvalidTimeout",
            "X-Kruntime-Timeout must be one positive integer of milliseconds "
            f"(at most {int(maximum * 1000)} is used)",
        )
    return min(int(value) / 1000, maximum)
