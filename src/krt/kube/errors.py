"""Errors from the Kubernetes API, mapped from ``Status`` bodies to one class per reason.

The API server answers every failed request with a ``meta/v1 Status`` (``code``, ``reason``,
``message``, ``details.causes``). Callers branch on the class (``except Conflict``) rather
than on numbers; the class is chosen from the HTTP code and, for 409, the reason
(``AlreadyExists`` versus ``Conflict``, which client-go also distinguishes). A watch stream's
``ERROR`` event carries the same Status and maps the same way (410 -> :class:`Gone`).

Transport failures (connection refused, TLS, reset) are not API answers: they raise
:class:`ConnectionFailed`. :func:`is_transient` tells retry loops which errors are worth
retrying with backoff.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "AlreadyExists",
    "ApiError",
    "BadRequest",
    "Cause",
    "Conflict",
    "ConnectionFailed",
    "Forbidden",
    "Gone",
    "Invalid",
    "KubeError",
    "MethodNotAllowed",
    "NotFound",
    "ServerError",
    "ServerTimeout",
    "TooManyRequests",
    "Unauthorized",
    "error_from_status",
    "is_transient",
]


class KubeError(Exception):
    """Root of every error raised by :mod:`krt.kube`."""


class ConnectionFailed(KubeError):
    """The API server could not be reached or the connection broke mid-request."""


@dataclass(frozen=True)
class Cause:
    """One entry of ``Status.details.causes`` (e.g. a field that failed validation).

    Attributes:
        reason: machine-readable cause, e.g. ``FieldValueInvalid``.
        message: human-readable explanation.
        field: the field path, e.g. ``spec.timeout``; empty when not field-specific.
    """

    reason: str
    message: str
    field: str


class ApiError(KubeError):
    """A failed API request, as described by the server's ``Status`` body.

    Attributes:
        code: HTTP status code (e.g. 404).
        reason: ``Status.reason`` (e.g. ``NotFound``); empty when the body had none.
        message: ``Status.message``.
        details: ``Status.details`` as sent (``name``, ``kind``, ``causes``, ...).
        causes: the parsed ``details.causes``.
        retry_after: ``details.retryAfterSeconds`` (seconds), if the server sent it.
    """

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(f"{code} {reason}: {message}" if reason else f"{code}: {message}")
        self.code = code
        self.reason = reason
        self.message = message
        self.details: Mapping[str, Any] = details or {}
        raw_causes = self.details.get("causes") or []
        self.causes: tuple[Cause, ...] = tuple(
            Cause(
                reason=str(c.get("reason", "")),
                message=str(c.get("message", "")),
                field=str(c.get("field", "")),
            )
            for c in raw_causes
            if isinstance(c, Mapping)
        )
        retry = self.details.get("retryAfterSeconds")
        self.retry_after: float | None = (
            float(retry) if isinstance(retry, int | float) and not isinstance(retry, bool) else None
        )


class BadRequest(ApiError):
    """400: the request itself was malformed (bad patch, bad selector, bad resourceVersion)."""


class Unauthorized(ApiError):
    """401: the credentials were missing, invalid or expired."""


class Forbidden(ApiError):
    """403: authenticated, but RBAC does not allow the verb on the resource."""


class NotFound(ApiError):
    """404: the object (or the resource type) does not exist."""


class MethodNotAllowed(ApiError):
    """405: the resource does not support the verb."""


class Conflict(ApiError):
    """409 Conflict: a precondition (resourceVersion, uid) did not hold; re-read and retry."""


class AlreadyExists(ApiError):
    """409 AlreadyExists: create of a name that is taken."""


class Gone(ApiError):
    """410: the requested resourceVersion is compacted (watch or list continue); re-list."""


class Invalid(ApiError):
    """422: the object failed validation; :attr:`ApiError.causes` names each bad field."""


class TooManyRequests(ApiError):
    """429: throttled; :attr:`ApiError.retry_after` says how long to wait, if known."""


class ServerError(ApiError):
    """5xx other than 504: the server failed; usually transient."""


class ServerTimeout(ApiError):
    """504 (or a ``Timeout`` reason): the server gave up waiting; transient."""


_BY_CODE: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    405: MethodNotAllowed,
    410: Gone,
    422: Invalid,
    429: TooManyRequests,
    504: ServerTimeout,
}


def error_from_status(code: int, body: object) -> ApiError:
    """Build the :class:`ApiError` subclass for an HTTP error answer.

    Args:
        code: the HTTP status code (or a watch ERROR Status's ``code``).
        body: the decoded JSON body; a ``Status`` dict normally, anything else tolerated
            (its text becomes the message).

    Returns:
        An instance of the most specific class: :class:`Conflict` /
        :class:`AlreadyExists` by reason for 409, :class:`ServerError` for other 5xx,
        :class:`ApiError` itself for codes without a class.
    """
    if isinstance(body, Mapping):
        status_code = body.get("code")
        if isinstance(status_code, int) and not isinstance(status_code, bool) and status_code:
            code = status_code
        reason = str(body.get("reason") or "")
        message = str(body.get("message") or "")
        raw_details = body.get("details")
        details = raw_details if isinstance(raw_details, Mapping) else None
    else:
        reason, message, details = "", str(body or ""), None
    cls: type[ApiError]
    if code == 409:
        cls = AlreadyExists if reason == "AlreadyExists" else Conflict
    elif code in _BY_CODE:
        cls = _BY_CODE[code]
    elif code >= 500:
        cls = ServerError
    else:
        cls = ApiError
    return cls(code, reason, message or f"HTTP {code}", details=details)


def is_transient(exc: BaseException) -> bool:
    """Whether retrying the same request later may succeed.

    True for :class:`ConnectionFailed`, 429, 5xx and server timeouts; False for everything
    that needs a different request (404, 409, 410, 422, 401, 403, ...).
    """
    if isinstance(exc, ConnectionFailed):
        return True
    if isinstance(exc, ApiError):
        return exc.code == 429 or exc.code >= 500
    return False
