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


class SelectorError(ValueError):
    """A ``clusterRoleSelectors`` entry is not a valid LabelSelector."""


def _labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping):
        return {}
    labels = metadata.get("labels")
    return labels if isinstance(labels, Mapping) else {}


def label_selector_matches(selector: Mapping[str, Any], labels: Mapping[str, Any]) -> bool:
    """Return whether a structured ``metav1.LabelSelector`` matches ``labels``.

    Args:
        selector: ``{"matchLabels": {k: v}, "matchExpressions": [{key, operator, values}]}``;
            operators ``In``, ``NotIn``, ``Exists``, ``DoesNotExist``. An empty selector
            matches every object (Kubernetes ``LabelSelectorAsSelector``).
        labels: the object's ``metadata.labels``.

    Raises:
        SelectorError: a malformed selector (unknown operator, ``values`` missing for
            ``In``/``NotIn`` or present for ``Exists``/``DoesNotExist``, wrong types).
    """
    match_labels = selector.get("matchLabels") or {}
    if not isinstance(match_labels, Mapping):
        raise SelectorError("matchLabels must be an object of string values")
    for key, value in match_labels.items():
        if labels.get(key) != value:
            return False
    expressions = selector.get("matchExpressions") or []
    if not isinstance(expressions, list):
        raise SelectorError("matchExpressions must be a list")
    for index, expression in enumerate(expressions):
        if not isinstance(expression, Mapping):
            raise SelectorError(f"matchExpressions[{index}] must be an object")
        key = expression.get("key")
        operator = expression.get("operator")
        values = expression.get("values") or []
        if not isinstance(key, str) or not isinstance(values, list):
            raise SelectorError(f"matchExpressions[{index}]: key must be a string, values a list")
        if operator in ("In", "NotIn"):
            if not values:
                raise SelectorError(
                    f"matchExpressions[{index}].values: must be non-empty for operator {operator}"
                )
            present = key in labels and labels[key] in values
            if present != (operator == "In"):
                return False
        elif operator in ("Exists", "DoesNotExist"):
            if values:
                raise SelectorError(
                    f"matchExpressions[{index}].values: must be empty for operator {operator}"
                )
            if (key in labels) != (operator == "Exists"):
                return False
        else:
            raise SelectorError(f"matchExpressions[{index}].operator: {operator!r} is not valid")
    return True


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
        if not any(label_selector_matches(sel, labels) for sel in selectors):
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
