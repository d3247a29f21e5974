"""The default cluster roles and bindings (localkube.bootstrap_rbac) under real RBAC."""

from __future__ import annotations

from typing import Any

import pytest

from localkube.auth.aggregation import aggregated_rules
from localkube.auth.rbac import StaticRbac, authorize
from localkube.auth.types import RequestAttributes, UserInfo
from localkube.bootstrap_rbac import default_cluster_role_bindings, default_cluster_roles

AUTHENTICATED = UserInfo("someone", ("system:authenticated",))
ANONYMOUS = UserInfo("system:anonymous", ("system:unauthenticated",))
SA = UserInfo(
    "system:serviceaccount:ns:sa",
    ("system:serviceaccounts", "system:serviceaccounts:ns", "system:authenticated"),
)


def cluster(*extra: dict[str, Any]) -> StaticRbac:
    return StaticRbac([*default_cluster_roles(), *default_cluster_role_bindings(), *extra])


def path(p: str, verb: str = "get") -> RequestAttributes:
    return RequestAttributes(verb=verb, resource_request=False, path=p)


@pytest.mark.parametrize(
    ("user", "attrs", "allowed"),
    [
        (AUTHENTICATED, path("/version"), True),
        (AUTHENTICATED, path("/api"), True),
        (AUTHENTICATED, path("/api/v1"), True),
        (AUTHENTICATED, path("/apis"), True),
        (AUTHENTICATED, path("/apis/apps/v1"), True),
        (AUTHENTICATED, path("/openapi/v3"), True),
        (AUTHENTICATED, path("/version", "post"), False),
        (AUTHENTICATED, path("/metrics"), False),
        (ANONYMOUS, path("/version"), True),
        (ANONYMOUS, path("/healthz"), True),
        (ANONYMOUS, path("/api"), False),
        (SA, path("/openid/v1/jwks"), True),
        (AUTHENTICATED, path("/openid/v1/jwks"), False),
        (
            AUTHENTICATED,
            RequestAttributes(
                verb="create", api_group="authorization.k8s.io", resource="selfsubjectaccessreviews"
            ),
            True,
        ),
        (
            AUTHENTICATED,
            RequestAttributes(
                verb="create", api_group="authorization.k8s.io", resource="selfsubjectrulesreviews"
            ),
            True,
        ),
        (
            AUTHENTICATED,
            RequestAttributes(
                verb="create", api_group="authentication.k8s.io", resource="selfsubjectreviews"
            ),
            True,
        ),
        (
            AUTHENTICATED,
            RequestAttributes(
                verb="create", api_group="authorization.k8s.io", resource="subjectaccessreviews"
            ),
            False,
        ),
        (AUTHENTICATED, RequestAttributes(verb="list", resource="pods", namespace="ns"), False),
        (
            UserInfo("root", ("system:masters",)),
            RequestAttributes(verb="delete", resource="namespaces", name="x"),
            True,
        ),
    ],
)
def test_default_grants(user: UserInfo, attrs: RequestAttributes, allowed: bool) -> None:
    assert authorize(user, attrs, cluster()).allowed is allowed


def test_cluster_admin_binding_grants_masters_even_through_rbac_alone() -> None:
    roles = {r["metadata"]["name"]: r for r in default_cluster_roles()}
    rule = roles["cluster-admin"]["rules"][0]
    assert rule == {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}
    bindings = {b["metadata"]["name"]: b for b in default_cluster_role_bindings()}
    assert bindings["cluster-admin"]["subjects"][0]["name"] == "system:masters"


def role_binding(role: str) -> dict[str, Any]:
    return {
        "kind": "RoleBinding",
        "metadata": {"name": f"{role}-binding", "namespace": "ns"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "User", "name": "someone"}],
    }


def req(verb: str, resource: str, group: str = "", sub: str = "") -> RequestAttributes:
    return RequestAttributes(
        verb=verb, api_group=group, resource=resource, subresource=sub, namespace="ns", name="x"
    )


@pytest.mark.parametrize(
    ("role", "attrs", "allowed"),
    [
        ("view", req("get", "pods"), True),
        ("view", req("get", "pods", sub="log"), True),
        ("view", req("get", "secrets"), False),
        ("view", req("update", "configmaps"), False),
        ("view", req("list", "deployments", "apps"), True),
        ("edit", req("get", "pods"), True),  # aggregated from view
        ("edit", req("get", "secrets"), True),
        ("edit", req("update", "configmaps"), True),
        ("edit", req("create", "serviceaccounts", sub="token"), True),
        ("edit", req("update", "leases", "coordination.k8s.io"), True),
        ("edit", req("create", "rolebindings", "rbac.authorization.k8s.io"), False),
        ("admin", req("create", "rolebindings", "rbac.authorization.k8s.io"), True),
        ("admin", req("delete", "deployments", "apps"), True),  # aggregated from edit
        ("admin", req("list", "namespaces"), True),  # from view, two hops
        ("admin", req("get", "runs", "kruntimes.io"), False),  # CRDs need their own aggregate role
    ],
)
def test_user_facing_roles_aggregate(role: str, attrs: RequestAttributes, allowed: bool) -> None:
    assert authorize(AUTHENTICATED, attrs, cluster(role_binding(role))).allowed is allowed


def test_crd_roles_join_by_label() -> None:
    run_viewer = {
        "kind": "ClusterRole",
        "metadata": {
            "name": "runs-view",
            "labels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"},
        },
        "rules": [{"apiGroups": ["kruntimes.io"], "resources": ["runs"], "verbs": ["get"]}],
    }
    rbac = cluster(run_viewer, role_binding("admin"))
    assert authorize(AUTHENTICATED, req("get", "runs", "kruntimes.io"), rbac).allowed


def test_aggregated_roles_show_their_union() -> None:
    roles = default_cluster_roles()
    by_name = {r["metadata"]["name"]: r for r in roles}
    view = aggregated_rules(by_name["view"], roles)
    edit = aggregated_rules(by_name["edit"], roles)
    admin = aggregated_rules(by_name["admin"], roles)
    assert view
    assert edit
    assert admin
    assert all(rule in edit for rule in view)
    assert all(rule in admin for rule in edit)


def test_every_call_returns_fresh_objects() -> None:
    first = default_cluster_roles()
    first[0]["metadata"]["name"] = "changed"
    assert default_cluster_roles()[0]["metadata"]["name"] == "admin"
    for obj in default_cluster_roles() + default_cluster_role_bindings():
        assert obj["apiVersion"] == "rbac.authorization.k8s.io/v1"
        assert obj["metadata"]["labels"]["kubernetes.io/bootstrapping"] == "rbac-defaults"
