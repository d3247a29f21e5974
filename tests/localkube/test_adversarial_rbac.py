"""RBAC ``resourceNames`` rules and single-object list/watch, as kube-apiserver authorizes them.

Spec: issue 3, "Authorization" (RBAC with resourceNames). Found by the adversarial review:
``kubectl get cm x -w`` (a watch with ``fieldSelector=metadata.name=x``) was refused for a
ServiceAccount whose Role names exactly that object, though Kubernetes allows it.
"""

from __future__ import annotations

import httpx
import pytest
import trio

from localkube.access import name_from_field_selector
from localkube.apiserver import ApiServerHandle
from tests.localkube.conftest import client_for
from tests.localkube.test_api_auth import _service_account_token

CMS = "/api/v1/namespaces/team/configmaps"


@pytest.mark.parametrize(
    ("selector", "name"),
    [
        ("metadata.name=c1", "c1"),
        ("metadata.name==c1", "c1"),
        ("metadata.namespace=team,metadata.name=c1", "c1"),
        ("metadata.name!=c1", ""),
        ("metadata.name=a/b", ""),
        ("metadata.namespace=team", ""),
        ("", ""),
    ],
)
def test_name_from_field_selector(selector: str, name: str) -> None:
    assert name_from_field_selector(selector) == name


async def test_resource_names_rule_allows_single_object_list_and_watch(
    admin_http: httpx.AsyncClient, apiserver: ApiServerHandle
) -> None:
    token, _ = await _service_account_token(admin_http)
    rbac = "/apis/rbac.authorization.k8s.io/v1/namespaces/team"
    await admin_http.post(
        f"{rbac}/roles",
        json={
            "metadata": {"name": "one-cm"},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["configmaps"],
                    "resourceNames": ["c1"],
                    "verbs": ["get", "list", "watch"],
                }
            ],
        },
    )
    await admin_http.post(
        f"{rbac}/rolebindings",
        json={
            "metadata": {"name": "one-cm"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "one-cm"},
            "subjects": [{"kind": "ServiceAccount", "name": "bot", "namespace": "team"}],
        },
    )
    for name in ("c1", "c2"):
        await admin_http.post(CMS, json={"metadata": {"name": name}})
    async with client_for(apiserver, token=token) as bot:
        listed = await bot.get(CMS, params={"fieldSelector": "metadata.name=c1"})
        assert listed.status_code == 200, listed.text
        assert [i["metadata"]["name"] for i in listed.json()["items"]] == ["c1"]

        other = await bot.get(CMS, params={"fieldSelector": "metadata.name=c2"})
        assert other.status_code == 403
        assert other.json()["message"] == (
            'configmaps "c2" is forbidden: User "system:serviceaccount:team:bot" cannot list '
            'resource "configmaps" in API group "" in the namespace "team"'
        )
        everything = await bot.get(CMS)
        assert everything.status_code == 403
        assert everything.json()["message"].startswith("configmaps is forbidden: User")

        params = {
            "fieldSelector": "metadata.name=c1",
            "watch": "true",
            "resourceVersion": listed.json()["metadata"]["resourceVersion"],
        }
        with trio.fail_after(5):
            async with bot.stream("GET", CMS, params=params) as response:
                assert response.status_code == 200
                await admin_http.patch(
                    f"{CMS}/c1",
                    json={"data": {"k": "v"}},
                    headers={"Content-Type": "application/merge-patch+json"},
                )
                async for line in response.aiter_lines():
                    if line:
                        assert '"MODIFIED"' in line
                        break
