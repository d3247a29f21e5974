"""Glue between the HTTP layer and :mod:`localkube.auth`: who is calling, may they do it.

* :class:`StoreRbac` serves the RBAC objects from the store (``auth.rbac.RbacSource``).
* :class:`Access` authenticates bearer tokens (``auth.authn.BearerAuthenticator``: the
  admin token and ServiceAccount JWTs) and authorizes requests with ``auth.rbac``. A
  ServiceAccount token stops working when its ServiceAccount, or the Pod or Secret it is
  bound to, is deleted (or recreated with another uid).
* :meth:`Access.impersonate` applies ``Impersonate-*`` headers after checking the
  ``impersonate`` permissions, as kube-apiserver does.
* :func:`request_attributes` maps a request onto RBAC's ``RequestAttributes``.
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from localkube import storage
from localkube.auth import rbac
from localkube.auth.authn import BearerAuthenticator, bearer_token
from localkube.auth.tokens import VerifiedToken
from localkube.auth.types import Decision, RequestAttributes, UserInfo
from localkube.errors import ApiError

RBAC = "rbac.authorization.k8s.io"
RBAC_KINDS = tuple(
    f"{RBAC}/{plural}"
    for plural in ("roles", "rolebindings", "clusterroles", "clusterrolebindings")
)
MAX_CACHED_GRANTS = 1024
"""Users x namespaces whose RBAC grants :class:`Access` keeps between RBAC changes."""
MAX_CACHED_DECISIONS = 256
"""RBAC decisions kept per user and namespace (cleared when full, and on RBAC changes)."""
SA_PREFIX = "system:serviceaccount:"
PUBLIC_PATHS = frozenset({"/healthz", "/livez", "/readyz", "/version"})
"""Non-resource paths answered without credentials (``system:public-info-viewer``)."""


@dataclass
class _CachedGrants:
    """One user's grants in one namespace and the decisions taken from them so far."""

    grants: rbac.UserGrants
    uses_names: bool  # some rule lists resourceNames: decisions depend on the name
    decisions: dict[tuple[str, str, str, str, str], Decision] = field(default_factory=dict)


class StoreRbac:
    """Roles and bindings read from the store (satisfies ``auth.rbac.RbacSource``)."""

    def __init__(self, store: storage.Store) -> None:
        self.store = store

    def roles(self, namespace: str) -> list[dict[str, Any]]:
        """Roles in ``namespace``."""
        return self.store.list(f"{RBAC}/roles", namespace)

    def role_bindings(self, namespace: str) -> list[dict[str, Any]]:
        """RoleBindings in ``namespace``."""
        return self.store.list(f"{RBAC}/rolebindings", namespace)

    def cluster_roles(self) -> list[dict[str, Any]]:
        """All ClusterRoles."""
        return self.store.list(f"{RBAC}/clusterroles")

    def cluster_role_bindings(self) -> list[dict[str, Any]]:
        """All ClusterRoleBindings."""
        return self.store.list(f"{RBAC}/clusterrolebindings")


