"""Deleting a CRD waits for its objects' finalizers, as kube-apiserver does.

Spec: issue 3, "CRDs" and "Finalizers and deletionTimestamp". Found by the adversarial
review: deleting a CRD removed its objects at once, ignoring their finalizers, so a
controller never got to clean up.
"""

from __future__ import annotations

import json

import httpx
import trio

from tests.localkube.test_api_crds import CRDS, WIDGETS, crd, widget

MERGE = {"Content-Type": "application/merge-patch+json"}
CRD_URL = f"{CRDS}/widgets.example.com"


async def test_crd_deletion_waits_for_object_finalizers(admin_http: httpx.AsyncClient) -> None:
    assert (await admin_http.post(CRDS, json=crd())).status_code == 201
    held = widget("held")
    held["metadata"]["finalizers"] = ["example.com/cleanup"]
    assert (await admin_http.post(WIDGETS, json=held)).status_code == 201
    assert (await admin_http.post(WIDGETS, json=widget("plain"))).status_code == 201

    r = await admin_http.delete(CRD_URL)
    assert r.status_code == 200
    terminating = r.json()
    assert "customresourcecleanup.apiextensions.k8s.io" in terminating["metadata"]["finalizers"]
    conditions = {c["type"]: c for c in terminating["status"]["conditions"]}
    assert conditions["Terminating"]["status"] == "True"
    assert conditions["Terminating"]["reason"] == "InstanceDeletionInProgress"

    # objects are deleted (finalizers honoured) and still served so they can be finalized
    assert (await admin_http.get(f"{WIDGETS}/plain")).status_code == 404
    still = (await admin_http.get(f"{WIDGETS}/held")).json()
    assert still["metadata"]["deletionTimestamp"]
    refused = await admin_http.post(WIDGETS, json=widget("late"))
    assert refused.status_code == 405
    assert refused.json()["message"] == (
        "create not allowed while custom resource definition is terminating"
    )
    assert (await admin_http.get(CRD_URL)).status_code == 200

    r = await admin_http.patch(
        f"{WIDGETS}/held", json={"metadata": {"finalizers": None}}, headers=MERGE
    )
    assert r.status_code == 200, r.text
    assert (await admin_http.get(CRD_URL)).status_code == 404
    assert (await admin_http.get(WIDGETS)).status_code == 404
    # recreating starts empty
    assert (await admin_http.post(CRDS, json=crd())).status_code == 201
    assert (await admin_http.get(WIDGETS)).json()["items"] == []


async def test_empty_crd_is_deleted_at_once(admin_http: httpx.AsyncClient) -> None:
    assert (await admin_http.post(CRDS, json=crd())).status_code == 201
    r = await admin_http.delete(CRD_URL)
    assert r.status_code == 200
    assert (await admin_http.get(CRD_URL)).status_code == 404
    assert (await admin_http.get(WIDGETS)).status_code == 404


async def test_watches_of_a_deleted_crds_kind_end(admin_http: httpx.AsyncClient) -> None:
    assert (await admin_http.post(CRDS, json=crd())).status_code == 201
    assert (await admin_http.post(WIDGETS, json=widget("w"))).status_code == 201
    listed = (await admin_http.get(WIDGETS)).json()
    params = {"watch": "true", "resourceVersion": listed["metadata"]["resourceVersion"]}
    events = []
    with trio.fail_after(5):
        async with admin_http.stream("GET", WIDGETS, params=params) as response:
            assert (await admin_http.delete(CRD_URL)).status_code == 200
            async for line in response.aiter_lines():
                if line:
                    events.append(json.loads(line))
    # the stream ended after the object's deletion, instead of hanging for ever
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("DELETED", "w")]
    assert (await admin_http.get(WIDGETS)).status_code == 404
