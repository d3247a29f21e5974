"""RBAC privilege-escalation prevention for Role, ClusterRole and binding writes.

Kubernetes lets a subject create or update a Role/ClusterRole only if it already holds
every permission the role grants, or may ``escalate`` roles; and create or update a
RoleBinding/ClusterRoleBinding only if it may ``bind`` the referenced role, or holds all of
the role's permissions. Members of ``system:masters`` are exempt, and so are writes that
only change ``ownerReferences`` or ``finalizers`` (garbage collection). The kruntimes
chart relies on these rules (its control plane creates runtimed's Roles without
``escalate``), so a Role it could not create on a real cluster must fail locally too.

The denial is kube-apiserver's 403, word for word::

    roles.rbac.authorization.k8s.io "r" is forbidden: user "system:serviceaccount:ns:sa"
    (groups=["system:serviceaccounts" ...]) is attempting to grant RBAC permissions not
    currently held:
    {APIGroups:[""], Resources:["secrets"], Verbs:["get"]}

Pure functions over plain dicts (``Covers``/``BreakdownRule``/``CompactRules`` of
``k8s.io/kubernetes/pkg/registry/rbac/validation``); :func:`check_write` is the entry
point used by admission.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from localkube.auth.policy_rules import ALL
from localkube.auth.rbac import (
    MASTERS_GROUP,
    RBAC_GROUP,
    RbacSource,
    authorize,
    go_quote,
    role_reference_rules,
    rules_for,
)
from localkube.auth.types import RequestAttributes, UserInfo
from localkube.errors import ApiError

ROLE_RESOURCES = frozenset({"roles", "clusterroles"})
BINDING_RESOURCES = frozenset({"rolebindings", "clusterrolebindings"})
_FULL_AUTHORITY = [
    {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
    {"nonResourceURLs": ["*"], "verbs": ["*"]},
]


def _strings(rule: Mapping[str, Any], key: str) -> list[str]:
    value = rule.get(key)
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def breakdown(rule: Mapping[str, Any]) -> list[dict[str, list[str]]]:
    """Split a PolicyRule into single (group, resource, [name,] verb) or (URL, verb) rules."""
    atoms: list[dict[str, list[str]]] = []
    verbs = _strings(rule, "verbs")
    names = _strings(rule, "resourceNames")
    for group in _strings(rule, "apiGroups"):
        for resource in _strings(rule, "resources"):
            for verb in verbs:
                base = {"apiGroups": [group], "resources": [resource], "verbs": [verb]}
                if names:
                    atoms += [{**base, "resourceNames": [name]} for name in names]
                else:
                    atoms.append(base)
    for url in _strings(rule, "nonResourceURLs"):
        atoms += [{"nonResourceURLs": [url], "verbs": [verb]} for verb in verbs]
    return atoms


def _resources_cover(owned: Sequence[str], wanted: Sequence[str]) -> bool:
    if ALL in owned:
        return True
    for path in wanted:
        if path in owned:
            continue
        if "/" not in path or f"*/{path.split('/', 1)[1]}" not in owned:
            return False
    return True


def _url_covers(owned: str, wanted: str) -> bool:
    return owned == wanted or (owned.endswith("*") and wanted.startswith(owned.rstrip("*")))


def _rule_covers(owner: Mapping[str, Any], atom: Mapping[str, list[str]]) -> bool:
    owner_verbs = _strings(owner, "verbs")
    owner_groups = _strings(owner, "apiGroups")
    owner_names = _strings(owner, "resourceNames")
    owner_urls = _strings(owner, "nonResourceURLs")
    wanted_names = atom.get("resourceNames", [])
    return (
        (ALL in owner_verbs or all(v in owner_verbs for v in atom["verbs"]))
        and (ALL in owner_groups or all(g in owner_groups for g in atom.get("apiGroups", [])))
        and _resources_cover(_strings(owner, "resources"), atom.get("resources", []))
        and all(any(_url_covers(o, u) for o in owner_urls) for u in atom.get("nonResourceURLs", []))
        and (
            not owner_names or (bool(wanted_names) and all(n in owner_names for n in wanted_names))
        )
    )


def missing_rules(
    owner_rules: Sequence[Mapping[str, Any]], wanted: Sequence[Mapping[str, Any]]
) -> list[dict[str, list[str]]]:
    """Return the single-permission rules of ``wanted`` that no owner rule covers."""
    return [
        atom
        for rule in wanted
        if isinstance(rule, Mapping)
        for atom in breakdown(rule)
        if not any(_rule_covers(owner, atom) for owner in owner_rules)
    ]


def compact(rules: Sequence[dict[str, list[str]]]) -> list[dict[str, list[str]]]:
    """Merge single-resource rules that differ only by verb (Kubernetes ``CompactRules``)."""
    merged: dict[tuple[str, str, str], dict[str, list[str]]] = {}
    others: list[dict[str, list[str]]] = []
    for rule in rules:
        if "nonResourceURLs" in rule:
            others.append(rule)
            continue
        names = rule.get("resourceNames", [])
        key = (rule["apiGroups"][0], rule["resources"][0], names[0] if names else "")
        if key in merged:
            merged[key]["verbs"] += [v for v in rule["verbs"] if v not in merged[key]["verbs"]]
        else:
            merged[key] = {k: list(v) for k, v in rule.items()}
    return others + list(merged.values())


def _go_list(values: Sequence[str]) -> str:
    return "[" + " ".join(go_quote(v) for v in values) + "]"


def compact_string(rule: Mapping[str, list[str]]) -> str:
    """Format a rule as Kubernetes' ``CompactString`` (``{APIGroups:[""], Verbs:["get"]}``)."""
    parts = [
        f"{label}:{_go_list(rule[key])}"
        for key, label in (
            ("apiGroups", "APIGroups"),
            ("resources", "Resources"),
            ("nonResourceURLs", "NonResourceURLs"),
            ("resourceNames", "ResourceNames"),
            ("verbs", "Verbs"),
        )
        if rule.get(key)
    ]
    return "{" + ", ".join(parts) + "}"


