"""Flag types and checks: every bad value is a usage error (exit 2) naming its flag.

Validation happens before any API call (issue 9): durations use Go's syntax
(:func:`krt.api.durations.parse_duration`), ``--env`` is ``NAME=VALUE`` with a C identifier
name, ``--handler`` is ``module.function`` matching the uploaded ``--file``, and every bound
comes from :mod:`krt.api.limits`, the same constants the CRD enforces, so a request the
CLI lets through is not rejected later for a bound it could have checked.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any, Final, TypeVar

import click

from krt.api.durations import parse_duration
from krt.api.errors import DurationError
from krt.api.limits import (
    DNS_SUBDOMAIN_MAX_CHARS,
    DNS_SUBDOMAIN_PATTERN,
    ENV_ENTRY_OVERHEAD_BYTES,
    ENV_NAME_PATTERN,
    HANDLER_PATTERN,
    MAX_ENV,
    MAX_ENV_NAME_CHARS,
    MAX_ENV_TOTAL_BYTES,
    MAX_ENV_VALUE_CHARS,
    MAX_HANDLER_CHARS,
    MAX_INLINE_SOURCE_CHARS,
    MAX_PATH_CHARS,
)

_ENV_NAME: Final = re.compile(ENV_NAME_PATTERN)
_HANDLER: Final = re.compile(HANDLER_PATTERN)
_NAME: Final = re.compile(DNS_SUBDOMAIN_PATTERN)
F = TypeVar("F", bound=Callable[..., Any])


class Duration(click.ParamType[float, Any]):
    """A Go duration (``90s``, ``5m``, ``1h30m``) converted to seconds (float).

    Args:
        positive: reject ``0`` (``--timeout``); ``--ttl`` and ``--backoff`` allow it, as
            their API fields do.
        max_seconds: the field's largest value in whole seconds (rounded up before the
            check, as the manifest does), or None for Go's own maximum.
    """

    name = "duration"

    def __init__(self, *, positive: bool = True, max_seconds: int | None = None) -> None:
        self.positive = positive
        self.max_seconds = max_seconds

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        """Parse ``value``; a malformed, zero (if positive) or too long duration fails."""
        if isinstance(value, int | float):
            return float(value)
        try:
            seconds = parse_duration(str(value), positive=self.positive)
        except DurationError as exc:
            self.fail(exc.detail, param, ctx)
        if self.max_seconds is not None and math.ceil(seconds) > self.max_seconds:
            self.fail(
                f"{value!r} is longer than the limit of {self.max_seconds} seconds", param, ctx
            )
        return seconds


class EnvVar(click.ParamType[tuple[str, str], Any]):
    """``NAME=VALUE`` for ``--env``: returns ``(name, value)``."""

    name = "NAME=VALUE"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> tuple[str, str]:
        """Split and check one ``--env`` value."""
        if isinstance(value, tuple):
            return value  # type: ignore[return-value]
        text = str(value)
        name, sep, val = text.partition("=")
        if not sep:
            self.fail(f"{text!r} is not NAME=VALUE", param, ctx)
        if not _ENV_NAME.fullmatch(name) or len(name) > MAX_ENV_NAME_CHARS:
            self.fail(
                f"{name!r} is not a valid variable name (letters, digits and '_', not "
                f"starting with a digit, at most {MAX_ENV_NAME_CHARS} characters)",
                param,
                ctx,
            )
        if len(val) > MAX_ENV_VALUE_CHARS:
            self.fail(
                f"the value of {name} has {len(val)} characters, over the limit of "
                f"{MAX_ENV_VALUE_CHARS}",
                param,
                ctx,
            )
        return name, val


def check_env(pairs: tuple[tuple[str, str], ...], flag: str = "--env") -> list[dict[str, str]]:
    """Turn ``--env`` pairs into ``spec.env``; duplicates and too many entries are errors.

    Raises:
        click.BadParameter: a name given twice, more than ``MAX_ENV`` entries, or more than
            ``MAX_ENV_TOTAL_BYTES`` in all (UTF-8 name and value + 2 per variable, as the
            CRD and the Runtime Servers count).
    """
    if len(pairs) > MAX_ENV:
        raise click.BadParameter(
            f"{len(pairs)} variables exceed the limit of {MAX_ENV}", param_hint=f"'{flag}'"
        )
    seen: set[str] = set()
    total = 0
    for name, value in pairs:
        if name in seen:
            raise click.BadParameter(f"{name} is given twice", param_hint=f"'{flag}'")
        seen.add(name)
        total += len(name.encode()) + len(value.encode()) + ENV_ENTRY_OVERHEAD_BYTES
    if total > MAX_ENV_TOTAL_BYTES:
        raise click.BadParameter(
            f"the variables total {total} bytes, over the limit of {MAX_ENV_TOTAL_BYTES} "
            f"(UTF-8 name and value + {ENV_ENTRY_OVERHEAD_BYTES} per variable)",
            param_hint=f"'{flag}'",
        )
    return [{"name": name, "value": value} for name, value in pairs]


def check_run_name(name: str | None) -> str | None:
    """Check a Run name (DNS-1123 subdomain) before sending it.

    Raises:
        click.BadParameter: not a valid Kubernetes object name.
    """
    if name is None:
        return None
    if len(name) > DNS_SUBDOMAIN_MAX_CHARS or not _NAME.fullmatch(name):
        raise click.BadParameter(
            f"{name!r} is not a valid name (lowercase letters, digits, '-' and '.', starting "
            f"and ending with a letter or digit, at most {DNS_SUBDOMAIN_MAX_CHARS} characters)",
            param_hint="'NAME'",
        )
    return name


def read_source(path: Path, flag: str = "--file") -> str:
    """Read an inline source file for ``spec.source.inline``.

    Raises:
        click.BadParameter: unreadable, not UTF-8, or larger than the inline source limit.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise click.BadParameter(f"{path} is not UTF-8 text", param_hint=f"'{flag}'") from None
    except OSError as exc:
        raise click.BadParameter(
            f"cannot read {path}: {exc.strerror}", param_hint=f"'{flag}'"
        ) from None
    if len(text) > MAX_INLINE_SOURCE_CHARS:
        raise click.BadParameter(
            f"{path} has {len(text)} characters, over the inline source limit of "
            f"{MAX_INLINE_SOURCE_CHARS} characters (the CRD's maxLength counts characters, "
            "not bytes)",
            param_hint=f"'{flag}'",
        )
    if len(path.name) > MAX_PATH_CHARS:
        raise click.BadParameter(f"file name of {path} is too long", param_hint=f"'{flag}'")
    return text


