"""RBAC authorization over plain Role/ClusterRole/binding dicts (issue 3, "Authorization").

The evaluation order and wording follow the Kubernetes RBAC authorizer:

1. Members of ``system:masters`` are allowed everything (kube-apiserver's privileged-group
   authorizer, which runs before RBAC).
2. Every ClusterRoleBinding whose subjects include the user grants its ClusterRole's rules
   in every namespace and at cluster scope.
3. For a namespaced request, every RoleBinding in that namespace whose subjects include the
   user grants its Role's rules (a Role of the binding's namespace) or its ClusterRole's
   rules, limited to that namespace.

A request is allowed as soon as one rule matches (see ``policy_rules``); RBAC never denies
explicitly. Bindings that name a missing role are skipped and reported in the reason, as
``RBAC: clusterrole.rbac.authorization.k8s.io "x" not found``. Aggregated ClusterRoles are
evaluated at authorize time (see ``aggregation``).

The data comes through :class:`RbacSource`, so this module does no I/O and the API server
can hand it its storage (or a snapshot) directly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

from localkube.auth import policy_rules
from localkube.auth.aggregation import SelectorError, effective_rules
from localkube.auth.policy_rules import rule_allows
from localkube.auth.types import Decision, RequestAttributes, UserInfo
from localkube.errors import ApiError

RBAC_GROUP = "rbac.authorization.k8s.io"
MASTERS_GROUP = "system:masters"
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"


class RbacSource(Protocol):
    """Where the authorizer reads RBAC objects from (plain Kubernetes object dicts)."""

    def roles(self, namespace: str) -> list[dict[str, Any]]:
        """Return the Roles of ``namespace``."""
        ...

    def role_bindings(self, namespace: str) -> list[dict[str, Any]]:
        """Return the RoleBindings of ``namespace``."""
        ...

    def cluster_roles(self) -> list[dict[str, Any]]:
        """Return every ClusterRole."""
        ...

    def cluster_role_bindings(self) -> list[dict[str, Any]]:
        """Return every ClusterRoleBinding."""
        ...


@dataclass
class StaticRbac:
    """An in-memory :class:`RbacSource` (tests, and a snapshot for the API server).

    Attributes:
        objects: Role, RoleBinding, ClusterRole and ClusterRoleBinding dicts in any order;
            each is filed by its ``kind`` and ``metadata.namespace``.
    """

    objects: list[dict[str, Any]] = field(default_factory=list)

    def _of(self, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        return [
            o
            for o in self.objects
            if o.get("kind") == kind and (namespace is None or _meta(o, "namespace") == namespace)
        ]

    def roles(self, namespace: str) -> list[dict[str, Any]]:
        """Return the Roles of ``namespace``."""
        return self._of("Role", namespace)

    def role_bindings(self, namespace: str) -> list[dict[str, Any]]:
        """Return the RoleBindings of ``namespace``."""
        return self._of("RoleBinding", namespace)

    def cluster_roles(self) -> list[dict[str, Any]]:
        """Return every ClusterRole."""
        return self._of("ClusterRole")

    def cluster_role_bindings(self) -> list[dict[str, Any]]:
        """Return every ClusterRoleBinding."""
        return self._of("ClusterRoleBinding")


def _meta(obj: Mapping[str, Any], key: str) -> str:
    metadata = obj.get("metadata")
    value = metadata.get(key) if isinstance(metadata, Mapping) else None
    return value if isinstance(value, str) else ""


def _str(obj: Mapping[str, Any], key: str) -> str:
    value = obj.get(key)
    return value if isinstance(value, str) else ""


def subject_applies(user: UserInfo, subject: Mapping[str, Any], namespace: str) -> bool:
    """Return whether one binding subject names ``user``.

    Args:
        user: the caller.
        subject: ``{"kind": "User"|"Group"|"ServiceAccount", "name": ..., "namespace": ...}``.
        namespace: the RoleBinding's namespace, or ``""`` for a ClusterRoleBinding. A
            ServiceAccount subject without a namespace defaults to it, so in a
            ClusterRoleBinding such a subject matches nobody.
    """
    kind = _str(subject, "kind")
    name = _str(subject, "name")
    if kind == "User":
        return user.username == name
    if kind == "Group":
        return name in user.groups
    if kind == "ServiceAccount":
        sa_namespace = _str(subject, "namespace") or namespace
        if not sa_namespace or not name:
            return False
        return user.username == f"{SERVICE_ACCOUNT_PREFIX}{sa_namespace}:{name}"
    return False


def _describe_subject(subject: Mapping[str, Any], binding_namespace: str) -> str:
    kind = _str(subject, "kind")
    name = _str(subject, "name")
    if kind == "ServiceAccount":
        namespace = _str(subject, "namespace") or binding_namespace
        return f"{kind} {go_quote(name + '/' + namespace)}"
    return f"{kind} {go_quote(name)}"


def _describe_binding(
    kind: str,
    binding: Mapping[str, Any],
    role_ref: Mapping[str, Any],
    subject: Mapping[str, Any],
    namespace: str,
) -> str:
    """Describe a binding as Kubernetes' allow reasons do (``RoleBinding "b/ns" of ...``)."""
    name = _meta(binding, "name") + (f"/{namespace}" if namespace else "")
    return (
        f"{kind} {go_quote(name)} of {_str(role_ref, 'kind')} "
        f"{go_quote(_str(role_ref, 'name'))} to {_describe_subject(subject, namespace)}"
    )


