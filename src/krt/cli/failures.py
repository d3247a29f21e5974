"""How a command ends: :class:`CommandFailed` and :func:`run_async`, the one ``trio.run``.

Every command validates its input with click (``click.UsageError``, exit code 2) and then
hands one async function to :func:`run_async`. Errors are turned into one clear line on
stderr (``error: ...``) and the exit code of :mod:`krt.cli.exitcodes`; no traceback is
shown for an expected failure.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import NoReturn, TypeVar

import click
import trio

from krt.cli.exitcodes import ExitCode, for_http_status
from krt.exception_groups import first_leaf
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
    elif exc.code == 403:
        detail = f"{detail} ({forbidden_advice(detail)})"
    prefix = f"{what}: " if what else ""
    return CommandFailed(for_http_status(exc.code, exc.reason), f"{prefix}{one_line(detail)}")


#: The Kubernetes RBAC denial text: ``User "u" cannot get resource "runs" in API group
#: "kruntimes.io" in the namespace "default"`` (the namespace part is absent for cluster scope).
_FORBIDDEN = re.compile(
    r'cannot (?P<verb>[a-z]+) resource "(?P<resource>[^"]+)" in API group "(?P<group>[^"]*)"'
    r'(?: in the namespace "(?P<namespace>[^"]+)")?'
)


def forbidden_advice(message: str) -> str:
    """What to do about an RBAC denial (HTTP 403), for the end of the one-line message.

    Args:
        message: the API server's ``Status.message`` of the 403.

    Returns:
        The advice: the permission to ask for and the ``kubectl auth can-i`` command that
        checks it when the message names them (the standard Kubernetes wording), else a
        generic pointer to docs/security.md.
    """
    match = _FORBIDDEN.search(message)
    if match is None:
        return (
            "RBAC does not allow this: ask a cluster admin for the permission; see docs/security.md"
        )
    resource = match["resource"] + (f".{match['group']}" if match["group"] else "")
    where = f" -n {match['namespace']}" if match["namespace"] else ""
    return (
        f"ask a cluster admin for a Role granting '{match['verb']}' on {resource}{where}, "
        f"see docs/security.md; check with: kubectl auth can-i {match['verb']} {resource}{where}"
    )


def one_line(text: str, limit: int = 500) -> str:
    """Collapse whitespace and newlines and cut ``text`` to ``limit`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def fail(code: ExitCode, message: str) -> NoReturn:
    """Print ``error: message`` on stderr and exit with ``code``."""
    click.echo(f"error: {one_line(message, 2000)}", err=True)
    sys.exit(int(code))


def report(failure: CommandFailed) -> None:
    """Print ``error: <message>`` on stderr for a failure the command goes on past.

    The verbs that take several names (``krt get a b``, ``krt delete a b``) act on every
    name they can, as kubectl does, report each one they cannot with this line, and
    then end with :func:`exit_if_failed`.
    """
    click.echo(f"error: {one_line(failure.message, 2000)}", err=True)


def exit_if_failed(failures: Sequence[CommandFailed]) -> None:
    """Exit with the first failure's code if any name failed (already :func:`report`-ed).

    Args:
        failures: what went wrong per name, in the order met; empty when all went well.

    Raises:
        SystemExit: ``failures[0].code`` (e.g. 3 for a missing Run) when there is any.
    """
    if failures:
        sys.exit(int(failures[0].code))


def run_async(
    main: Callable[[], Awaitable[T]], *, on_interrupt: Callable[[], str | None] | None = None
) -> T:
    """Run a command's async part under one ``trio.run`` and map its errors to exit codes.

    Args:
        main: the command's async function (no arguments).
        on_interrupt: called on Ctrl-C; what it returns (if anything) follows
            ``interrupted;`` on stderr (e.g. that a created Run keeps running).

    Returns:
        What ``main`` returned.

    Exits (``SystemExit``) on a :class:`CommandFailed`, a :mod:`krt.kube` error, or
    Ctrl-C, after printing one line on stderr.
    """
    try:
        return trio.run(main)
    except BaseException as exc:  # noqa: BLE001 - every exit path prints one line
        leaf = first_leaf(exc, _EXPECTED)
        if leaf is None:
            raise
        code, message = _classify(leaf)
        if isinstance(leaf, KeyboardInterrupt) and on_interrupt is not None:
            note = on_interrupt()
            if note:
                message = f"{message}; {note}"
        fail(code, message)


_EXPECTED = (CommandFailed, KubeError, KeyboardInterrupt)

#: What to do when there is no kubeconfig: the flags, or the local cluster of the README.
CONFIG_ADVICE = (
    "use --kubeconfig FILE or set KUBECONFIG; for a local cluster run "
    "krt dev up --detach, then source ~/.krt/dev/env"
)


def _classify(exc: BaseException) -> tuple[ExitCode, str]:
    if isinstance(exc, CommandFailed):
        return exc.code, exc.message
    if isinstance(exc, ConnectionFailed):
        return ExitCode.UNREACHABLE, f"cannot reach the Kubernetes API server: {exc}"
    if isinstance(exc, ApiError):
        failure = describe_api_error(exc)
        return failure.code, failure.message
    if isinstance(exc, KubeError):  # krt.kube.client.ConfigError, or another client-side error
        return (
            ExitCode.UNREACHABLE,
            f"no usable Kubernetes configuration: {exc} ({CONFIG_ADVICE})",
        )
    return ExitCode.INTERRUPTED, "interrupted"
