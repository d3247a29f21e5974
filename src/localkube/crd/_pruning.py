"""Pruning: drop fields the schema does not specify, as kube-apiserver does for CRs.

A field survives when its object node lists it in ``properties``, when the node has
``additionalProperties`` (a map), or when the node sets
``x-kubernetes-preserve-unknown-fields: true`` (then unknown fields are kept verbatim and
known ones are still pruned inside). At the object root ``apiVersion``, ``kind`` and
``metadata`` are never pruned (nor pruned inside); in an ``x-kubernetes-embedded-resource`` object neither are
the embedded ``apiVersion``, ``kind`` and ``metadata``. Values of the wrong JSON type are
left for validation to report. The input is never modified: a new value is returned.

With ``drop_nulls`` pruning also drops what defaulting would drop later, a ``null``
property or map value whose schema is neither ``nullable`` nor has a ``default``, so
admission's defaulting pass need not walk subtrees without defaults
(:attr:`SchemaNode.defaulting_below`).
"""

from __future__ import annotations

import copy
from typing import Any

from localkube.crd._schema import SchemaNode

ENVELOPE = frozenset({"apiVersion", "kind", "metadata"})
_CONTAINERS = (dict, list)


def prune(
    value: Any,
    node: SchemaNode,
    *,
    root: bool = False,
    trusted: frozenset[str] = frozenset(),
    share_envelope: bool = False,
    drop_nulls: bool = False,
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
        drop_nulls: also drop ``null`` properties and map values whose schema is not
            ``nullable`` and has no ``default`` (defaulting's null pruning, done here).
    """
    if isinstance(value, dict):
        return _prune_object(
            value,
            node,
            keep_envelope=root or node.embedded,
            trusted=trusted | ENVELOPE if root and share_envelope else trusted,
            drop_nulls=drop_nulls,
        )
    if isinstance(value, list):
        if node.items is None:
            return copy.deepcopy(value)
        items = node.items
        return [
            prune(item, items, drop_nulls=drop_nulls) if isinstance(item, _CONTAINERS) else item
            for item in value
        ]
    return value


def _prune_object(
    value: dict[str, Any],
    node: SchemaNode,
    *,
    keep_envelope: bool,
    trusted: frozenset[str] = frozenset(),
    drop_nulls: bool = False,
) -> dict[str, Any]:
    result: dict[str, Any] = {}
    properties = node.properties
    additional = node.additional
    extra = additional if isinstance(additional, SchemaNode) else None
    keep_unknown = additional is True or node.preserve_unknown
    special = bool(trusted) or keep_envelope
    for key, item in value.items():
        if special:
            if key in trusted:
                result[key] = item
                continue
            if keep_envelope and key in ENVELOPE:
                result[key] = copy.deepcopy(item)
                continue
        child = properties.get(key, extra)
        if child is not None:  # (scalars are kept as they are: no call for them)
            if isinstance(item, _CONTAINERS):
                result[key] = prune(item, child, drop_nulls=drop_nulls)
            elif item is not None or not drop_nulls or child.nullable or child.has_default:
                result[key] = item
        elif keep_unknown:
            result[key] = copy.deepcopy(item)
    return result
