"""Pruning: drop fields the schema does not specify, as kube-apiserver does for CRs.

A field survives when its object node lists it in ``properties``, when the node has
``additionalProperties`` (a map), or when the node sets
``x-kubernetes-preserve-unknown-fields: true`` (then unknown fields are kept verbatim and
known ones are still pruned inside). At the object root ``apiVersion``, ``kind`` and
``metadata`` are never pruned (nor pruned inside); in an ``x-kubernetes-embedded-resource`` object neither are
the embedded ``apiVersion``, ``kind`` and ``metadata``. Values of the wrong JSON type are
left for validation to report. The input is never modified: a new value is returned.
"""

from __future__ import annotations

import copy
from typing import Any

from localkube.crd._schema import SchemaNode

ENVELOPE = frozenset({"apiVersion", "kind", "metadata"})


def prune(
    value: Any,
    node: SchemaNode,
    *,
    root: bool = False,
    trusted: frozenset[str] = frozenset(),
    share_envelope: bool = False,
) -> Any:
    """Return a pruned deep copy of ``value`` under ``node``.

    Args:
        value: a JSON value (dicts, lists, str, int, float, bool, None).
        node: the schema node describing ``value``.
        root: whether ``value`` is the whole object (keeps ``apiVersion``/``kind``/``metadata``).
        trusted: properties of ``value`` already pruned under this schema (read-only
            values): shared as they are, not copied.
        share_envelope: with ``root``, share the root's ``apiVersion``, ``kind`` and
            ``metadata`` instead of copying them (the caller keeps the request's own).
    """
    if isinstance(value, dict):
        return _prune_object(
            value,
            node,
            keep_envelope=root or node.embedded,
            trusted=trusted | ENVELOPE if root and share_envelope else trusted,
        )
    if isinstance(value, list):
        if node.items is None:
            return copy.deepcopy(value)
        items = node.items
        return [prune(item, items) if isinstance(item, dict | list) else item for item in value]
    return value


def _prune_object(
    value: dict[str, Any],
    node: SchemaNode,
    *,
    keep_envelope: bool,
    trusted: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    result: dict[str, Any] = {}
    additional = node.additional
    for key, item in value.items():
        child = node.properties.get(key)
        if key in trusted:
            result[key] = item
        elif keep_envelope and key in ENVELOPE:
            result[key] = copy.deepcopy(item)
        elif child is not None:  # (scalars are kept as they are: no call for them)
            result[key] = prune(item, child) if isinstance(item, dict | list) else item
        elif isinstance(additional, SchemaNode):
            result[key] = prune(item, additional) if isinstance(item, dict | list) else item
        elif additional is True or node.preserve_unknown:
            result[key] = copy.deepcopy(item)
    return result