@dataclass(frozen=True)
class _Grant:
    """The rules one applicable binding grants, and how to describe the binding."""

    describe: Callable[[], str]
    rules: list[dict[str, Any]]


class _Resolver:
    """Walks the bindings that apply to one user; caches role lookups for one request."""

    def __init__(self, rbac: RbacSource) -> None:
        self._rbac = rbac
        self._cluster_roles: dict[str, dict[str, Any]] | None = None
        self._effective: dict[str, list[dict[str, Any]]] = {}
        self.errors: list[str] = []

    def cluster_roles(self) -> dict[str, dict[str, Any]]:
        if self._cluster_roles is None:
            self._cluster_roles = {_meta(r, "name"): r for r in self._rbac.cluster_roles()}
        return self._cluster_roles

    def _role_rules(self, role_ref: Mapping[str, Any], namespace: str) -> list[dict[str, Any]]:
        kind = _str(role_ref, "kind")
        name = _str(role_ref, "name")
        if kind == "ClusterRole":
            role = self.cluster_roles().get(name)
            if role is None:
                self.errors.append(f"clusterrole.{RBAC_GROUP} {go_quote(name)} not found")
                return []
            if name in self._effective:
                return self._effective[name]
            try:
                rules = effective_rules(role, self.cluster_roles())
            except SelectorError as exc:
                self.errors.append(f"clusterrole.{RBAC_GROUP} {go_quote(name)}: {exc}")
                rules = []
            self._effective[name] = rules
            return rules
        if kind == "Role":
            # a Role of the binding's namespace; a ClusterRoleBinding (namespace "") never
            # finds one, which Kubernetes reports the same way
            for role in self._rbac.roles(namespace) if namespace else []:
                if _meta(role, "name") == name:
                    own = role.get("rules")
                    if not isinstance(own, list):
                        return []
                    return [r for r in own if isinstance(r, dict)]
            self.errors.append(f"role.{RBAC_GROUP} {go_quote(name)} not found")
            return []
        self.errors.append(f"unsupported role reference kind: {go_quote(kind)}")
        return []

    def grants(self, user: UserInfo, namespace: str) -> Iterator[_Grant]:
        """Yield the grants of every applicable binding: cluster-wide first, then namespace."""
        for binding in self._rbac.cluster_role_bindings():
            subject = _first_applicable(user, binding, "")
            if subject is None:
                continue
            role_ref = binding.get("roleRef")
            role_ref = role_ref if isinstance(role_ref, Mapping) else {}
            describe = partial(
                _describe_binding, "ClusterRoleBinding", binding, role_ref, subject, ""
            )
            yield _Grant(describe, self._role_rules(role_ref, ""))
        if not namespace:
            return
        for binding in self._rbac.role_bindings(namespace):
            subject = _first_applicable(user, binding, namespace)
            if subject is None:
                continue
            role_ref = binding.get("roleRef")
            role_ref = role_ref if isinstance(role_ref, Mapping) else {}
            binding_ns = _meta(binding, "namespace") or namespace
            describe = partial(
                _describe_binding, "RoleBinding", binding, role_ref, subject, binding_ns
            )
            yield _Grant(describe, self._role_rules(role_ref, namespace))

    def reason(self) -> str:
        """Return ``RBAC: <errors>`` in Kubernetes' aggregate-error format, or ``""``."""
        unique = list(dict.fromkeys(self.errors))
        if not unique:
            return ""
        if len(unique) == 1:
            return f"RBAC: {unique[0]}"
        return "RBAC: [" + ", ".join(unique) + "]"


