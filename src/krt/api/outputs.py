"""Bounded outputs: the one validator for runtimed (task outputs) and the Runtime Servers.

runtimed checks a task's outputs with it, the Runtime Servers a function invocation's.

Seed 000, Invoke Contract, and issue 6: keys match ``[A-Za-z0-9_.-]{1,63}``; at most 64
entries; each value at most 4 KiB and all entries together at most 16 KiB, counted in UTF-8
bytes (a key's and its value's bytes both count toward the total). A violation names the key
and the bound, and the caller turns it into a failure (``OutputsInvalid``) rather than storing
a partial set.

A task writes outputs as ``KEY=VALUE`` lines to the file named by ``$KRUNTIME_OUTPUTS``;
:func:`parse_outputs_file` reads that format (the value is everything after the first ``=``;
empty lines and lines starting with ``#`` are skipped; a repeated key keeps its last value,
so a task may update an output by appending). The file itself may be at most
:data:`MAX_OUTPUTS_FILE_BYTES` (1 MiB), comments and superseded lines included.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Final

from krt.api.errors import OutputsError
from krt.api.limits import (
    MAX_OUTPUT_VALUE_BYTES,
    MAX_OUTPUTS,
    MAX_OUTPUTS_TOTAL_BYTES,
    OUTPUT_KEY_PATTERN,
)

_KEY: Final = re.compile(OUTPUT_KEY_PATTERN)
#: Bytes of the outputs file read at most (1 MiB): it may hold comments and values a task
#: superseded by appending, so it is bounded well above the outputs themselves, but bounded.
MAX_OUTPUTS_FILE_BYTES: Final = 1024 * 1024
#: Files up to this size are split into a list of lines at once (fastest); larger ones are
#: walked line by line, so many short lines never cost tens of bytes each at once.
_SPLIT_BYTES: Final = 64 * 1024


def validate_outputs(outputs: Mapping[str, str]) -> dict[str, str]:
    """Check outputs against every bound and return them as a plain dict.

    Args:
        outputs: key -> value (strings).

    Returns:
        A new ``dict`` with the same entries.

    Raises:
        OutputsError: the first violation found, naming the key (``None`` for the count) and
            the bound: ``key-pattern``, ``max-keys``, ``max-value-bytes`` or
            ``max-total-bytes``; a non-string value is reported as ``value-type``.
    """
    if len(outputs) > MAX_OUTPUTS:
        raise OutputsError(
            f"{len(outputs)} outputs exceed the limit of {MAX_OUTPUTS} keys",
            key=None,
            bound="max-keys",
        )
    total = 0
    for key, value in outputs.items():
        if not isinstance(key, str) or not _KEY.fullmatch(key):
            raise OutputsError(
                f"output key {key!r} must match {OUTPUT_KEY_PATTERN}",
                key=str(key),
                bound="key-pattern",
            )
        if not isinstance(value, str):
            raise OutputsError(
                f"output {key!r} must be a string, got {type(value).__name__}",
                key=key,
                bound="value-type",
            )
        size = len(value.encode("utf-8"))
        if size > MAX_OUTPUT_VALUE_BYTES:
            raise OutputsError(
                f"output {key!r} is {size} bytes, over the limit of {MAX_OUTPUT_VALUE_BYTES} "
                "bytes per value",
                key=key,
                bound="max-value-bytes",
            )
        total += len(key.encode("utf-8")) + size
        if total > MAX_OUTPUTS_TOTAL_BYTES:
            raise OutputsError(
                f"outputs exceed the limit of {MAX_OUTPUTS_TOTAL_BYTES} bytes in total "
                f"(reached at key {key!r})",
                key=key,
                bound="max-total-bytes",
            )
    return dict(outputs)


def parse_outputs_file(data: bytes) -> dict[str, str]:
    """Parse and validate the ``KEY=VALUE`` lines a task wrote to ``$KRUNTIME_OUTPUTS``.

    Args:
        data: the file's bytes (UTF-8). A final line without a newline counts; ``\\r\\n`` line
            ends are accepted.

    Returns:
        The validated outputs.

    Raises:
        OutputsError: the file is larger than :data:`MAX_OUTPUTS_FILE_BYTES` (bound
            ``max-file-bytes``), not UTF-8 (``encoding``), has a line without ``=``
            (``line-syntax``, naming the line number), or breaks a bound of
            :func:`validate_outputs`.
    """
    if len(data) > MAX_OUTPUTS_FILE_BYTES:
        raise OutputsError(
            f"the outputs file is larger than its limit of {MAX_OUTPUTS_FILE_BYTES} bytes "
            "(1 MiB): write each key once, or truncate the file before rewriting it "
            "(> instead of >>) instead of appending many updates",
            key=None,
            bound="max-file-bytes",
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise OutputsError(
            f"outputs file is not UTF-8 (byte {error.start})", key=None, bound="encoding"
        ) from None
    outputs: dict[str, str] = {}
    # a small file (the usual case) is split at once; a large one line by line
    lines = text.split("\n") if len(data) <= _SPLIT_BYTES else _lines(text)
    for number, raw_line in enumerate(lines, start=1):
        line = raw_line.removesuffix("\r")
        if not line.strip() or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise OutputsError(
                f"outputs file line {number} is not KEY=VALUE: {line[:80]!r}",
                key=None,
                bound="line-syntax",
            )
        outputs.pop(key, None)  # a repeated key moves to the end with its newest value
        outputs[key] = value
    return validate_outputs(outputs)


def _lines(text: str) -> Iterator[str]:
    """The ``\n``-separated lines of ``text``, one at a time (like ``split``, without a list).

    A file of many short lines (up to :data:`MAX_OUTPUTS_FILE_BYTES`) is not held as a list
    of line objects, which would cost tens of bytes per line.
    """
    start = 0
    while (end := text.find("\n", start)) >= 0:
        yield text[start:end]
        start = end + 1
    yield text[start:]
