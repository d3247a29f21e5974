"""Validation of Roles and ClusterRoles (pure functions), as kube-apiserver's.

Implements ``ValidateRole`` / ``ValidateClusterRole`` of Kubernetes
``pkg/apis/rbac/validation`` with its field paths and wording (the ObjectMeta part is
:mod:`localkube.objects`'s):

* every rule (``rules[i]``, ``validatePolicyRule``): ``verbs`` required; a rule with
  ``nonResourceURLs`` may not name API groups, resources or resource names, and a Role's
  rules may not have ``nonResourceURLs`` at all; a resource rule needs ``apiGroups`` and
  ``resources``; ``resourceNames`` only with a single resource;
* a ClusterRole's ``aggregationRule``: ``clusterRoleSelectors`` required (non-empty), and
  each selector a valid label selector (``ValidateLabelSelector``: label syntax of
  ``matchLabels``; each expression's operator ``In``, ``NotIn``, ``Exists`` or
  ``DoesNotExist``, ``values`` given exactly for ``In``/``NotIn``, key and values of label
  syntax), followed, for a selector with any such error, by ``Invalid value: "null":
  invalid label selector.`` (the selector did not convert).

Shapes are already checked by decoding (:mod:`localkube.builtin_types`): lists of strings,
selectors of the right JSON types. On update the same rules apply (kube relaxes label
values in selectors an old object already had; localkube does not: a simplification).
"""

from __future__ import annotations

import json
from typing import Any

from localkube import label_rules
from localkube.errors import FieldError


def _quote(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _go_strings(values: list[str]) -> str:
    return "[]string{" + ", ".join(_quote(v) for v in values) + "}"


def _required(field: str, detail: str) -> FieldError:
    return FieldError(field, "FieldValueRequired", f"Required value: {detail}")


def policy_rule_errors(rule: Any, *, namespaced: bool, path: str) -> list[FieldError]:
    """Return the errors of one PolicyRule (``validatePolicyRule``).

    Args:
        rule: the rule object (``None`` decodes to an empty rule).
        namespaced: True for a Role's rule (no ``nonResourceURLs`` allowed).
        path: the rule's field path (``rules[0]``).
    """
    rule = rule or {}
    errors: list[FieldError] = []
    if not rule.get("verbs"):
        errors.append(_required(f"{path}.verbs", "verbs must contain at least one value"))
    urls = rule.get("nonResourceURLs") or []
    if urls:
        shown = _go_strings(urls)
        if namespaced:
            errors.append(
                FieldError(
                    f"{path}.nonResourceURLs",
                    "FieldValueInvalid",
                    f"Invalid value: {shown}: namespaced rules cannot apply to non-resource URLs",
                )
            )
        if rule.get("apiGroups") or rule.get("resources") or rule.get("resourceNames"):
            errors.append(
                FieldError(
                    f"{path}.nonResourceURLs",
                    "FieldValueInvalid",
                    f"Invalid value: {shown}: rules cannot apply to both regular resources "
                    "and non-resource URLs",
                )
            )
        return errors
    if not rule.get("apiGroups"):
        errors.append(
            _required(f"{path}.apiGroups", "resource rules must supply at least one api group")
        )
    resources = rule.get("resources") or []
    if not resources:
        errors.append(
            _required(f"{path}.resources", "resource rules must supply at least one resource")
        )
    if rule.get("resourceNames") and len(resources) > 1:
        errors.append(
            _required(f"{path}.resourceNames", "resource names cannot apply to multiple resources")
        )
    return errors


def _requirement_errors(expression: Any, path: str) -> list[FieldError]:
    expression = expression or {}
    errors: list[FieldError] = []
    operator = expression.get("operator") or ""
    values = expression.get("values") or []
    if operator in ("In", "NotIn"):
        if not values:
            errors.append(
                _required(f"{path}.values", "must be specified when `operator` is 'In' or 'NotIn'")
            )
    elif operator in ("Exists", "DoesNotExist"):
        if values:
            errors.append(
                FieldError(
                    f"{path}.values",
                    "FieldValueForbidden",
                    "Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                )
            )
    else:
        errors.append(
            FieldError(
                f"{path}.operator",
                "FieldValueInvalid",
                f"Invalid value: {_quote(operator)}: not a valid selector operator",
            )
        )
    key = expression.get("key") or ""
    errors += [
        FieldError(f"{path}.key", "FieldValueInvalid", f"Invalid value: {_quote(key)}: {p}")
        for p in label_rules.qualified_name_problems(key)
    ]
    for index, value in enumerate(values):
        errors += [
            FieldError(
                f"{path}.values[{index}]",
                "FieldValueInvalid",
                f"Invalid value: {_quote(value)}: {p}",
            )
            for p in label_rules.label_value_problems(value or "")
        ]
    return errors


def label_selector_errors(selector: Any, path: str) -> list[FieldError]:
    """Return the errors of a metav1.LabelSelector (``ValidateLabelSelector``).

    Args:
        selector: the selector object (``None`` decodes to the empty selector).
        path: its field path (``aggregationRule.clusterRoleSelectors[0]``).
    """
    selector = selector or {}
    errors = label_rules.label_errors(selector.get("matchLabels") or {}, f"{path}.matchLabels")
    for index, expression in enumerate(selector.get("matchExpressions") or []):
        errors += _requirement_errors(expression, f"{path}.matchExpressions[{index}]")
    return errors


def _aggregation_errors(rule: dict[str, Any]) -> list[FieldError]:
    selectors = rule.get("clusterRoleSelectors") or []
    path = "aggregationRule.clusterRoleSelectors"
    if not selectors:
        return [
            _required(
                path, "at least one clusterRoleSelector required if aggregationRule is non-nil"
            )
        ]
    errors: list[FieldError] = []
    for index, selector in enumerate(selectors):
        own = label_selector_errors(selector, f"{path}[{index}]")
        errors += own
        if own:  # the selector does not convert (LabelSelectorAsSelector fails)
            errors.append(
                FieldError(
                    f"{path}[{index}]",
                    "FieldValueInvalid",
                    'Invalid value: "null": invalid label selector.',
                )
            )
    return errors


def _rules_errors(obj: dict[str, Any], *, namespaced: bool) -> list[FieldError]:
    errors: list[FieldError] = []
    for index, rule in enumerate(obj.get("rules") or []):
        errors += policy_rule_errors(rule, namespaced=namespaced, path=f"rules[{index}]")
    return errors


def role_errors(obj: dict[str, Any], old: dict[str, Any] | None) -> list[FieldError]:
    """Return the validation errors of a Role create (``old`` None) or update.

    Args:
        obj: the Role (decoded and type-checked). old: the stored Role on update (unused:
            an update is validated like a create).
    """
    return _rules_errors(obj, namespaced=True)


def cluster_role_errors(obj: dict[str, Any], old: dict[str, Any] | None) -> list[FieldError]:
    """Return the validation errors of a ClusterRole create (``old`` None) or update.

    Args:
        obj: the ClusterRole (decoded and type-checked). old: the stored ClusterRole on
            update (unused: an update is validated like a create).
    """
    errors = _rules_errors(obj, namespaced=False)
    aggregation = obj.get("aggregationRule")
    if aggregation is not None:
        errors += _aggregation_errors(aggregation)
    return errors
