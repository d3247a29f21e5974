"""ClusterRole aggregation (``aggregationRule.clusterRoleSelectors``), evaluated on read.

In Kubernetes a controller rewrites the ``rules`` of every ClusterRole that has an
``aggregationRule`` to the union of the rules of the ClusterRoles its label selectors
match; roles that are themselves aggregated contribute their aggregated rules, so the
result is transitive (``admin`` gets ``edit`` gets ``view``). localkube runs that
controller too (:mod:`localkube.controllers.clusterrole_aggregation`, which stores the
union in ``rules``), but the authorizer does not wait for it: :func:`effective_rules`
computes the same union whenever access is checked, so a new ``aggregate-to-*`` role takes
effect immediately.

Like the Kubernetes controller, an aggregated role's own ``rules`` are ignored (the
controller would overwrite them), the union keeps the first occurrence of each distinct
rule, and source roles are visited in name order.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from localkube.selectors import SelectorError, label_selector_from_dict

__all__ = ["SelectorError", "aggregated_rules", "effective_rules"]


def _labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping):
        return {}
    labels = metadata.get("labels")
    return labels if isinstance(labels, Mapping) else {}


def _selectors(role: Mapping[str, Any]) -> list[Mapping[str, Any]] | None:
    """Return the role's ``clusterRoleSelectors`` or None if it is not aggregated."""
    rule = role.get("aggregationRule")
    if not isinstance(rule, Mapping):
        return None
    selectors = rule.get("clusterRoleSelectors") or []
    if not isinstance(selectors, list):
        raise SelectorError("aggregationRule.clusterRoleSelectors must be a list")
    return [s for s in selectors if isinstance(s, Mapping)]


def _own_rules(role: Mapping[str, Any]) -> list[dict[str, Any]]:
    rules = role.get("rules")
    if not isinstance(rules, list):
        return []
    return [r for r in rules if isinstance(r, dict)]


def _name(role: Mapping[str, Any]) -> str:
    metadata = role.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    return name if isinstance(name, str) else ""


def effective_rules(
    role: Mapping[str, Any],
    cluster_roles: Mapping[str, Mapping[str, Any]],
    *,
    _visiting: frozenset[str] = frozenset(),
) -> list[dict[str, Any]]:
    """Return the rules a ClusterRole grants, with aggregation applied transitively.

    Args:
        role: a ClusterRole object dict.
        cluster_roles: every ClusterRole by name (the role itself may be among them).
        _visiting: internal cycle guard.

    Returns:
        ``role["rules"]`` for a plain role; for an aggregated role the de-duplicated union
        of the effective rules of every other ClusterRole matched by any selector. Cycles
        (A aggregates B aggregates A) contribute each role's rules once.

    Raises:
        SelectorError: a selector is malformed.
    """
    selectors = _selectors(role)
    if selectors is None:
        return _own_rules(role)
    name = _name(role)
    visiting = _visiting | {name}
    union: list[dict[str, Any]] = []
    for other_name in sorted(cluster_roles):
        if other_name in visiting:
            continue
        other = cluster_roles[other_name]
        labels = _labels(other)
        if not any(label_selector_from_dict(sel).matches(labels) for sel in selectors):
            continue
        for rule in effective_rules(other, cluster_roles, _visiting=visiting):
            if rule not in union:
                union.append(rule)
    return union


def aggregated_rules(
    role: Mapping[str, Any], cluster_roles: list[dict[str, Any]]
) -> list[dict[str, Any]] | None:
    """Return what the Kubernetes aggregation controller would store in ``role["rules"]``.

    Args:
        role: a ClusterRole object dict.
        cluster_roles: all ClusterRoles (list of object dicts).

    Returns:
        The union of matched roles' rules, or None when ``role`` has no aggregationRule
        (its rules are its own).

    Raises:
        SelectorError: a selector is malformed.
    """
    if _selectors(role) is None:
        return None
    by_name = {_name(r): r for r in cluster_roles}
    return effective_rules(role, by_name)
