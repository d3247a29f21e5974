"""Lifecycle edge cases from the adversarial review: terminating namespaces, finalizers,
unconditional updates, concurrent conflicting writers.

Spec: issue 3, "Finalizers and deletionTimestamp", "Verbs" (409 on a stale
resourceVersion), namespaces; DESIGN.md "Invariants" (conditional status writes).
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import trio

from tests.localkube.conftest import watch_until

NS = "/api/v1/namespaces"
CM = "/api/v1/namespaces/default/configmaps"
MERGE = {"Content-Type": "application/merge-patch+json"}


async def test_terminating_namespace_waits_for_finalizers_and_refuses_new_content(
    admin_http: httpx.AsyncClient,
) -> None:
    await admin_http.post(NS, json={"metadata": {"name": "doomed"}})
    held = "/api/v1/namespaces/doomed/configmaps"
    r = await admin_http.post(held, json={"metadata": {"name": "held", "finalizers": ["x.io/f"]}})
    assert r.status_code == 201, r.text
    r = await admin_http.delete(f"{NS}/doomed")
    assert r.json()["spec"]["finalizers"] == ["kubernetes"]

    refused = await admin_http.post(held, json={"metadata": {"name": "late"}})
    assert refused.status_code == 403
    status = refused.json()
    assert status["reason"] == "Forbidden"
    assert status["message"] == (
        'configmaps "late" is forbidden: unable to create new content in namespace doomed '
        "because it is being terminated"
    )
    assert status["details"]["causes"][0]["reason"] == "NamespaceTerminating"
    refused = await admin_http.post(
        "/apis/apps/v1/namespaces/doomed/deployments", json={"metadata": {"generateName": "d-"}}
    )
    assert refused.json()["message"].startswith("deployments.apps is forbidden: unable to")

    with trio.fail_after(5):
        deleting = await watch_until(
            admin_http, held, "held", lambda o: bool(o and o["metadata"].get("deletionTimestamp"))
        )
    assert deleting is not None
    ns = (await admin_http.get(f"{NS}/doomed")).json()
    assert ns["status"]["phase"] == "Terminating"

    r = await admin_http.patch(
        f"{held}/held", json={"metadata": {"finalizers": None}}, headers=MERGE
    )
    assert r.status_code == 200, r.text
    with trio.fail_after(5):
        await watch_until(admin_http, NS, "doomed", lambda o: o is None)


async def test_finalizer_edge_cases(admin_http: httpx.AsyncClient) -> None:
    r = await admin_http.post(
        CM, json={"metadata": {"name": "fin", "finalizers": ["a.io/one", "a.io/two"]}}
    )
    assert r.status_code == 201
    first = await admin_http.delete(f"{CM}/fin")
    assert first.status_code == 200
    stamp = first.json()["metadata"]["deletionTimestamp"]
    # deleting again keeps the first deletionTimestamp and still answers the object
    second = await admin_http.delete(f"{CM}/fin")
    assert second.status_code == 200
    assert second.json()["metadata"]["deletionTimestamp"] == stamp
    # a new finalizer is refused; reordering or removing is fine
    added = await admin_http.patch(
        f"{CM}/fin",
        json={"metadata": {"finalizers": ["a.io/one", "a.io/two", "a.io/three"]}},
        headers=MERGE,
    )
    assert added.status_code == 422
    assert 'found new finalizers []string{"a.io/three"}' in added.json()["message"]
    removed = await admin_http.patch(
        f"{CM}/fin", json={"metadata": {"finalizers": ["a.io/two"]}}, headers=MERGE
    )
    assert removed.status_code == 200
    assert removed.json()["metadata"]["finalizers"] == ["a.io/two"]
    # the other fields cannot be changed either way, but data can
    r = await admin_http.patch(f"{CM}/fin", json={"data": {"k": "v"}}, headers=MERGE)
    assert r.status_code == 200
    last = await admin_http.patch(f"{CM}/fin", json={"metadata": {"finalizers": []}}, headers=MERGE)
    assert last.status_code == 200
    assert (await admin_http.get(f"{CM}/fin")).status_code == 404
    gone = await admin_http.delete(f"{CM}/fin")
    assert gone.status_code == 404


async def test_update_without_resource_version_is_unconditional(
    admin_http: httpx.AsyncClient,
) -> None:
    created = (await admin_http.post(CM, json={"metadata": {"name": "u"}})).json()
    await admin_http.patch(f"{CM}/u", json={"data": {"a": "1"}}, headers=MERGE)
    body: dict[str, Any] = {"metadata": {"name": "u"}, "data": {"b": "2"}}
    r = await admin_http.put(f"{CM}/u", json=body)
    assert r.status_code == 200, r.text
    assert r.json()["data"] == {"b": "2"}
    assert r.json()["metadata"]["uid"] == created["metadata"]["uid"]
    body["metadata"]["resourceVersion"] = created["metadata"]["resourceVersion"]
    stale = await admin_http.put(f"{CM}/u", json=body)
    assert stale.status_code == 409
    assert stale.json()["reason"] == "Conflict"


async def test_concurrent_conditional_updates_exactly_one_wins(
    admin_http: httpx.AsyncClient,
) -> None:
    base = (await admin_http.post(CM, json={"metadata": {"name": "race"}})).json()
    codes: list[int] = []

    async def update(index: int) -> None:
        body = json.loads(json.dumps(base))
        body["data"] = {"writer": str(index)}
        codes.append((await admin_http.put(f"{CM}/race", json=body)).status_code)

    async with trio.open_nursery() as nursery:
        for index in range(10):
            nursery.start_soon(update, index)
    assert sorted(codes) == [200] + [409] * 9
    stored = (await admin_http.get(f"{CM}/race")).json()
    assert int(stored["metadata"]["resourceVersion"]) > int(base["metadata"]["resourceVersion"])


async def test_a_body_uid_is_a_precondition_on_put_and_immutable_on_patch(
    admin_http: httpx.AsyncClient,
) -> None:
    # a stale writer holding the uid of a deleted-and-recreated object must not
    # overwrite the new one, even without a resourceVersion
    old = (await admin_http.post(CM, json={"metadata": {"name": "same"}})).json()
    await admin_http.delete(f"{CM}/same")
    new = (await admin_http.post(CM, json={"metadata": {"name": "same"}})).json()
    stale = {"metadata": {"name": "same", "uid": old["metadata"]["uid"]}, "data": {"a": "b"}}
    r = await admin_http.put(f"{CM}/same", json=stale)
    assert r.status_code == 409, r.text
    assert r.json()["message"] == (
        'Operation cannot be fulfilled on configmaps "same": Precondition failed: UID in '
        f"precondition: {old['metadata']['uid']}, UID in object meta: {new['metadata']['uid']}"
    )
    r = await admin_http.patch(
        f"{CM}/same", json={"metadata": {"uid": old["metadata"]["uid"]}}, headers=MERGE
    )
    assert r.status_code == 422, r.text
    assert r.json()["message"] == (
        f'ConfigMap "same" is invalid: metadata.uid: Invalid value: "{old["metadata"]["uid"]}": '
        "field is immutable"
    )
    stored = (await admin_http.get(f"{CM}/same")).json()
    assert stored["metadata"]["resourceVersion"] == new["metadata"]["resourceVersion"]
    # the object's own uid is fine
    same = {"metadata": {"name": "same", "uid": new["metadata"]["uid"]}, "data": {"c": "d"}}
    assert (await admin_http.put(f"{CM}/same", json=same)).status_code == 200
