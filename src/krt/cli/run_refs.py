"""Run names as users paste them: ``NAME``, ``run/NAME``, ``runs/NAME``, ``run.kruntimes.io/NAME``.

``krt get -o name`` and kubectl print ``run.kruntimes.io/NAME``, and kubectl accepts the
``TYPE/NAME`` forms, so every command that takes an existing Run's name (get, describe, logs,
cancel, delete, wait, invoke) goes through :func:`run_name`, which strips a Run prefix and
refuses another kind's (``pod/x`` is not a Run) with one line naming the accepted forms.
"""

from __future__ import annotations

import re
from typing import IO, Any, Final

import click

from krt.api import constants
from krt.cli.exitcodes import ExitCode
from krt.cli.params import check_run_name

#: the resource names kubectl resolves to Runs (singular, plural, short name), lower case.
_RUN_RESOURCES: Final = frozenset(
    {constants.RUN_SINGULAR, constants.RUN_PLURAL, *constants.RUN_SHORT_NAMES}
)
#: ``RESOURCE``, ``RESOURCE.GROUP`` or ``RESOURCE.VERSION.GROUP`` (kubectl's TYPE forms).
_TYPE: Final = re.compile(
    rf"(?P<resource>[^./]+)(?:\.(?:[^./]+\.)?{re.escape(constants.GROUP)})?", re.IGNORECASE
)
ACCEPTED_FORMS: Final = f"NAME, run/NAME, runs/NAME or run.{constants.GROUP}/NAME"


class NotARun(click.UsageError):
    """A reference to another kind of object where a Run was expected (exit 2).

    Shown as one ``error: ...`` line, like the other failures of ``krt``
    (:func:`krt.cli.failures.fail`), without click's usage banner.
    """

    exit_code = int(ExitCode.USAGE)

    def show(self, file: IO[Any] | None = None) -> None:
        """Print ``error: <message>`` on stderr (or ``file``)."""
        click.echo(f"error: {self.format_message()}", file=file, err=file is None)


def run_name(text: str) -> str:
    """Return the Run name in ``text``: bare, or after a Run type prefix.

    Accepted: ``NAME``, ``run/NAME``, ``runs/NAME``, ``krun/NAME`` and each of those
    types qualified by the group (``run.kruntimes.io/NAME``, ``runs.v1alpha1.kruntimes.io/
    NAME``), case-insensitively in the type, as kubectl accepts them.

    Args:
        text: the NAME argument as typed.

    Returns:
        The bare Run name (a valid DNS-1123 subdomain).

    Raises:
        NotARun: ``text`` has a type prefix that is not a Run's (``pod/x``, ``runtime/x``,
            ``run.example.com/x``); exit 2 with one line naming :data:`ACCEPTED_FORMS`.
        click.BadParameter: the name itself is not a valid Kubernetes object name.
    """
    prefix, slash, name = text.partition("/")
    if not slash:
        return _checked(text)
    match = _TYPE.fullmatch(prefix)
    if match is None or match["resource"].lower() not in _RUN_RESOURCES:
        raise NotARun(f"{text!r} is not a Run (NAME argument): give {ACCEPTED_FORMS}")
    return _checked(name)


def _checked(name: str) -> str:
    checked = check_run_name(name)
    assert checked is not None
    return checked
