"""Access, token and rules reviews (localkube.auth.reviews) over real RBAC and tokens."""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from localkube.auth.authn import ADMIN_USER, BearerAuthenticator
from localkube.auth.rbac import StaticRbac, authorize, rules_for
from localkube.auth.reviews import (
    local_subject_access_review,
    self_subject_access_review,
    self_subject_review,
    self_subject_rules_review,
    subject_access_review,
    token_review,
)
from localkube.auth.tokens import TokenAuthority
from localkube.auth.types import RequestAttributes, UserInfo
from localkube.bootstrap_rbac import default_cluster_role_bindings, default_cluster_roles
from localkube.errors import ApiError

NOW = 1_700_000_000.0
ISSUER = "https://kubernetes.default.svc.cluster.local"
SA = UserInfo(
    "system:serviceaccount:ns:runner",
    ("system:serviceaccounts", "system:serviceaccounts:ns", "system:authenticated"),
)

RBAC = StaticRbac(
    [
        *default_cluster_roles(),
        *default_cluster_role_bindings(),
        {
            "kind": "Role",
            "metadata": {"name": "run-reader", "namespace": "ns"},
            "rules": [{"apiGroups": ["kruntimes.io"], "resources": ["runs"], "verbs": ["get"]}],
        },
        {
            "kind": "RoleBinding",
            "metadata": {"name": "runner-reads", "namespace": "ns"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "run-reader",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "runner"}],
        },
    ]
)


def authz(user: UserInfo, attrs: RequestAttributes) -> Any:
    return authorize(user, attrs, RBAC)


def ssar(resource_attributes: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": dict(spec),
    }
    if resource_attributes is not None:
        body["spec"]["resourceAttributes"] = resource_attributes
    return body


def test_self_subject_access_review_answers_for_the_caller() -> None:
    body = ssar(
        {
            "namespace": "ns",
            "verb": "get",
            "group": "kruntimes.io",
            "resource": "runs",
            "name": "r1",
        }
    )
    response = self_subject_access_review(body, caller=SA, authorize=authz)
    assert response["kind"] == "SelfSubjectAccessReview"
    assert response["apiVersion"] == "authorization.k8s.io/v1"
    assert response["spec"] == body["spec"]
    assert response["status"]["allowed"] is True
    assert response["status"]["reason"].startswith('RBAC: allowed by RoleBinding "runner-reads/ns"')
    denied = self_subject_access_review(
        ssar({"namespace": "other", "verb": "get", "group": "kruntimes.io", "resource": "runs"}),
        caller=SA,
        authorize=authz,
    )
    assert denied["status"] == {"allowed": False}
    assert body["spec"].get("status") is None  # request not mutated


def test_self_subject_access_review_non_resource() -> None:
    body = ssar(nonResourceAttributes={"path": "/version", "verb": "get"})
    assert self_subject_access_review(body, caller=SA, authorize=authz)["status"]["allowed"] is True
    body = ssar(nonResourceAttributes={"path": "/metrics", "verb": "get"})
    assert (
        self_subject_access_review(body, caller=SA, authorize=authz)["status"]["allowed"] is False
    )


def test_access_review_requires_exactly_one_attribute_set() -> None:
    with pytest.raises(ApiError) as excinfo:
        self_subject_access_review(ssar(), caller=SA, authorize=authz)
    assert excinfo.value.code == 422
    assert excinfo.value.message == (
        'SelfSubjectAccessReview.authorization.k8s.io "" is invalid: spec.resourceAttributes: '
        'Invalid value: "null": exactly one of nonResourceAttributes or resourceAttributes must be specified'
    )
    both = ssar({"verb": "get"}, nonResourceAttributes={"path": "/", "verb": "get"})
    with pytest.raises(ApiError, match="cannot be specified in combination") as excinfo:
        self_subject_access_review(both, caller=SA, authorize=authz)
    assert excinfo.value.details is not None
    assert excinfo.value.details["causes"][0]["field"] == "spec.nonResourceAttributes"


@pytest.mark.parametrize(
    "body",
    [
        [],
        {"kind": "TokenReview", "spec": {}},
        {"spec": []},
        {"spec": {"resourceAttributes": {"verb": 3}}},
        {"spec": {"resourceAttributes": "get"}},
    ],
)
def test_malformed_bodies_are_bad_requests(body: Any) -> None:
    with pytest.raises(ApiError) as excinfo:
        self_subject_access_review(body, caller=SA, authorize=authz)
    assert excinfo.value.code == 400


def test_subject_access_review_needs_privilege() -> None:
    body: dict[str, Any] = {
        "kind": "SubjectAccessReview",
        "spec": {
            "user": "system:serviceaccount:ns:runner",
            "resourceAttributes": {
                "namespace": "ns",
                "verb": "get",
                "group": "kruntimes.io",
                "resource": "runs",
            },
        },
    }
    with pytest.raises(ApiError) as excinfo:
        subject_access_review(body, caller=SA, authorize=authz)
    assert excinfo.value.code == 403
    assert excinfo.value.message == (
        'subjectaccessreviews.authorization.k8s.io is forbidden: User "system:serviceaccount:ns:runner" '
        'cannot create resource "subjectaccessreviews" in API group "authorization.k8s.io" at the cluster scope'
    )
    # the user alone (no groups given) is evaluated exactly as specified
    response = subject_access_review(body, caller=ADMIN_USER, authorize=authz)
    assert response["status"]["allowed"] is True
    assert response["apiVersion"] == "authorization.k8s.io/v1"
    body["spec"]["user"] = "someone-else"
    assert (
        subject_access_review(body, caller=ADMIN_USER, authorize=authz)["status"]["allowed"]
        is False
    )
    body["spec"]["groups"] = ["system:masters"]
    assert (
        subject_access_review(body, caller=ADMIN_USER, authorize=authz)["status"]["allowed"] is True
    )