def _first_applicable(
    user: UserInfo, binding: Mapping[str, Any], namespace: str
) -> Mapping[str, Any] | None:
    subjects = binding.get("subjects")
    if not isinstance(subjects, list):
        return None
    for subject in subjects:
        if isinstance(subject, Mapping) and subject_applies(user, subject, namespace):
            return subject
    return None


def authorize(user: UserInfo, attrs: RequestAttributes, rbac: RbacSource) -> Decision:
    """Decide whether ``user`` may do ``attrs``, as the Kubernetes RBAC authorizer does.

    Args:
        user: the authenticated caller.
        attrs: the request. For resource requests ``namespace`` selects the RoleBindings
            consulted (``""`` consults only ClusterRoleBindings); for non-resource requests
            only ClusterRoleBindings count.
        rbac: the RBAC objects.

    Returns:
        ``Decision(True, "RBAC: allowed by ClusterRoleBinding ...")`` for the first binding
        with a matching rule (``Decision(True, "")`` for ``system:masters``), else
        ``Decision(False, reason)`` where reason lists missing roles (``""`` if none).
    """
    if MASTERS_GROUP in user.groups:
        return Decision(True, "")
    return decide(user_grants(user, request_namespace(attrs), rbac), attrs)


def request_namespace(attrs: RequestAttributes) -> str:
    """The namespace whose RoleBindings apply to ``attrs`` (``""``: ClusterRoleBindings only)."""
    return attrs.namespace if attrs.resource_request else ""


@dataclass(frozen=True)
class UserGrants:
    """Every grant that applies to one user in one namespace, in evaluation order.

    Depends only on the user's name and groups, the namespace and the RBAC objects, so a
    caller may keep it until a Role, ClusterRole or binding changes.

    Attributes:
        grants: the applicable bindings' rules, cluster-wide first.
        reason: the deny reason (``RBAC: ... not found`` for missing roles, else ``""``).
    """

    grants: tuple[_Grant, ...]
    reason: str


def user_grants(user: UserInfo, namespace: str, rbac: RbacSource) -> UserGrants:
    """Collect the grants of every binding that applies to ``user`` in ``namespace``.

    Args:
        user: the caller (not a ``system:masters`` member: those skip RBAC).
        namespace: see :func:`request_namespace`.
        rbac: the RBAC objects.
    """
    resolver = _Resolver(rbac)
    grants = tuple(resolver.grants(user, namespace))
    return UserGrants(grants, resolver.reason())


def uses_resource_names(grants: UserGrants) -> bool:
    """Whether any rule of ``grants`` lists ``resourceNames`` (decisions then depend on names).

    Args:
        grants: from :func:`user_grants`.
    """
    return any(
        isinstance(rule, Mapping) and bool(policy_rules.resource_names(rule))
        for grant in grants.grants
        for rule in grant.rules
    )


def decide(grants: UserGrants, attrs: RequestAttributes) -> Decision:
    """The RBAC decision for ``attrs`` given the caller's grants (see :func:`authorize`)."""
    for grant in grants.grants:
        if any(rule_allows(rule, attrs) for rule in grant.rules):
            return Decision(True, f"RBAC: allowed by {grant.describe()}")
    return Decision(False, grants.reason)


def role_reference_rules(
    role_ref: Mapping[str, Any], namespace: str, rbac: RbacSource
) -> tuple[list[dict[str, Any]], list[str]]:
    """Return the rules a binding's ``roleRef`` grants, and why some could not be read.

    Args:
        role_ref: ``{"kind": "Role"|"ClusterRole", "name": ...}``.
        namespace: the binding's namespace (``""`` for a ClusterRoleBinding).
        rbac: the RBAC objects.

    Returns:
        ``(rules, errors)``; errors such as ``role.rbac.authorization.k8s.io "x" not found``.
    """
    resolver = _Resolver(rbac)
    rules = resolver._role_rules(role_ref, namespace)
    return rules, list(dict.fromkeys(resolver.errors))


@dataclass(frozen=True)
class UserRules:
    """Everything a user may do in one namespace (SelfSubjectRulesReview).

    Attributes:
        resource_rules: rules with ``apiGroups``/``resources`` (as found in roles).
        non_resource_rules: rules with ``nonResourceURLs``.
        errors: problems met while collecting them (missing roles); non-empty means the
            list may be incomplete.
    """

    resource_rules: list[dict[str, Any]]
    non_resource_rules: list[dict[str, Any]]
    errors: list[str]


