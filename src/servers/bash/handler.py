"""Bash function handlers: the ``file.function`` shape (seed 002, "Built-in Runtime Requirements").

A Bash handler follows the AWS Lambda custom-runtime model: ``lib/greet.hello`` names the
function ``hello`` defined in ``lib/greet.sh`` beneath the registered working directory. The
handler is split at its last dot, so ``my.tools.run`` is function ``run`` in ``my.tools.sh``.

The shape is checked here, before any process starts, so a malformed handler is an
INVALID_ARGUMENT with a specific reason. Function names are restricted to the portable shell
name ``[A-Za-z_][A-Za-z0-9_]*``: bash itself accepts more (``-``, ``:``, ``.``), but such a
name could be read as an option or split ambiguously, and the handler string is only ever
passed to the worker as an argv element, never as shell source.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath

from servers.common import limits

#: longest handler accepted, in UTF-8 bytes (the shared bound of every Runtime Server).
MAX_HANDLER_BYTES = limits.MAX_HANDLER_BYTES

_FUNCTION_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True)
class BashHandler:
    """A well-formed Bash handler.

    Attributes:
        script: the ``.sh`` file, relative to the working directory (no ``..``, not absolute).
        function: the bash function to call, matching ``[A-Za-z_][A-Za-z0-9_]*``.
    """

    script: PurePosixPath
    function: str


class HandlerError(ValueError):
    """A handler string that is not ``file.function``; the message says which part is wrong."""


def parse_handler(handler: str) -> BashHandler:
    """Split and check a ``file.function`` handler.

    Args:
        handler: e.g. ``greet.hello`` (function ``hello`` in ``greet.sh``) or
            ``lib/greet.hello``; at most 1024 UTF-8 bytes.

    Returns:
        The script path (with ``.sh`` appended) and the function name.

    Raises:
        HandlerError: empty or too long, control characters, no dot, an invalid function
            name, an empty, absolute or ``..``-containing file part, or empty path
            components (``a//b``, trailing ``/``).
    """
    if not handler:
        raise HandlerError("handler is empty; expected file.function, e.g. greet.hello")
    size = len(handler.encode("utf-8", errors="surrogatepass"))
    if size > MAX_HANDLER_BYTES:
        raise HandlerError(f"handler is {size} bytes; the limit is {MAX_HANDLER_BYTES} bytes")
    if _CONTROL_RE.search(handler):
        raise HandlerError(f"handler {handler!r} contains a control character")
    file_part, dot, function = handler.rpartition(".")
    if not dot:
        raise HandlerError(
            f"handler {handler!r} has no '.'; expected file.function, e.g. greet.hello"
        )
    if not _FUNCTION_NAME_RE.fullmatch(function):
        raise HandlerError(
            f"handler {handler!r}: function name {function!r} is not a valid bash function"
            " name ([A-Za-z_][A-Za-z0-9_]*)"
        )
    if not file_part:
        raise HandlerError(f"handler {handler!r} has an empty file part before the '.'")
    if file_part.startswith("/"):
        raise HandlerError(
            f"handler {handler!r}: file part must be relative to the working directory"
        )
    components = file_part.split("/")
    if "" in components:
        raise HandlerError(f"handler {handler!r}: file part has an empty path component")
    if ".." in components:
        raise HandlerError(f"handler {handler!r}: file part must not contain '..'")
    return BashHandler(script=PurePosixPath(file_part + ".sh"), function=function)


def handler_error(handler: str) -> str | None:
    """Return why ``handler`` is malformed, or None when it is a valid ``file.function``."""
    try:
        parse_handler(handler)
    except HandlerError as exc:
        return str(exc)
    return None