class Access:
    """Authentication and authorization for one server.

    Args:
        store: the object store (RBAC objects, ServiceAccounts).
        authenticator: verifies bearer tokens.
        wall_time: unix seconds now (injectable for token-expiry tests).
    """

    def __init__(
        self,
        store: storage.Store,
        authenticator: BearerAuthenticator,
        *,
        wall_time: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.authenticator = authenticator
        self.rbac = StoreRbac(store)
        self.wall_time = wall_time
        self._grants: dict[tuple[str, tuple[str, ...], str], _CachedGrants] = {}
        self._grants_revision = -1
        authority = authenticator.token_authority
        if authority.sa_exists is None:
            authority.sa_exists = self._sa_exists
        if authority.bound_object_exists is None:
            authority.bound_object_exists = self._bound_object_exists

    def _sa_exists(self, namespace: str, name: str, uid: str) -> bool:
        sa = self.store.get("/serviceaccounts", namespace, name)
        return sa is not None and (not uid or sa["metadata"].get("uid") == uid)

    def _bound_object_exists(self, kind: str, namespace: str, name: str, uid: str) -> bool:
        key = {"Pod": "/pods", "Secret": "/secrets", "Node": "/nodes"}.get(kind)
        obj = self.store.get(key, namespace, name) if key else None
        return obj is not None and obj["metadata"].get("uid") == uid

    def authenticate(self, authorization: str | None, path: str) -> UserInfo:
        """Return the caller, or the anonymous user for public paths without a token.

        Raises:
            ApiError: 401 Unauthorized for a missing, expired or forged token.
        """
        token = bearer_token(authorization)
        if token is not None:
            user = self.authenticator.authenticate(token, now=self.wall_time())
            if user is not None:
                return user
        elif path in PUBLIC_PATHS:
            return UserInfo("system:anonymous", ("system:unauthenticated",))
        raise ApiError(401, "Unauthorized", "Unauthorized")

    def impersonate(self, user: UserInfo, headers: list[tuple[bytes, bytes]]) -> UserInfo:
        """Apply ``Impersonate-*`` headers (``kubectl --as``/``--as-group``), if any.

        The caller needs the ``impersonate`` verb on ``users`` (or ``serviceaccounts`` in
        the account's namespace), on each ``groups``, on ``uids`` and on
        ``userextras/<key>`` (``authentication.k8s.io``), as kube-apiserver checks.

        Args:
            user: the authenticated caller. headers: the raw request headers.

        Returns:
            The impersonated user (with ``system:authenticated`` added), or ``user``
            unchanged when no impersonation header is present.

        Raises:
            ApiError: 403 when the caller may not impersonate; 400 for groups, uid or
                extras without a user.
        """
        name = ""
        groups: list[str] = []
        uid = ""
        extra: dict[str, list[str]] = {}
        for raw_key, raw_value in headers:
            key = raw_key.decode("latin-1").lower()
            value = raw_value.decode("latin-1")
            if key == "impersonate-user":
                name = value
            elif key == "impersonate-group":
                groups.append(value)
            elif key == "impersonate-uid":
                uid = value
            elif key.startswith("impersonate-extra-"):
                extra_key = urllib.parse.unquote(key.removeprefix("impersonate-extra-"))
                extra.setdefault(extra_key, []).append(value)
        if not name:
            if groups or uid or extra:
                raise ApiError(
                    400,
                    "BadRequest",
                    "requested impersonation of groups, uid or extras without impersonating a user",
                )
            return user
        checks: list[RequestAttributes] = []
        if name.startswith(SA_PREFIX) and name.count(":") == 3:
            sa_namespace, sa_name = name.removeprefix(SA_PREFIX).split(":")
            checks.append(
                RequestAttributes(
                    verb="impersonate",
                    resource="serviceaccounts",
                    namespace=sa_namespace,
                    name=sa_name,
                )
            )
            implied = ["system:serviceaccounts", f"system:serviceaccounts:{sa_namespace}"]
        else:
            checks.append(RequestAttributes(verb="impersonate", resource="users", name=name))
            implied = []
        checks += [RequestAttributes(verb="impersonate", resource="groups", name=g) for g in groups]
        if uid:
            checks.append(
                RequestAttributes(
                    verb="impersonate", api_group="authentication.k8s.io", resource="uids", name=uid
                )
            )
        for extra_key, values in extra.items():
            checks += [
                RequestAttributes(
                    verb="impersonate",
                    api_group="authentication.k8s.io",
                    resource="userextras",
                    subresource=extra_key,
                    name=v,
                )
                for v in values
            ]
        for attrs in checks:
            self.require(user, attrs)
        all_groups = list(dict.fromkeys([*(groups or implied), "system:authenticated"]))
        if name == "system:anonymous":
            all_groups = groups or ["system:unauthenticated"]
        return UserInfo(name, tuple(all_groups), uid, extra)

    def authorize(self, user: UserInfo, attrs: RequestAttributes) -> Decision:
        """Evaluate RBAC for ``attrs`` (``system:masters`` may do anything)."""
        if attrs.path in PUBLIC_PATHS and not attrs.resource_request:
            return Decision(True, "public info")
        if rbac.MASTERS_GROUP in user.groups:
            return Decision(True, "")
        grants = self._user_grants(user, rbac.request_namespace(attrs))
        if not attrs.resource_request:  # (rare: discovery, /version; keyed by any path)
            return rbac.decide(grants.grants, attrs)
        # a resource decision depends only on the grants and the attributes the rules
        # test: verb, group, resource and subresource, and the name only when a rule lists
        # resourceNames (so not one decision per Run name)
        key = (
            attrs.verb,
            attrs.api_group,
            attrs.resource,
            attrs.subresource,
            attrs.name if grants.uses_names else "",
        )
        decision = grants.decisions.get(key)
        if decision is None:
            if len(grants.decisions) >= MAX_CACHED_DECISIONS:
                grants.decisions.clear()
            decision = grants.decisions[key] = rbac.decide(grants.grants, attrs)
        return decision

    def _user_grants(self, user: UserInfo, namespace: str) -> _CachedGrants:
        """``rbac.user_grants``, kept until a Role, ClusterRole or binding changes."""
        revision = max(self.store.kind_revision(kind) for kind in RBAC_KINDS)
        if revision != self._grants_revision:
            self._grants.clear()
            self._grants_revision = revision
        key = (user.username, tuple(user.groups), namespace)
        cached = self._grants.get(key)
        if cached is None:
            if len(self._grants) >= MAX_CACHED_GRANTS:
                del self._grants[next(iter(self._grants))]
            grants = rbac.user_grants(user, namespace, self.rbac)
            cached = self._grants[key] = _CachedGrants(grants, rbac.uses_resource_names(grants))
        return cached

    def require(self, user: UserInfo, attrs: RequestAttributes) -> None:
        """Raise the standard 403 unless ``user`` may do ``attrs``.

        Raises:
            ApiError: 403 Forbidden with kube-apiserver's message.
        """
        decision = self.authorize(user, attrs)
        if not decision.allowed:
            raise rbac.forbidden_error(user, attrs, decision.reason)

    def verify(self, token: str, audiences: list[str] | None) -> VerifiedToken | None:
        """Verify a token for TokenReview (current time bound)."""
        return self.authenticator.verify(token, now=self.wall_time(), audiences=audiences)

    def rules_for(self, user: UserInfo, namespace: str) -> rbac.UserRules:
        """List ``user``'s rules in ``namespace`` (SelfSubjectRulesReview)."""
        return rbac.rules_for(user, namespace, self.rbac)


def name_from_field_selector(selector: str) -> str:
    """Return the object name a list/watch field selector pins, as kube-apiserver's RBAC sees it.

    ``RequestInfoFactory`` gives a list or watch with ``fieldSelector=metadata.name=N`` (or
    ``==``) the name N, so ``resourceNames`` rules allow watching a single object (what
    ``kubectl get cm x -w`` and single-object informers do). Names that are not valid path
    segments are ignored.

    Args:
        selector: the raw ``fieldSelector`` query value.

    Returns:
        The name, or ``""`` when the selector does not require one exact name.
    """
    for term in selector.split(","):
        field, op, value = term.partition("=")
        if not op or field.endswith("!"):
            continue
        value = value.removeprefix("=")
        if field.strip() == "metadata.name":
            value = value.strip()
            if value in (".", "..") or "/" in value or "%" in value:
                return ""
            return value
    return ""


def request_attributes(
    *,
    method: str,
    path: str,
    verb: str | None,
    group: str = "",
    resource: str = "",
    subresource: str = "",
    namespace: str = "",
    name: str = "",
) -> RequestAttributes:
    """Build RBAC attributes; ``verb`` None marks a non-resource request (uses ``method``)."""
    if verb is None:
        return RequestAttributes(verb=method.lower(), resource_request=False, path=path)
    return RequestAttributes(
        verb=verb,
        api_group=group,
        resource=resource,
        subresource=subresource,
        namespace=namespace,
        name=name,
        path=path,
    )