def rules_for(user: UserInfo, namespace: str, rbac: RbacSource) -> UserRules:
    """Collect the rules that apply to ``user`` in ``namespace`` (``""``: cluster scope).

    ``system:masters`` members get ``*`` on everything, as the privileged-group authorizer
    reports it.
    """
    if MASTERS_GROUP in user.groups:
        return UserRules(
            [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
            [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
            [],
        )
    resolver = _Resolver(rbac)
    resource_rules: list[dict[str, Any]] = []
    non_resource_rules: list[dict[str, Any]] = []
    for grant in resolver.grants(user, namespace):
        for rule in grant.rules:
            if rule.get("nonResourceURLs"):
                target = non_resource_rules
                shaped = {
                    "verbs": rule.get("verbs", []),
                    "nonResourceURLs": rule["nonResourceURLs"],
                }
            else:
                target = resource_rules
                shaped = {
                    k: rule[k]
                    for k in ("verbs", "apiGroups", "resources", "resourceNames")
                    if rule.get(k)
                }
                shaped.setdefault("verbs", [])
            if shaped not in target:
                target.append(shaped)
    return UserRules(resource_rules, non_resource_rules, list(dict.fromkeys(resolver.errors)))


_GO_ESCAPES = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
    '"': '\\"',
    "\\": "\\\\",
}


def go_quote(text: str) -> str:
    """Quote ``text`` the way Go's ``%q`` does for the strings Kubernetes messages contain."""
    if text.isprintable() and '"' not in text and "\\" not in text:
        return f'"{text}"'
    out = []
    for char in text:
        if char in _GO_ESCAPES:
            out.append(_GO_ESCAPES[char])
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\x{ord(char):02x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def _sanitize(text: str) -> str:
    # kube-apiserver escapes these so the error body never looks like HTML
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def forbidden_reason(user: UserInfo, attrs: RequestAttributes) -> str:
    """Return the inner sentence ``User "u" cannot get resource "r" in API group ...``."""
    who = go_quote(user.username)
    if not attrs.resource_request:
        return f"User {who} cannot {attrs.verb} path {go_quote(attrs.path)}"
    resource = attrs.resource
    if attrs.subresource:
        resource = f"{resource}/{attrs.subresource}"
    where = (
        f"in the namespace {go_quote(attrs.namespace)}"
        if attrs.namespace
        else "at the cluster scope"
    )
    return (
        f"User {who} cannot {attrs.verb} resource {go_quote(resource)} "
        f"in API group {go_quote(attrs.api_group)} {where}"
    )


def forbidden_message(user: UserInfo, attrs: RequestAttributes, reason: str = "") -> str:
    """Return kube-apiserver's 403 message for a denied request, word for word.

    Examples:
        ``runs.kruntimes.io "x" is forbidden: User "system:serviceaccount:ns:sa" cannot get
        resource "runs" in API group "kruntimes.io" in the namespace "ns"``;
        ``pods is forbidden: User "u" cannot list resource "pods" in API group "" at the
        cluster scope``; ``forbidden: User "u" cannot get path "/metrics"``.

    Args:
        user: the caller.
        attrs: the denied request.
        reason: the authorizer's reason (``Decision.reason``), appended after ``": "``.
    """
    message = _sanitize(forbidden_reason(user, attrs))
    if reason:
        message = f"{message}: {reason}"
    if not attrs.resource_request or not attrs.resource:
        return f"forbidden: {message}"
    qualified = f"{attrs.resource}.{attrs.api_group}" if attrs.api_group else attrs.resource
    if attrs.name:
        return f"{qualified} {go_quote(attrs.name)} is forbidden: {message}"
    return f"{qualified} is forbidden: {message}"


def forbidden_error(user: UserInfo, attrs: RequestAttributes, reason: str = "") -> ApiError:
    """Return the 403 ``Forbidden`` :class:`ApiError` kube-apiserver answers for a denial."""
    details: dict[str, Any] = {}
    if attrs.resource_request:
        if attrs.name:
            details["name"] = attrs.name
        if attrs.api_group:
            details["group"] = attrs.api_group
        if attrs.resource:
            details["kind"] = attrs.resource
    return ApiError(
        403, "Forbidden", forbidden_message(user, attrs, reason), details=details or None
    )
