"""Turn JSON values into cel-python values the way Kubernetes types them for CEL.

The schema decides the CEL type, not the JSON token: ``type: number`` is always a double
(``1`` included), ``integer`` an int64, ``x-kubernetes-int-or-string`` an int or a string,
strings with ``format: byte`` are bytes, ``duration`` a duration and ``date``/``date-time``
timestamps. Objects with declared ``properties`` expose only those properties, under
Kubernetes' escaped names (``__dash__`` for ``-``, ``__dot__`` for ``.``, ``__slash__`` for
``/``, ``__underscores__`` for ``__``, ``__{keyword}__`` for CEL reserved words); maps
(``additionalProperties``) keep their keys as they are.
"""

from __future__ import annotations

import base64
import re
from typing import Any

from celpy import celtypes

from localkube.crd._schema import SchemaNode

RESERVED = frozenset(
    {
        "true",
        "false",
        "null",
        "in",
        "as",
        "break",
        "const",
        "continue",
        "else",
        "for",
        "function",
        "if",
        "import",
        "let",
        "loop",
        "package",
        "namespace",
        "return",
        "var",
        "void",
        "while",
    }
)
_ACCESSIBLE = re.compile(r"^[a-zA-Z_.\-/][a-zA-Z0-9_.\-/]*$")
ROOT_KEYS = ("apiVersion", "kind")
METADATA_KEYS = ("name", "generateName")


def escape_property(name: str) -> str | None:
    """Return the CEL name of property ``name``, or None when CEL cannot access it."""
    if name in RESERVED:
        return f"__{name}__"
    if not _ACCESSIBLE.match(name):
        return None
    return (
        name.replace("__", "__underscores__")
        .replace(".", "__dot__")
        .replace("-", "__dash__")
        .replace("/", "__slash__")
    )


Memo = dict[tuple[int, int, bool], Any]


def to_cel(
    value: Any, node: SchemaNode | None, *, root: bool = False, memo: Memo | None = None
) -> Any:
    """Convert a JSON value described by ``node`` into a cel-python value.

    Args:
        value: a validated JSON value.
        node: its schema node (None for values without a schema: converted by JSON type).
        root: whether ``value`` is the object root (exposes ``apiVersion``, ``kind`` and
            ``metadata.name``/``generateName`` as Kubernetes does).
        memo: a cache shared by the conversions of one admission, so that nested rules
            reuse the values converted for an enclosing rule. Only valid while the
            converted objects are alive and unchanged.
    """
    if memo is not None and isinstance(value, dict | list):
        key = (id(value), id(node), root)
        cached = memo.get(key)
        if cached is None:
            cached = memo[key] = _convert(value, node, root, memo)
        return cached
    return _convert(value, node, root, memo)


def to_cel_fields(
    value: dict[str, Any], node: SchemaNode, keys: tuple[str, ...], *, memo: Memo | None = None
) -> Any:
    """Convert only the properties ``keys`` of the object ``value`` (never an object root).

    The result is what :func:`to_cel` gives for ``value`` with every other property
    removed: enough for a rule that reads only those fields, at a fraction of the cost.

    Args:
        value: an object (not the root and not an embedded resource).
        node: its schema node.
        keys: JSON property names to convert; those absent from ``value`` are skipped.
        memo: as for :func:`to_cel` (used for the selected values).
    """
    return _object({k: value[k] for k in keys if k in value}, node, root=False, memo=memo)


def _convert(value: Any, node: SchemaNode | None, root: bool, memo: Memo | None) -> Any:
    if value is None:
        return None
    if isinstance(value, bool):
        return celtypes.BoolType(value)
    if isinstance(value, int):
        if node is not None and node.type == "number":
            return celtypes.DoubleType(value)
        if -(2**63) <= value < 2**63:
            return celtypes.IntType(value)
        return celtypes.DoubleType(value)
    if isinstance(value, float):
        return celtypes.DoubleType(value)
    if isinstance(value, str):
        return _string(value, node)
    if isinstance(value, list):
        items = node.items if node is not None else None
        return celtypes.ListType([to_cel(item, items, memo=memo) for item in value])
    if isinstance(value, dict):
        return _object(value, node, root=root, memo=memo)
    raise TypeError(f"not a JSON value: {type(value).__name__}")


def _string(value: str, node: SchemaNode | None) -> Any:
    fmt = node.format if node is not None and node.type == "string" else None
    try:
        if fmt == "byte":
            return celtypes.BytesType(base64.b64decode(value, validate=True))
        if fmt == "duration":
            return celtypes.DurationType(value)
        if fmt in ("date", "date-time"):
            text = f"{value}T00:00:00Z" if fmt == "date" else value
            return celtypes.TimestampType(text)
    except Exception:  # a malformed value stays a string; validation reports the format
        return celtypes.StringType(value)
    return celtypes.StringType(value)


def _object(
    value: dict[str, Any], node: SchemaNode | None, *, root: bool, memo: Memo | None
) -> Any:
    result: dict[Any, Any] = {}
    if node is not None and node.properties:
        for key, child in node.properties.items():
            if key in value and not (root and key in ("metadata", *ROOT_KEYS)):
                name = escape_property(key)
                if name is not None:
                    result[celtypes.StringType(name)] = to_cel(value[key], child, memo=memo)
        if root or node.embedded:
            for key in ROOT_KEYS:
                if key in value:
                    result[celtypes.StringType(key)] = to_cel(value[key], None)
            metadata = value.get("metadata")
            if isinstance(metadata, dict):
                result[celtypes.StringType("metadata")] = to_cel(
                    {k: metadata[k] for k in METADATA_KEYS if k in metadata}, None
                )
        return _map(result)
    additional = (
        node.additional if node is not None and isinstance(node.additional, SchemaNode) else None
    )
    for key, item in value.items():
        result[celtypes.StringType(key)] = to_cel(item, additional, memo=memo)
    return _map(result)


def _map(items: dict[Any, Any]) -> Any:
    """Build a cel-python map without MapType's slow per-item type checks."""
    result = celtypes.MapType()
    dict.update(result, items)
    return result