def _forbidden(resource: str, name: str, message: str) -> ApiError:
    return ApiError(
        403,
        "Forbidden",
        f"{resource}.{RBAC_GROUP} {go_quote(name)} is forbidden: {message}",
        details={"name": name, "group": RBAC_GROUP, "kind": resource},
    )


def _confirm_no_escalation(
    user: UserInfo, namespace: str, wanted: Sequence[Mapping[str, Any]], rbac: RbacSource
) -> str:
    """Return ``""`` if ``user`` holds every permission in ``wanted``, else the reason."""
    held = rules_for(user, namespace, rbac)
    missing = missing_rules([*held.resource_rules, *held.non_resource_rules], wanted)
    if not missing:
        return ""
    described = "\n".join(sorted({compact_string(r) for r in compact(missing)}))
    message = (
        f"user {go_quote(user.username)} (groups={_go_list(user.groups)}) is attempting to "
        f"grant RBAC permissions not currently held:\n{described}"
    )
    if held.errors:
        message += f"; resolution errors: [{', '.join(held.errors)}]"
    return message


def _only_gc_fields_changed(obj: Mapping[str, Any], old: Mapping[str, Any] | None) -> bool:
    if old is None:
        return False

    def strip(o: Mapping[str, Any]) -> dict[str, Any]:
        meta = {
            k: v
            for k, v in (o.get("metadata") or {}).items()
            if k not in ("ownerReferences", "finalizers", "resourceVersion", "managedFields")
        }
        return {**o, "metadata": meta}

    return strip(obj) == strip(old)


def check_write(
    user: UserInfo,
    resource: str,
    obj: Mapping[str, Any],
    old: Mapping[str, Any] | None,
    rbac: RbacSource,
) -> None:
    """Refuse a Role/ClusterRole/binding write that would grant ``user`` more than it holds.

    Args:
        user: the caller. resource: ``roles``, ``clusterroles``, ``rolebindings`` or
            ``clusterrolebindings`` (anything else is allowed).
        obj: the object about to be stored. old: the stored object (None on create).
        rbac: the RBAC objects (before this write).

    Raises:
        ApiError: 403 Forbidden worded as kube-apiserver's escalation check; 400
            BadRequest when a binding's role cannot be read (a non-privileged caller
            cannot bind a role that does not exist).
    """
    if resource not in ROLE_RESOURCES | BINDING_RESOURCES or MASTERS_GROUP in user.groups:
        return
    if _only_gc_fields_changed(obj, old):
        return
    meta = obj.get("metadata") or {}
    name = str(meta.get("name", ""))
    namespace = str(meta.get("namespace", "")) if resource in ("roles", "rolebindings") else ""
    if resource in ROLE_RESOURCES:
        escalate = RequestAttributes(
            verb="escalate",
            api_group=RBAC_GROUP,
            resource=resource,
            namespace=namespace,
            name=name,
        )
        if authorize(user, escalate, rbac).allowed:
            return
        rules = obj.get("rules") if isinstance(obj.get("rules"), list) else []
        reason = _confirm_no_escalation(user, namespace, rules or [], rbac)
        if reason:
            raise _forbidden(resource, name, reason)
        if resource == "clusterroles" and obj.get("aggregationRule"):
            if _confirm_no_escalation(user, "", _FULL_AUTHORITY, rbac):
                raise _forbidden(
                    resource, name, "must have cluster-admin privileges to use the aggregationRule"
                )
        return
    role_ref = obj.get("roleRef") if isinstance(obj.get("roleRef"), Mapping) else {}
    assert isinstance(role_ref, Mapping)
    ref_kind = str(role_ref.get("kind", ""))
    bind = RequestAttributes(
        verb="bind",
        api_group=RBAC_GROUP,
        resource="roles" if ref_kind == "Role" else "clusterroles",
        namespace=namespace,
        name=str(role_ref.get("name", "")),
    )
    if authorize(user, bind, rbac).allowed:
        return
    rules, errors = role_reference_rules(role_ref, namespace, rbac)
    if errors:
        plural = "roles" if ref_kind == "Role" else "clusterroles"
        raise ApiError(
            400,
            "BadRequest",
            f"{plural}.{RBAC_GROUP} {go_quote(str(role_ref.get('name', '')))} not found",
        )
    reason = _confirm_no_escalation(user, namespace, rules, rbac)
    if reason:
        raise _forbidden(resource, name, reason)
