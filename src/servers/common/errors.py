"""Errors of the Runtime Server contract, independent of any gRPC library.

The pure logic (registration table, validation, executions) raises :class:`ContractError`
with a status code named like gRPC's; the servicers translate it to a purerpc status once
(:mod:`servers.common.servicers`). Keeping purerpc out of the logic lets it be tested
synchronously and reused by a different transport.
"""

from __future__ import annotations

import enum


class Code(enum.Enum):
    """The gRPC status codes the contract uses (seed 002, "Limits and Error Mapping")."""

    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    INTERNAL = 13
    UNAVAILABLE = 14


class ContractError(Exception):
    """A request the contract answers with a non-OK status.

    Args:
        code: the status code to answer with.
        message: specific, human-readable detail (which field, which limit, which ID).
    """

    def __init__(self, code: Code, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def __repr__(self) -> str:
        return f"ContractError({self.code.name}, {self.message!r})"


def invalid_argument(message: str) -> ContractError:
    """Return an INVALID_ARGUMENT error with ``message``."""
    return ContractError(Code.INVALID_ARGUMENT, message)


def not_found(message: str) -> ContractError:
    """Return a NOT_FOUND error with ``message``."""
    return ContractError(Code.NOT_FOUND, message)


def already_exists(message: str) -> ContractError:
    """Return an ALREADY_EXISTS error with ``message``."""
    return ContractError(Code.ALREADY_EXISTS, message)


def failed_precondition(message: str) -> ContractError:
    """Return a FAILED_PRECONDITION error with ``message``."""
    return ContractError(Code.FAILED_PRECONDITION, message)


def resource_exhausted(message: str) -> ContractError:
    """Return a RESOURCE_EXHAUSTED error with ``message``."""
    return ContractError(Code.RESOURCE_EXHAUSTED, message)
