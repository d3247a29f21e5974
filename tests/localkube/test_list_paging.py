"""Paged lists are consistent snapshots; an expired continue token is 410.

Spec: issue 3, "list and watch" (``limit``/``continue``). kube-apiserver serves every page
of a paged list at the first page's resourceVersion, so a client sees each object exactly
once and in the state it had then; found by the adversarial review: later pages used to
show the current state (new objects appeared, deleted ones vanished, under an old
resourceVersion).
"""

from __future__ import annotations

from typing import Any

import httpx

from localkube.apiserver import ApiServerConfig

CM = "/api/v1/namespaces/default/configmaps"
MERGE = {"Content-Type": "application/merge-patch+json"}


async def _page(client: httpx.AsyncClient, token: str = "") -> dict[str, Any]:
    params = {"limit": "2", "labelSelector": "set=p"}
    if token:
        params["continue"] = token
    r = await client.get(CM, params=params)
    assert r.status_code == 200, r.text
    return dict(r.json())


async def test_later_pages_show_the_first_pages_snapshot(admin_http: httpx.AsyncClient) -> None:
    for name in ("c1", "c2", "c3", "c4"):
        await admin_http.post(
            CM, json={"metadata": {"name": name, "labels": {"set": "p"}}, "data": {"v": "old"}}
        )
    first = await _page(admin_http)
    assert [i["metadata"]["name"] for i in first["items"]] == ["c1", "c2"]
    token = first["metadata"]["continue"]
    await admin_http.delete(f"{CM}/c3")
    await admin_http.patch(f"{CM}/c4", json={"data": {"v": "new"}}, headers=MERGE)
    await admin_http.post(CM, json={"metadata": {"name": "c5", "labels": {"set": "p"}}})
    second = await _page(admin_http, token)
    assert [(i["metadata"]["name"], i["data"]["v"]) for i in second["items"]] == [
        ("c3", "old"),
        ("c4", "old"),
    ]
    assert second["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    assert "continue" not in second["metadata"]


async def test_continue_token_older_than_the_history_is_410(start_apiserver: Any) -> None:
    from tests.localkube.conftest import client_for

    async with (
        start_apiserver(ApiServerConfig(history_limit=5)) as handle,
        client_for(handle) as client,
    ):
        for name in ("c1", "c2", "c3"):
            await client.post(CM, json={"metadata": {"name": name, "labels": {"set": "p"}}})
        token = (await _page(client))["metadata"]["continue"]
        for index in range(10):
            await client.post(CM, json={"metadata": {"name": f"x{index}"}})
        r = await client.get(CM, params={"limit": "2", "continue": token})
        assert r.status_code == 410, r.text
        status = r.json()
        assert status["reason"] == "Expired"
        assert status["message"].startswith(
            "The provided continue parameter is too old to display a consistent list result."
        )