def check_handler(handler: str, *, file: Path, source: str) -> str:
    """Check ``--handler`` against the file it must live in (the usual mistake, caught early).

    The file is uploaded as ``spec.source.inlinePath`` = its base name, so the handler's
    module part (everything before the last dot) must be that name without its extension:
    ``--file main.py`` needs ``--handler main.<function>``. For a ``.py`` file the function
    must also be defined at the top level; for a ``.sh`` file, declared as a bash function.

    Args:
        handler: the ``--handler`` value.
        file: the ``--file`` path.
        source: its text.

    Returns:
        ``handler`` unchanged.

    Raises:
        click.BadParameter: the shape is not ``module.function``, the module does not match
            the file, the function is missing, or a Python file does not parse.
    """
    hint = "'--handler'"
    if len(handler) > MAX_HANDLER_CHARS or not _HANDLER.fullmatch(handler):
        raise click.BadParameter(
            f"{handler!r} must be module.function, e.g. main.invoke", param_hint=hint
        )
    module, _, function = handler.rpartition(".")
    stem = PurePosixPath(file.name).stem
    if module != stem:
        raise click.BadParameter(
            f"{handler!r} names module {module!r}, but --file {file.name} is module {stem!r} "
            f"(use --handler {stem}.{function})",
            param_hint=hint,
        )
    if file.suffix == ".py":
        try:
            tree = ast.parse(source, filename=file.name)
        except SyntaxError as exc:
            raise click.BadParameter(
                f"{file.name} does not parse: {exc.msg} (line {exc.lineno})",
                param_hint="'--file'",
            ) from None
        defined = {
            node.name
            for node in tree.body
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        } | {
            target.id
            for node in tree.body
            if isinstance(node, ast.Assign)
            for target in node.targets
            if isinstance(target, ast.Name)
        }
        if function not in defined:
            known = ", ".join(sorted(defined)) or "none"
            raise click.BadParameter(
                f"{file.name} defines no top-level function {function!r} "
                f"(top-level functions: {known})",
                param_hint=hint,
            )
    elif file.suffix == ".sh":
        name = re.escape(function)
        declared = re.compile(rf"^\s*(function\s+{name}\b|{name}\s*\(\s*\))", re.MULTILINE)
        if not declared.search(source):
            raise click.BadParameter(
                f"{file.name} declares no bash function {function!r}", param_hint=hint
            )
    return handler


def output_option(*formats: str, default: str = "table") -> Callable[[F], F]:
    """``-o/--output`` restricted to ``formats`` (values of :class:`~krt.cli.printing.OutputFormat`)."""
    return click.option(
        "-o",
        "--output",
        type=click.Choice(formats),
        default=default,
        show_default=True,
        help="Output format.",
    )
