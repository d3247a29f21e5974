"""Authentication and RBAC over HTTPS (issue 3, "Authentication", "Authorization").

The RBAC evaluation itself is localkube.auth's (tested there); these tests check that the
server applies it to every request and answers 401/403 exactly as kube-apiserver does.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import trio
import trio.lowlevel

from localkube.apiserver import ApiServerConfig, ApiServerHandle
from localkube.pki import ClusterPKI
from tests.localkube.conftest import client_for

RBAC = "/apis/rbac.authorization.k8s.io/v1/namespaces/team"


async def _service_account_token(
    admin: httpx.AsyncClient, namespace: str = "team", name: str = "bot"
) -> tuple[str, dict[str, Any]]:
    await admin.post("/api/v1/namespaces", json={"metadata": {"name": namespace}})
    await admin.post(
        f"/api/v1/namespaces/{namespace}/serviceaccounts", json={"metadata": {"name": name}}
    )
    r = await admin.post(
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
        json={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 600},
        },
    )
    assert r.status_code == 201, r.text
    return r.json()["status"]["token"], r.json()


async def test_missing_and_forged_tokens_are_401(apiserver: ApiServerHandle) -> None:
    async with httpx.AsyncClient(base_url=apiserver.url, verify=False) as anonymous:
        r = await anonymous.get("/api/v1/namespaces")
        assert r.status_code == 401
        assert r.json()["reason"] == "Unauthorized"
        assert (await anonymous.get("/version")).status_code == 200, "/version is public"
    async with client_for(apiserver, token="not-a-token") as forged:
        assert (await forged.get("/api/v1/namespaces")).status_code == 401
    async with client_for(apiserver, token=apiserver.admin_token + "x") as wrong:
        assert (await wrong.get("/api")).status_code == 401


async def test_token_request_and_rbac(
    admin_http: httpx.AsyncClient, apiserver: ApiServerHandle
) -> None:
    token, response = await _service_account_token(admin_http)
    assert response["kind"] == "TokenRequest"
    assert response["status"]["expirationTimestamp"]
    async with client_for(apiserver, token=token) as bot:
        r = await bot.get("/api/v1/namespaces/team/pods")
        assert r.status_code == 403
        assert r.json()["message"] == (
            'pods is forbidden: User "system:serviceaccount:team:bot" cannot list resource "pods" '
            'in API group "" in the namespace "team"'
        )
        await admin_http.post(
            f"{RBAC}/roles",
            json={
                "metadata": {"name": "reader"},
                "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}],
            },
        )
        await admin_http.post(
            f"{RBAC}/rolebindings",
            json={
                "metadata": {"name": "bot-reader"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Role",
                    "name": "reader",
                },
                "subjects": [{"kind": "ServiceAccount", "name": "bot", "namespace": "team"}],
            },
        )
        assert (await bot.get("/api/v1/namespaces/team/pods")).status_code == 200
        assert (await bot.get("/api/v1/namespaces/default/pods")).status_code == 403
        assert (await bot.delete("/api/v1/namespaces/team/pods/x")).status_code == 403
        ssar = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {
                "resourceAttributes": {"namespace": "team", "verb": "list", "resource": "pods"}
            },
        }
        r = await bot.post("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", json=ssar)
        assert r.status_code == 201
        assert r.json()["status"]["allowed"] is True
        ssar["spec"]["resourceAttributes"]["verb"] = "delete"
        assert (
            await bot.post("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", json=ssar)
        ).json()["status"]["allowed"] is False
        sar = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": "system:serviceaccount:team:bot",
                "resourceAttributes": {"namespace": "team", "verb": "get", "resource": "pods"},
            },
        }
        assert (
            await bot.post("/apis/authorization.k8s.io/v1/subjectaccessreviews", json=sar)
        ).status_code == 403
        r = await admin_http.post("/apis/authorization.k8s.io/v1/subjectaccessreviews", json=sar)
        assert r.status_code == 201
        assert r.json()["status"]["allowed"] is True
        review = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token},
        }
        r = await admin_http.post("/apis/authentication.k8s.io/v1/tokenreviews", json=review)
        assert r.json()["status"]["authenticated"] is True
        assert r.json()["status"]["user"]["username"] == "system:serviceaccount:team:bot"


async def test_token_of_deleted_service_account_is_401(
    admin_http: httpx.AsyncClient, apiserver: ApiServerHandle
) -> None:
    token, _ = await _service_account_token(admin_http)
    await admin_http.delete("/api/v1/namespaces/team/serviceaccounts/bot")
    async with client_for(apiserver, token=token) as bot:
        assert (await bot.get("/api")).status_code == 401


async def test_expired_token_is_401(tmp_path: Path, start_apiserver: Any) -> None:
    async with (
        start_apiserver(ApiServerConfig(state_dir=tmp_path)) as handle,
        client_for(handle) as admin,
    ):
        await admin.post(
            "/api/v1/namespaces/default/serviceaccounts", json={"metadata": {"name": "old"}}
        )
        sa = (await admin.get("/api/v1/namespaces/default/serviceaccounts/old")).json()
        pki = ClusterPKI.create(tmp_path, ["127.0.0.1"])
        expired, _ = pki.token_authority.issue(
            "default",
            "old",
            sa["metadata"]["uid"],
            audiences=[],
            expiration_seconds=600,
            now=time.time() - 3600,
        )
        valid, _ = pki.token_authority.issue(
            "default",
            "old",
            sa["metadata"]["uid"],
            audiences=[],
            expiration_seconds=600,
            now=time.time(),
        )
        async with client_for(handle, token=expired) as client:
            assert (await client.get("/api")).status_code == 401
        async with client_for(handle, token=valid) as client:
            assert (await client.get("/api")).status_code == 200


async def test_token_request_rejects_short_expiry(admin_http: httpx.AsyncClient) -> None:
    await admin_http.post(
        "/api/v1/namespaces/default/serviceaccounts", json={"metadata": {"name": "x"}}
    )
    r = await admin_http.post(
        "/api/v1/namespaces/default/serviceaccounts/x/token",
        json={"spec": {"expirationSeconds": 10}},
    )
    assert r.status_code == 422
    assert r.json()["details"]["causes"][0]["field"] == "spec.expirationSeconds"
    assert (
        await admin_http.post("/api/v1/namespaces/default/serviceaccounts/none/token", json={})
    ).status_code == 404


async def test_discovery_documents(admin_http: httpx.AsyncClient) -> None:
    version = (await admin_http.get("/version")).json()
    assert version["major"] == "1"
    assert version["minor"] == "32"
    assert (await admin_http.get("/api")).json()["versions"] == ["v1"]
    core = (await admin_http.get("/api/v1")).json()
    pods = next(r for r in core["resources"] if r["name"] == "pods")
    assert pods == {**pods, "kind": "Pod", "namespaced": True, "shortNames": ["po"]}
    names = {r["name"] for r in core["resources"]}
    assert {"pods/status", "pods/log", "serviceaccounts/token", "namespaces", "events"} <= names
    apps = (await admin_http.get("/apis/apps")).json()
    assert apps["preferredVersion"]["groupVersion"] == "apps/v1"
    groups = {g["name"] for g in (await admin_http.get("/apis")).json()["groups"]}
    assert {
        "apps",
        "coordination.k8s.io",
        "discovery.k8s.io",
        "events.k8s.io",
        "rbac.authorization.k8s.io",
        "authorization.k8s.io",
        "authentication.k8s.io",
        "apiextensions.k8s.io",
    } <= groups
    assert (await admin_http.get("/apis/nothing.example")).status_code == 404


async def test_sqlite_state_survives_restart(tmp_path: Path, start_apiserver: Any) -> None:
    async with (
        start_apiserver(ApiServerConfig(state_dir=tmp_path)) as first,
        client_for(first) as admin,
    ):
        await admin.post(
            "/api/v1/namespaces/default/configmaps",
            json={"metadata": {"name": "keep"}, "data": {"a": "1"}},
        )
        before = int(
            (await admin.get("/api/v1/namespaces/default/configmaps")).json()["metadata"][
                "resourceVersion"
            ]
        )
    await trio.lowlevel.checkpoint()
    async with (
        start_apiserver(ApiServerConfig(state_dir=tmp_path)) as second,
        client_for(second) as admin,
    ):
        kept = (await admin.get("/api/v1/namespaces/default/configmaps/keep")).json()
        assert kept["data"] == {"a": "1"}
        created = (
            await admin.post(
                "/api/v1/namespaces/default/configmaps", json={"metadata": {"name": "new"}}
            )
        ).json()
        assert int(created["metadata"]["resourceVersion"]) > before
        assert second.kubeconfig_path == tmp_path / "kubeconfig"
        assert second.admin_token == first.admin_token


async def test_pod_bound_token_dies_with_its_pod(
    admin_http: httpx.AsyncClient, apiserver: ApiServerHandle
) -> None:
    await admin_http.post(
        "/api/v1/namespaces/default/serviceaccounts", json={"metadata": {"name": "runner"}}
    )
    pod = (
        await admin_http.post(
            "/api/v1/namespaces/default/pods",
            json={
                "metadata": {"name": "p"},
                "spec": {
                    "serviceAccountName": "runner",
                    "containers": [{"name": "c", "image": "x"}],
                },
            },
        )
    ).json()
    request = {
        "spec": {
            "boundObjectRef": {
                "kind": "Pod",
                "apiVersion": "v1",
                "name": "p",
                "uid": pod["metadata"]["uid"],
            }
        }
    }
    r = await admin_http.post(
        "/api/v1/namespaces/default/serviceaccounts/runner/token", json=request
    )
    token = r.json()["status"]["token"]
    async with client_for(apiserver, token=token) as client:
        assert (await client.get("/api")).status_code == 200
        await admin_http.delete("/api/v1/namespaces/default/pods/p")
        assert (await client.get("/api")).status_code == 401


async def test_impersonation(admin_http: httpx.AsyncClient, apiserver: ApiServerHandle) -> None:
    token, _ = await _service_account_token(admin_http)
    as_bot = {"Impersonate-User": "system:serviceaccount:team:bot"}
    r = await admin_http.get("/api/v1/namespaces/team/pods", headers=as_bot)
    assert r.status_code == 403
    assert 'User "system:serviceaccount:team:bot" cannot list' in r.json()["message"]
    whoami = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    r = await admin_http.post(
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        json=whoami,
        headers={"Impersonate-User": "alice", "Impersonate-Group": "devs"},
    )
    info = r.json()["status"]["userInfo"]
    assert info["username"] == "alice"
    assert info["groups"] == ["devs", "system:authenticated"]
    async with client_for(apiserver, token=token) as bot:
        r = await bot.get("/api", headers={"Impersonate-User": "alice"})
        assert r.status_code == 403
        assert r.json()["message"] == (
            'users "alice" is forbidden: User "system:serviceaccount:team:bot" cannot impersonate '
            'resource "users" in API group "" at the cluster scope'
        )
    r = await admin_http.get("/api", headers={"Impersonate-Group": "devs"})
    assert r.status_code == 400


async def test_aggregated_discovery_for_kubectl(admin_http: httpx.AsyncClient) -> None:
    accept = {
        "Accept": "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
    }
    r = await admin_http.get("/apis", headers=accept)
    assert (
        r.headers["content-type"]
        == "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    )
    groups = {item["metadata"]["name"]: item for item in r.json()["items"]}
    apps = groups["apps"]["versions"][0]
    deployments = next(res for res in apps["resources"] if res["resource"] == "deployments")
    assert deployments["scope"] == "Namespaced"
    assert deployments["responseKind"] == {"group": "apps", "version": "v1", "kind": "Deployment"}
    assert {s["subresource"] for s in deployments["subresources"]} == {"status", "scale"}
    core = (await admin_http.get("/api", headers=accept)).json()["items"]
    assert [item["metadata"]["name"] for item in core] == [""]
    plain = await admin_http.get("/apis")
    assert plain.json()["kind"] == "APIGroupList", "a plain Accept gets the legacy document"