def test_subject_access_review_needs_a_subject() -> None:
    body = {"kind": "SubjectAccessReview", "spec": {"resourceAttributes": {"verb": "get"}}}
    with pytest.raises(
        ApiError, match="at least one of user or group must be specified"
    ) as excinfo:
        subject_access_review(body, caller=ADMIN_USER, authorize=authz)
    assert excinfo.value.code == 422


def test_auth_delegator_may_create_subject_access_reviews() -> None:
    delegate = UserInfo("proxy", ("system:authenticated",))
    rbac = StaticRbac(
        [
            *RBAC.objects,
            {
                "kind": "ClusterRoleBinding",
                "metadata": {"name": "proxy"},
                "roleRef": {"kind": "ClusterRole", "name": "system:auth-delegator"},
                "subjects": [{"kind": "User", "name": "proxy"}],
            },
        ]
    )
    body: dict[str, Any] = {
        "kind": "SubjectAccessReview",
        "spec": {"user": "x", "nonResourceAttributes": {"path": "/version", "verb": "get"}},
    }
    response = subject_access_review(
        body, caller=delegate, authorize=partial(_authorize_with, rbac)
    )
    assert response["status"]["allowed"] is False  # "x" has no groups, so no discovery


def _authorize_with(rbac: StaticRbac, user: UserInfo, attrs: RequestAttributes) -> Any:
    return authorize(user, attrs, rbac)


def test_local_subject_access_review_is_scoped_to_its_namespace() -> None:
    body: dict[str, Any] = {
        "kind": "LocalSubjectAccessReview",
        "metadata": {"namespace": "ns"},
        "spec": {
            "user": SA.username,
            "resourceAttributes": {"verb": "get", "group": "kruntimes.io", "resource": "runs"},
        },
    }
    response = local_subject_access_review(body, namespace="ns", caller=ADMIN_USER, authorize=authz)
    assert response["status"]["allowed"] is True
    body["spec"]["resourceAttributes"]["namespace"] = "other"
    with pytest.raises(ApiError, match="must match namespace") as excinfo:
        local_subject_access_review(body, namespace="ns", caller=ADMIN_USER, authorize=authz)
    assert excinfo.value.code == 400
    with pytest.raises(ApiError) as excinfo:
        local_subject_access_review(body, namespace="ns", caller=SA, authorize=authz)
    assert excinfo.value.code == 403


def test_token_review() -> None:
    ta = TokenAuthority(ec.generate_private_key(ec.SECP256R1()), ISSUER)
    authn = BearerAuthenticator(admin_token="t" * 32, token_authority=ta)

    def verify(token: str, audiences: list[str] | None) -> Any:
        return authn.verify(token, now=NOW, audiences=audiences)

    token, _ = ta.issue(
        "ns", "runner", "uid-1", audiences=["gateway"], expiration_seconds=600, now=NOW
    )
    body: dict[str, Any] = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": token, "audiences": ["gateway"]},
    }
    status = token_review(body, caller=ADMIN_USER, authorize=authz, verify=verify)["status"]
    assert status["authenticated"] is True
    assert status["user"]["username"] == "system:serviceaccount:ns:runner"
    assert status["user"]["uid"] == "uid-1"
    assert status["user"]["groups"][-1] == "system:authenticated"
    assert status["audiences"] == ["gateway"]
    # default audience is the API's, which this token lacks
    body["spec"]["audiences"] = []
    status = token_review(body, caller=ADMIN_USER, authorize=authz, verify=verify)["status"]
    assert status == {"user": {}, "error": "invalid bearer token"}
    body["spec"]["token"] = "garbage"
    assert (
        "authenticated"
        not in token_review(body, caller=ADMIN_USER, authorize=authz, verify=verify)["status"]
    )
    with pytest.raises(ApiError) as excinfo:
        token_review(body, caller=SA, authorize=authz, verify=verify)
    assert excinfo.value.code == 403
    body["spec"]["token"] = ""
    with pytest.raises(ApiError, match="token is required") as excinfo:
        token_review(body, caller=ADMIN_USER, authorize=authz, verify=verify)
    assert excinfo.value.code == 400


def test_self_subject_rules_review() -> None:
    body = {"kind": "SelfSubjectRulesReview", "spec": {"namespace": "ns"}}
    status = self_subject_rules_review(
        body, caller=SA, rules_for=lambda u, ns: rules_for(u, ns, RBAC)
    )["status"]
    assert {"verbs": ["get"], "apiGroups": ["kruntimes.io"], "resources": ["runs"]} in status[
        "resourceRules"
    ]
    assert {
        "verbs": ["create"],
        "apiGroups": ["authorization.k8s.io"],
        "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
    } in status["resourceRules"]
    assert any("/version" in r["nonResourceURLs"] for r in status["nonResourceRules"])
    assert status["incomplete"] is False


def test_self_subject_review() -> None:
    response = self_subject_review({"kind": "SelfSubjectReview"}, caller=SA)
    assert response["status"]["userInfo"]["username"] == SA.username
    assert response["apiVersion"] == "authentication.k8s.io/v1"
