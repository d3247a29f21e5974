"""RBAC escalation prevention on Role/ClusterRole/binding writes (issue 3, "Authorization").

Found by the adversarial review: any subject allowed to create Roles or RoleBindings could
grant itself (or anyone) permissions it did not hold, which Kubernetes forbids and the
kruntimes chart depends on (its control plane creates runtimed's Role without
``escalate``).
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from localkube.apiserver import ApiServerHandle
from localkube.auth import escalation
from tests.localkube.conftest import client_for
from tests.localkube.test_api_auth import _service_account_token

RBAC = "/apis/rbac.authorization.k8s.io/v1"
NS_RBAC = f"{RBAC}/namespaces/team"
USER = 'user "system:serviceaccount:team:bot"'
GROUPS = '(groups=["system:serviceaccounts" "system:serviceaccounts:team" "system:authenticated"])'


def role(name: str, *rules: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": name}, "rules": list(rules)}


def binding(name: str, kind: str, role_name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role_name},
        "subjects": [{"kind": "ServiceAccount", "name": "bot", "namespace": "team"}],
    }


def rule(groups: list[str], resources: list[str], verbs: list[str], **extra: Any) -> Any:
    return {"apiGroups": groups, "resources": resources, "verbs": verbs, **extra}


def test_breakdown_and_cover_rules() -> None:
    owner = [
        rule([""], ["pods", "*/status"], ["get", "list"]),
        rule(["apps"], ["*"], ["*"]),
        rule([""], ["configmaps"], ["get"], resourceNames=["a"]),
        {"nonResourceURLs": ["/healthz", "/apis/*"], "verbs": ["get"]},
    ]
    wanted = [
        rule([""], ["pods", "pods/status", "secrets"], ["get"]),
        rule(["apps"], ["deployments/scale"], ["update"]),
        rule([""], ["configmaps"], ["get"], resourceNames=["a", "b"]),
        rule([""], ["configmaps"], ["get"]),
        {"nonResourceURLs": ["/apis/apps", "/metrics"], "verbs": ["get"]},
    ]
    missing = escalation.missing_rules(owner, wanted)
    assert [escalation.compact_string(r) for r in missing] == [
        '{APIGroups:[""], Resources:["secrets"], Verbs:["get"]}',
        '{APIGroups:[""], Resources:["configmaps"], ResourceNames:["b"], Verbs:["get"]}',
        '{APIGroups:[""], Resources:["configmaps"], Verbs:["get"]}',
        '{NonResourceURLs:["/metrics"], Verbs:["get"]}',
    ]
    merged = escalation.compact(
        escalation.breakdown(rule(["apps"], ["deployments"], ["get", "list", "get"]))
    )
    assert merged == [
        {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "list"]}
    ]


@pytest.fixture
async def bot(admin_http: httpx.AsyncClient, apiserver: ApiServerHandle) -> Any:
    """A ServiceAccount that may create Roles and RoleBindings and read Pods in "team"."""
    token, _ = await _service_account_token(admin_http)
    manager = role(
        "manager",
        rule(["rbac.authorization.k8s.io"], ["roles", "rolebindings"], ["create", "update"]),
        rule([""], ["pods"], ["get", "list"]),
    )
    assert (await admin_http.post(f"{NS_RBAC}/roles", json=manager)).status_code == 201
    r = await admin_http.post(f"{NS_RBAC}/rolebindings", json=binding("manager", "Role", "manager"))
    assert r.status_code == 201
    async with client_for(apiserver, token=token) as client:
        yield client


async def test_role_within_the_callers_permissions_is_allowed(bot: httpx.AsyncClient) -> None:
    r = await bot.post(f"{NS_RBAC}/roles", json=role("reader", rule([""], ["pods"], ["get"])))
    assert r.status_code == 201, r.text


async def test_role_granting_more_than_the_caller_holds_is_403(
    bot: httpx.AsyncClient, admin_http: httpx.AsyncClient
) -> None:
    wanted = role(
        "greedy",
        rule([""], ["pods"], ["get"]),
        rule([""], ["secrets"], ["get", "list"]),
        rule(["apps"], ["deployments"], ["create"]),
    )
    r = await bot.post(f"{NS_RBAC}/roles", json=wanted)
    assert r.status_code == 403, r.text
    assert r.json()["reason"] == "Forbidden"
    assert r.json()["message"] == (
        f'roles.rbac.authorization.k8s.io "greedy" is forbidden: {USER} {GROUPS} is attempting '
        "to grant RBAC permissions not currently held:\n"
        '{APIGroups:[""], Resources:["secrets"], Verbs:["get" "list"]}\n'
        '{APIGroups:["apps"], Resources:["deployments"], Verbs:["create"]}'
    )
    assert (await admin_http.get(f"{NS_RBAC}/roles/greedy")).status_code == 404
    # updating an allowed Role into a greedy one is refused the same way
    await bot.post(f"{NS_RBAC}/roles", json=role("grows", rule([""], ["pods"], ["get"])))
    r = await bot.put(f"{NS_RBAC}/roles/grows", json={**wanted, "metadata": {"name": "grows"}})
    assert r.status_code == 403, r.text
    # the admin (system:masters) may
    assert (await admin_http.post(f"{NS_RBAC}/roles", json=wanted)).status_code == 201


async def test_escalate_verb_allows_granting_more(
    bot: httpx.AsyncClient, admin_http: httpx.AsyncClient
) -> None:
    escalate = role("escalate", rule(["rbac.authorization.k8s.io"], ["roles"], ["escalate"]))
    await admin_http.post(f"{NS_RBAC}/roles", json=escalate)
    await admin_http.post(f"{NS_RBAC}/rolebindings", json=binding("escalate", "Role", "escalate"))
    r = await bot.post(f"{NS_RBAC}/roles", json=role("big", rule([""], ["secrets"], ["get"])))
    assert r.status_code == 201, r.text


async def test_binding_needs_the_roles_permissions_or_bind(
    bot: httpx.AsyncClient, admin_http: httpx.AsyncClient
) -> None:
    await admin_http.post(f"{NS_RBAC}/roles", json=role("pods", rule([""], ["pods"], ["get"])))
    r = await bot.post(f"{NS_RBAC}/rolebindings", json=binding("ok", "Role", "pods"))
    assert r.status_code == 201, r.text

    r = await bot.post(f"{NS_RBAC}/rolebindings", json=binding("view", "ClusterRole", "view"))
    assert r.status_code == 403, r.text
    assert r.json()["message"].startswith(
        f'rolebindings.rbac.authorization.k8s.io "view" is forbidden: {USER} {GROUPS} is '
        "attempting to grant RBAC permissions not currently held:\n"
    )
    r = await bot.post(f"{NS_RBAC}/rolebindings", json=binding("nope", "Role", "missing"))
    assert r.status_code == 400, r.text
    assert r.json()["message"] == 'roles.rbac.authorization.k8s.io "missing" not found'

    bind = role(
        "bind-view",
        rule(["rbac.authorization.k8s.io"], ["clusterroles"], ["bind"], resourceNames=["view"]),
    )
    await admin_http.post(f"{NS_RBAC}/roles", json=bind)
    await admin_http.post(f"{NS_RBAC}/rolebindings", json=binding("bind-view", "Role", "bind-view"))
    r = await bot.post(f"{NS_RBAC}/rolebindings", json=binding("view", "ClusterRole", "view"))
    assert r.status_code == 201, r.text
    r = await bot.post(f"{NS_RBAC}/rolebindings", json=binding("edit", "ClusterRole", "edit"))
    assert r.status_code == 403, r.text
