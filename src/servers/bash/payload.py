"""What a Bash function accepts as input and how its stdout is labelled (seed 002).

Input: the payload reaches the function as ONE positional argument, byte for byte. A bash
variable cannot hold a NUL byte, so a payload containing one is refused (INVALID_ARGUMENT)
rather than silently cut. This costs nothing for JSON, the gateway's encoding: a JSON text
never contains a raw NUL (a NUL inside a string is written ``\\u0000``, and JSON allows no
control character outside strings). A payload labelled ``application/json`` or ``*+json``,
or carrying no content type (JSON by default), must also parse as strict JSON (UTF-8, no
``NaN``/``Infinity``), as the Python server requires. Other content types are passed
through unparsed.

Output: the function's stdout, unchanged. It is labelled ``application/json`` when it parses
as JSON (surrounding whitespace such as ``echo``'s newline allowed), else
``text/plain; charset=utf-8`` when it is UTF-8 text, else ``application/octet-stream`` (the
label must not claim UTF-8 for bytes that are not).
"""

from __future__ import annotations

import json
from typing import Final

from servers.common import limits
from servers.common.adapter import InvalidInput
from servers.common.validation import is_json_media_type

JSON_CONTENT_TYPE: Final = "application/json"
TEXT_CONTENT_TYPE: Final = "text/plain; charset=utf-8"
BINARY_CONTENT_TYPE: Final = "application/octet-stream"

#: largest payload accepted, in bytes (the gateway's request limit, seed 000 "Invoke Contract").
MAX_INPUT_BYTES: Final = limits.MAX_INVOKE_INPUT_BYTES


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not valid JSON")


def _parse_json(data: bytes) -> None:
    """Parse ``data`` as strict JSON; raise ValueError (incl. UnicodeDecodeError) if it is not."""
    text = data.decode("utf-8")
    try:
        json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise ValueError("JSON nesting is too deep to parse") from None


def check_input(payload: bytes, *, content_type: str) -> None:
    """Check that ``payload`` can be handed to a bash function intact.

    Args:
        payload: the invocation input, at most 1 MiB (1048576 bytes).
        content_type: the request's content type; JSON (or empty) payloads must parse.

    Raises:
        InvalidInput: too large, contains a NUL byte, or labelled JSON but not valid JSON.
    """
    if len(payload) > MAX_INPUT_BYTES:
        raise InvalidInput(f"input is {len(payload)} bytes; the limit is {MAX_INPUT_BYTES} bytes")
    nul = payload.find(b"\x00")
    if nul >= 0:
        raise InvalidInput(
            f"input contains a NUL byte at offset {nul}; a bash function argument cannot hold"
            " one (JSON writes it as \\u0000)"
        )
    if is_json_media_type(content_type):
        try:
            _parse_json(payload)
        except ValueError as exc:
            raise InvalidInput(f"input is not valid JSON: {exc}") from None


def output_content_type(output: bytes) -> str:
    """Return the content type of a function's stdout (see the module docstring)."""
    try:
        _parse_json(output)
    except UnicodeDecodeError:
        return BINARY_CONTENT_TYPE
    except ValueError:
        return TEXT_CONTENT_TYPE
    return JSON_CONTENT_TYPE
