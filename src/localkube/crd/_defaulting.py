"""Defaulting and null handling for custom resources, in kube-apiserver's order.

For every object node: a property that is missing, or ``null`` while its schema is not
``nullable``, gets a deep copy of the property's ``default``; then every present value is
defaulted recursively (so defaults inside a freshly defaulted object, inside existing
nested objects, map values and array items all apply). Finally a ``null`` property or map
value whose schema is not nullable and has no default is dropped, as Kubernetes prunes
such nulls before validation (a required field then reports ``Required value``).
Defaults are applied in place on the already-copied object produced by pruning. When
pruning already dropped those nulls (``prune(drop_nulls=True)``), ``nulls_dropped`` skips
every subtree without a default (:attr:`SchemaNode.defaulting_below`): for most status
writes the whole pass is then one check.
"""

from __future__ import annotations

import copy
from typing import Any

from localkube.crd._schema import SchemaNode

ENVELOPE = frozenset({"apiVersion", "kind", "metadata"})
_CONTAINERS = (dict, list)


def apply_defaults(
    value: Any,
    node: SchemaNode,
    *,
    root: bool = False,
    trusted: frozenset[str] = frozenset(),
    nulls_dropped: bool = False,
) -> None:
    """Apply defaults below ``value`` (a dict or list) in place; scalars are left alone.

    Args:
        value: the pruned copy of the object or one of its parts.
        node: the schema node for ``value``.
        root: whether ``value`` is the whole object (``apiVersion``, ``kind`` and
            ``metadata`` are then left alone).
        trusted: properties of ``value`` already defaulted under this schema (read-only
            values): left alone.
        nulls_dropped: ``value`` was pruned with ``drop_nulls``; subtrees without defaults
            are then left alone.
    """
    if nulls_dropped and not node.defaulting_below:
        return
    if isinstance(value, dict):
        _default_object(
            value,
            node,
            skip=(ENVELOPE if root else frozenset()) | trusted,
            nulls_dropped=nulls_dropped,
        )
    elif isinstance(value, list) and node.items is not None:
        items = node.items
        for index, item in enumerate(value):
            if item is None and items.has_default and not items.nullable:
                value[index] = copy.deepcopy(items.default)
            apply_defaults(value[index], items, nulls_dropped=nulls_dropped)


def _default_object(
    value: dict[str, Any], node: SchemaNode, *, skip: frozenset[str], nulls_dropped: bool
) -> None:
    defaulted = node.defaulted_properties
    if defaulted is None:
        defaulted = node.defaulted_properties = tuple(
            (key, child) for key, child in node.properties.items() if child.has_default
        )
    for key, child in defaulted:
        if key in skip:
            continue
        if key not in value or (value[key] is None and not child.nullable):
            value[key] = copy.deepcopy(child.default)
    additional = node.additional if isinstance(node.additional, SchemaNode) else None
    for key in list(value):
        if key in skip:
            continue
        child_node = node.properties.get(key, additional)
        if child_node is None:
            continue
        # an embedded resource's envelope was copied verbatim by pruning: walk it fully
        dropped = nulls_dropped and not (node.embedded and key in ENVELOPE)
        if dropped and not child_node.defaulting_below:
            continue
        item = value[key]
        if item is None:
            if child_node.has_default and not child_node.nullable:
                value[key] = copy.deepcopy(child_node.default)
            elif not child_node.nullable:
                del value[key]
                continue
        item = value[key]
        if isinstance(item, _CONTAINERS):
            apply_defaults(item, child_node, nulls_dropped=dropped)
