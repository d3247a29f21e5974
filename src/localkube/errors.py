"""Kubernetes API errors as localkube raises and serves them.

Every error leaves the server as a ``meta/v1 Status`` object with ``reason`` and ``code``,
which is what kubectl and kr8s parse (for example kubectl's "is invalid:" lines come from
``details.causes``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FieldError:
    """One validation failure at a field path.

    Attributes:
        field: dotted path with list indices, as Kubernetes prints it (``spec.mode.task``,
            ``spec.env[3].name``).
        reason: a Kubernetes cause type: ``FieldValueRequired``, ``FieldValueInvalid``,
            ``FieldValueNotSupported``, ``FieldValueTooLong``, ``FieldValueTooMany``,
            ``FieldValueForbidden``, ``FieldValueDuplicate`` or ``FieldValueTypeInvalid``.
        message: the text kubectl shows after the field, e.g. ``Required value`` or
            ``Invalid value: "x": must be relative``.
    """

    field: str
    reason: str
    message: str

    def cause(self) -> dict[str, str]:
        """Return the ``details.causes[]`` entry of a Status object."""
        return {"reason": self.reason, "message": self.message, "field": self.field}

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


class ApiError(Exception):
    """An error answered to the client as a Status object.

    Args:
        code: HTTP status code (400, 401, 403, 404, 405, 409, 410, 413, 415, 422, 500, ...).
        reason: Status reason (``BadRequest``, ``Unauthorized``, ``Forbidden``, ``NotFound``,
            ``AlreadyExists``, ``Conflict``, ``Gone``, ``Invalid``, ``RequestEntityTooLarge``,
            ``UnsupportedMediaType``, ``MethodNotAllowed``, ``Expired``, ``InternalError``).
        message: the human-readable message kubectl prints after ``Error from server (...)``.
        details: optional ``details`` (name, group, kind, causes).
    """

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> dict[str, Any]:
        """Return the ``v1 Status`` body for this error."""
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            body["details"] = self.details
        return body


def invalid(kind: str, group: str, name: str, errors: list[FieldError]) -> ApiError:
    """Build the 422 ``Invalid`` error for ``errors`` the way kube-apiserver words it.

    Args:
        kind: e.g. ``Run``. group: e.g. ``kruntimes.io`` (empty for the core group).
        name: object name (may be empty for generateName objects).
        errors: at least one field error.
    """
    qualified = f"{kind}.{group}" if group else kind
    if len(errors) == 1:
        summary = str(errors[0])
    else:
        summary = "[" + ", ".join(str(e) for e in errors) + "]"
    return ApiError(
        422,
        "Invalid",
        f'{qualified} "{name}" is invalid: {summary}',
        details={
            "name": name,
            "group": group,
            "kind": kind,
            "causes": [e.cause() for e in errors],
        },
    )
