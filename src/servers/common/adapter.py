"""The seam between the shared Runtime Server machinery and a language adapter.

The shared code (``servers.common``) owns everything seed 002 says about registrations:
identity, digests, attempts, stale-ID fencing, one in-flight invocation, timeouts, drains,
last-activity clocks and the gRPC error mapping. A language adapter (Python, Bash) only knows
how to turn a handler into a warm worker and how to start a one-shot task process. Keeping
the seam this narrow means both built-in servers enforce the contract with one implementation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True)
class InvokeResult:
    """What one successful invocation produced.

    Attributes:
        output: the response bytes (for JSON, the UTF-8 encoded document).
        content_type: MIME type of ``output``, e.g. ``application/json``.
        outputs: structured outputs, already within the Run-output bounds (seed 002,
            "Invocation Semantics": keys ``[A-Za-z0-9_.-]{1,63}``, at most 64 entries,
            4 KiB per value, 16 KiB in total).
    """

    output: bytes
    content_type: str
    outputs: Mapping[str, str] = field(default_factory=dict)


class InvocationError(Exception):
    """The handler failed for this invocation only (gRPC UNKNOWN); the registration stays READY.

    Args:
        error_type: the exception class name or a short kind such as ``ExitStatus``.
        message: bounded human-readable detail (the adapter keeps it under 4 KiB).
    """

    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(f"{error_type}: {message}")
        self.error_type = error_type
        self.message = message


class InvalidInput(Exception):
    """The payload is not acceptable for this handler (gRPC INVALID_ARGUMENT), e.g. bad JSON."""


class RegistrationFailed(Exception):
    """The handler could not be made callable (import error, missing function, ...).

    ``str(exc)`` is the bounded summary that becomes ``fatal_error`` and the gRPC detail.
    """


class FunctionWorker(Protocol):
    """A warm process (or equivalent) that serves invocations of one registration.

    Only one ``invoke`` runs at a time; the shared layer guarantees it. When ``invoke`` is
    cancelled (trio cancellation: timeout, drain deadline, caller gone) the worker must kill
    its process group before the cancellation propagates, and ``alive`` turns False; the
    shared layer then starts a fresh worker for the next invocation.
    """

    @property
    def alive(self) -> bool:
        """False once the worker process has exited or was killed."""
        ...

    async def invoke(
        self, payload: bytes, *, content_type: str, invocation_id: str
    ) -> InvokeResult:
        """Run the handler once.

        Raises:
            InvalidInput: the payload cannot be decoded for this handler.
            InvocationError: the handler raised, exited non-zero, or returned something
                that cannot be encoded.
        """
        ...

    async def aclose(self) -> None:
        """Stop the worker and reap its process group; idempotent."""
        ...


class FunctionAdapter(Protocol):
    """Language-specific part of a Runtime Server."""

    #: short name used in logs and ``--help``: ``python`` or ``bash``.
    name: str

    def handler_error(self, handler: str) -> str | None:
        """Return why ``handler`` is malformed for this language, or None when well-formed.

        The message is complete and names the handler (it becomes the INVALID_ARGUMENT detail
        as is), e.g. ``handler 'x' must be module.function``.
        """
        ...

    async def start_worker(
        self,
        *,
        working_dir: Path,
        handler: str,
        env: Mapping[str, str],
        run_uid: str,
    ) -> FunctionWorker:
        """Start a warm worker with the handler loaded (imported / sourced and checked).

        Args:
            working_dir: an existing directory under the server's work dir.
            handler: a handler that passed ``handler_error``.
            env: exactly the environment the handler sees, besides a minimal PATH/HOME.
            run_uid: the Run UID, for structured logs.

        Raises:
            RegistrationFailed: with a bounded summary of the failure.
        """
        ...

    def task_argv(self, *, entrypoint: str, args: Sequence[str]) -> list[str]:
        """Return the argv of a one-shot task (``entrypoint`` may be empty).

        Raises:
            ValueError: the arguments cannot form a command (the shared layer maps it to
                INVALID_ARGUMENT).
        """
        ...
