"""Matching one RBAC ``PolicyRule`` against one request, exactly as Kubernetes does.

Kubernetes RBAC is allow-only: a request is allowed when any rule reachable from a binding
that applies to the user matches it. This module holds the per-rule test (the equivalent of
``rbac/v1`` ``RuleAllows`` and its helpers); who the rules belong to lives in ``rbac.py``.

A rule is the plain dict of a Role or ClusterRole ``rules[]`` entry (``verbs``,
``apiGroups``, ``resources``, ``resourceNames``, ``nonResourceURLs``). Missing lists are
empty lists, so a rule without ``verbs`` matches nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from localkube.auth.types import RequestAttributes

ALL = "*"
"""The wildcard that matches every verb, API group, resource or non-resource URL."""


def _strings(rule: Mapping[str, Any], key: str) -> Sequence[str]:
    """Return ``rule[key]`` as a list of strings, ignoring anything that is not a string."""
    value = rule.get(key)
    if not isinstance(value, list):
        return ()
    return [item for item in value if isinstance(item, str)]


def verb_matches(rule: Mapping[str, Any], verb: str) -> bool:
    """Return whether the rule's ``verbs`` contain ``verb`` or ``*``."""
    return any(v == ALL or v == verb for v in _strings(rule, "verbs"))


def api_group_matches(rule: Mapping[str, Any], group: str) -> bool:
    """Return whether the rule's ``apiGroups`` contain ``group`` (``""`` is core) or ``*``."""
    return any(g == ALL or g == group for g in _strings(rule, "apiGroups"))


def resource_matches(rule: Mapping[str, Any], resource: str, subresource: str) -> bool:
    """Return whether the rule's ``resources`` cover ``resource[/subresource]``.

    Kubernetes semantics: ``*`` matches everything including subresources; ``pods`` matches
    only the main resource; ``pods/status`` only that subresource; ``*/status`` the
    ``status`` subresource of every resource (but never a main resource).
    """
    combined = f"{resource}/{subresource}" if subresource else resource
    for ruled in _strings(rule, "resources"):
        if ruled == ALL or ruled == combined:
            return True
        if subresource and ruled == f"*/{subresource}":
            return True
    return False


def resource_names(rule: Mapping[str, Any]) -> Sequence[str]:
    """Return the rule's ``resourceNames`` (strings only; empty: every name)."""
    return _strings(rule, "resourceNames")


def resource_name_matches(rule: Mapping[str, Any], name: str) -> bool:
    """Return whether the rule's ``resourceNames`` allow the object ``name``.

    An absent or empty ``resourceNames`` allows every name. A non-empty one allows only
    requests naming one of them, so it never matches a request without a name (``list``,
    ``watch`` and ``create`` of a collection, ``deletecollection``), as in Kubernetes.
    """
    names = resource_names(rule)
    if not names:
        return True
    return bool(name) and name in names


def non_resource_url_matches(rule: Mapping[str, Any], path: str) -> bool:
    """Return whether the rule's ``nonResourceURLs`` cover ``path``.

    ``*`` matches every path, an entry ending in ``*`` matches every path starting with
    the rest of it (``/apis/*`` matches ``/apis/`` and ``/apis/apps/v1``, not ``/apis``),
    anything else must be equal.
    """
    for url in _strings(rule, "nonResourceURLs"):
        if url == ALL or url == path:
            return True
        if url.endswith("*") and path.startswith(url.rstrip("*")):
            return True
    return False


def rule_allows(rule: Mapping[str, Any], attrs: RequestAttributes) -> bool:
    """Return whether one PolicyRule allows the request.

    Args:
        rule: a ``rules[]`` entry of a Role or ClusterRole (plain dict).
        attrs: the request. Resource requests are checked against ``verbs``,
            ``apiGroups``, ``resources`` and ``resourceNames``; non-resource requests
            against ``verbs`` and ``nonResourceURLs``.

    Returns:
        True if the rule matches. Never raises on malformed rules: a malformed field
        matches nothing.
    """
    if not isinstance(rule, Mapping):
        return False
    if attrs.resource_request:
        return (
            verb_matches(rule, attrs.verb)
            and api_group_matches(rule, attrs.api_group)
            and resource_matches(rule, attrs.resource, attrs.subresource)
            and resource_name_matches(rule, attrs.name)
        )
    return verb_matches(rule, attrs.verb) and non_resource_url_matches(rule, attrs.path)
