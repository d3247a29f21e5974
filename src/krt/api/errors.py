"""Errors raised by the API library: every one names the offending field and the rule broken."""

from __future__ import annotations


class ApiError(ValueError):
    """Base class of the API library's validation errors.

    Attributes:
        field: dotted path of the offending field (``spec.mode.task.entrypoint``), or ``""``
            when the input as a whole is at fault.
        detail: what is wrong, without the field name.
    """

    def __init__(self, field: str, detail: str) -> None:
        self.field = field
        self.detail = detail
        super().__init__(f"{field}: {detail}" if field else detail)


class InvalidObjectError(ApiError):
    """A Run or Runtime dict cannot be parsed: wrong type, missing field or broken rule."""


class DurationError(ApiError):
    """A duration string is not a valid Go/Kubernetes duration (or breaks a bound)."""


class OutputsError(ApiError):
    """Run outputs break a bound of seed 000 (Invoke Contract, bounded Run outputs).

    Attributes:
        key: the output key at fault, or ``None`` when the bound is on the whole set.
        bound: a short name of the bound broken: ``"key-pattern"``, ``"max-keys"``,
            ``"max-value-bytes"``, ``"max-total-bytes"``, ``"line-syntax"``, ``"encoding"``.
    """

    def __init__(self, detail: str, *, key: str | None, bound: str) -> None:
        self.key = key
        self.bound = bound
        super().__init__("status.outputs" if key is None else f"status.outputs[{key!r}]", detail)


class EndpointPathError(ApiError):
    """A function endpoint path or URL is malformed or names an invalid object."""


class ResourceError(ApiError):
    """A ``resources`` map holds a name or quantity that is not a valid logical resource."""
