"""Decode request bodies (JSON) as kube-apiserver's Go decoder would, without crashing.

Python's :func:`json.loads` differs from Go's ``encoding/json`` in ways that reach past
the decoder: it keeps lone UTF-16 surrogates (``"\\ud800"``) that later cannot be encoded
as UTF-8 (the store and every response would fail with a 500), and it recurses once per
nesting level, so a body of ten thousand ``[`` ends in a ``RecursionError``. Go replaces
invalid UTF-8 and lone surrogates with U+FFFD and rejects bodies nested too deeply; this
module does the same, so such bodies are either stored faithfully or refused with a
400, never a 500.

The depth limit (:data:`MAX_DEPTH`) is lower than Go's (10,000) because the stored object
later goes through recursive Python code (copying, merge patches, schema and CEL
validation) that must stay well inside the interpreter's recursion limit; no real
Kubernetes manifest comes near it.
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_DEPTH = 100
"""Deepest accepted nesting of JSON objects and arrays in a request body."""

_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def loads(raw: bytes | str) -> Any:
    """Decode one JSON document from a request body.

    Invalid UTF-8 byte sequences and lone surrogate escapes become U+FFFD, as in Go.

    Args:
        raw: the body (UTF-8 bytes, or already decoded text).

    Returns:
        The decoded value (any JSON type).

    Raises:
        ValueError: not JSON, or nested deeper than :data:`MAX_DEPTH` objects/arrays; the
            message says which.
    """
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
    try:
        value = json.loads(text)
    except RecursionError:
        raise ValueError(_too_deep()) from None
    fix_surrogates = _SURROGATE_ESCAPE.search(text) is not None
    if fix_surrogates or text.count("[") + text.count("{") > MAX_DEPTH:
        value = _checked(value, fix_surrogates=fix_surrogates)
    return value


def _too_deep() -> str:
    return f"exceeded max depth: more than {MAX_DEPTH} nested objects and arrays"


def _clean(text: str) -> str:
    return _LONE_SURROGATE.sub("\ufffd", text)


def _checked(value: Any, *, fix_surrogates: bool) -> Any:
    """Check the nesting depth (iteratively) and replace lone surrogates in strings."""
    if fix_surrogates and isinstance(value, str):
        return _clean(value)
    # containers still to visit, with their depth (1 for the top level)
    pending: list[tuple[Any, int]] = [(value, 1)] if isinstance(value, (dict, list)) else []
    while pending:
        container, depth = pending.pop()
        if depth > MAX_DEPTH:
            raise ValueError(_too_deep())
        if isinstance(container, dict):
            if fix_surrogates and any(_LONE_SURROGATE.search(key) for key in container):
                items = list(container.items())
                container.clear()
                container.update((_clean(key), item) for key, item in items)
            keys: Any = list(container)
        else:
            keys = range(len(container))
        for key in keys:
            item = container[key]
            if isinstance(item, (dict, list)):
                pending.append((item, depth + 1))
            elif fix_surrogates and isinstance(item, str):
                container[key] = _clean(item)
    return value
