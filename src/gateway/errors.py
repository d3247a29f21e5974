"""The gateway's HTTP error: one status code, reason, message, and the JSON body they make.

Every error response has the body (docs/gateway.md, "Errors")::

    {"error": {"code": 413, "reason": "RequestTooLarge", "message": "...",
               "invocationId": "..."}}

plus optional extra members (``errorType`` and ``grpcCode`` for a handler error). Reasons are
stable CamelCase identifiers clients may switch on; messages are for people.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(eq=False)
class HttpError(Exception):
    """A request that ends in an HTTP error status.

    Attributes:
        status: the HTTP status code (4xx or 5xx).
        reason: a stable CamelCase reason, e.g. ``InvalidInvocationID``.
        message: a human-readable explanation naming the field and limit at fault.
        headers: extra response headers (lowercase names), e.g. ``retry-after``.
        details: extra members of the ``error`` object (JSON-serializable).
    """

    status: int
    reason: str
    message: str
    headers: Mapping[str, str] = field(default_factory=dict)
    details: Mapping[str, object] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.status} {self.reason}: {self.message}"

    def body(self, invocation_id: str) -> bytes:
        """The JSON error body carrying ``invocation_id`` (UTF-8 bytes)."""
        error: dict[str, object] = {
            "code": self.status,
            "reason": self.reason,
            "message": self.message,
            "invocationId": invocation_id,
        }
        error.update(self.details)
        return json.dumps({"error": error}, separators=(",", ":")).encode()
