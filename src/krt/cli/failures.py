"""How a command ends: :class:`CommandFailed` and :func:`run_async`, the one ``trio.run``.

Every command validates its input with click (``click.UsageError``, exit code 2) and then
hands one async function to :func:`run_async`. Errors are turned into one clear line on
stderr (``error: ...``) and the exit code of :mod:`krt.cli.exitcodes`; no traceback is
shown for an expected failure.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import NoReturn, TypeVar

import click
import trio

from krt.cli.exitcodes import ExitCode, for_http_status
from krt.kube.errors import AlreadyExists, ApiError, ConnectionFailed, Invalid, KubeError

T = TypeVar("T")


class CommandFailed(Exception):
    """A command failed in an expected way: print ``message`` and exit with ``code``.

    Attributes:
        code: the process exit code.
        message: one line for stderr (without the ``error:`` prefix).
    """

    def __init__(self, code: ExitCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def describe_api_error(exc: ApiError, what: str = "") -> CommandFailed:
    """Turn an API server error into a :class:`CommandFailed` with a one-line message.

    Args:
        exc: the error from :mod:`krt.kube`.
        what: what was being done, e.g. ``creating Run demo/x`` (prefixes the message).

    Returns:
        The failure to raise (exit code from the HTTP status).
    """
    detail = exc.message or str(exc)
    if isinstance(exc, Invalid) and exc.causes:
        detail = "; ".join(
            f"{c.field}: {c.message}" if c.field and c.field not in c.message else c.message
            for c in exc.causes
        )
    elif isinstance(exc, AlreadyExists):
        detail = f"{detail} (choose another name, or omit NAME to generate one)"
    elif exc.code == 401:
        detail = f"{detail} (the kubeconfig's credentials were rejected; log in again)"
    prefix = f"{what}: " if what else ""
    return CommandFailed(for_http_status(exc.code, exc.reason), f"{prefix}{one_line(detail)}")


def one_line(text: str, limit: int = 500) -> str:
    """Collapse whitespace and newlines and cut ``text`` to ``limit`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def fail(code: ExitCode, message: str) -> NoReturn:
    """Print ``error: message`` on stderr and exit with ``code``."""
    click.echo(f"error: {one_line(message, 2000)}", err=True)
    sys.exit(int(code))


def run_async(main: Callable[[], Awaitable[T]]) -> T:
    """Run a command's async part under one ``trio.run`` and map its errors to exit codes.

    Args:
        main: the command's async function (no arguments).

    Returns:
        What ``main`` returned.

    Exits (``SystemExit``) on a :class:`CommandFailed`, a :mod:`krt.kube` error, or
    Ctrl-C, after printing one line on stderr.
    """
    try:
        return trio.run(main)
    except BaseException as exc:  # noqa: BLE001 - every exit path prints one line
        leaf = _expected_leaf(exc)
        if leaf is None:
            raise
        code, message = _classify(leaf)
        fail(code, message)


_EXPECTED = (CommandFailed, KubeError, KeyboardInterrupt)


def _expected_leaf(exc: BaseException) -> BaseException | None:
    """The expected error inside ``exc`` (a nursery wraps errors in exception groups)."""
    if isinstance(exc, _EXPECTED):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            leaf = _expected_leaf(inner)
            if leaf is not None:
                return leaf
    return None


def _classify(exc: BaseException) -> tuple[ExitCode, str]:
    if isinstance(exc, CommandFailed):
        return exc.code, exc.message
    if isinstance(exc, ConnectionFailed):
        return ExitCode.UNREACHABLE, f"cannot reach the Kubernetes API server: {exc}"
    if isinstance(exc, ApiError):
        failure = describe_api_error(exc)
        return failure.code, failure.message
    if isinstance(exc, KubeError):  # krt.kube.client.ConfigError, or another client-side error
        return ExitCode.UNREACHABLE, f"no usable Kubernetes configuration: {exc}"
    return ExitCode.INTERRUPTED, "interrupted"
