"""Wrong-typed ``metadata`` maps and lists are decode errors (400), not validation (422).

kube-apiserver decodes a custom resource's ``metadata`` into ObjectMeta, and a built-in
kind's whole body into its Go type, so ``labels: 5`` fails decoding with 400 BadRequest
and Go's ``json: cannot unmarshal ...`` message naming the field; only well-typed values
reach ObjectMeta validation's 422 (label syntax, finalizer names, required owner fields).
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from localkube import object_meta
from localkube.errors import ApiError
from tests.localkube.test_api_crds import WIDGETS, widget, widgets  # noqa: F401

CM = "/api/v1/namespaces/default/configmaps"
MERGE = {"Content-Type": "application/merge-patch+json"}
OWNER = {"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "u"}

#: (metadata, the Go decoding problem with ``{path}`` for the field path).
CASES: list[tuple[dict[str, Any], str]] = [
    ({"labels": 5}, "cannot unmarshal number into Go struct field ObjectMeta.{path}labels of type map[string]string"),
    ({"labels": ["a"]}, "cannot unmarshal array into Go struct field ObjectMeta.{path}labels of type map[string]string"),
    ({"labels": {"a": 1}}, "cannot unmarshal number into Go struct field ObjectMeta.{path}labels of type string"),
    ({"annotations": "x"}, "cannot unmarshal string into Go struct field ObjectMeta.{path}annotations of type map[string]string"),
    ({"annotations": {"a": {"b": "c"}}}, "cannot unmarshal object into Go struct field ObjectMeta.{path}annotations of type string"),
    ({"finalizers": "example.com/f"}, "cannot unmarshal string into Go struct field ObjectMeta.{path}finalizers of type []string"),
    ({"finalizers": [True]}, "cannot unmarshal bool into Go struct field ObjectMeta.{path}finalizers of type string"),
    ({"ownerReferences": {}}, "cannot unmarshal object into Go struct field ObjectMeta.{path}ownerReferences of type []v1.OwnerReference"),
    ({"ownerReferences": ["o"]}, "cannot unmarshal string into Go struct field ObjectMeta.{path}ownerReferences of type v1.OwnerReference"),
    ({"ownerReferences": [{**OWNER, "uid": 7}]}, "cannot unmarshal number into Go struct field OwnerReference.{path}ownerReferences.uid of type types.UID"),
    ({"ownerReferences": [{**OWNER, "controller": "yes"}]}, "cannot unmarshal string into Go struct field OwnerReference.{path}ownerReferences.controller of type bool"),
]  # fmt: skip


@pytest.mark.parametrize(("metadata", "problem"), CASES)
async def test_wrong_typed_collections_of_a_custom_object_are_400(
    widgets: httpx.AsyncClient,  # noqa: F811
    metadata: dict[str, Any],
    problem: str,
) -> None:
    message = 'Widget in version "v1" cannot be handled as a Widget: json: ' + problem.format(
        path=""
    )
    body = widget("bad")
    body["metadata"].update(metadata)
    r = await widgets.post(WIDGETS, json=body)
    assert (r.status_code, r.json()["reason"]) == (400, "BadRequest"), r.text
    assert r.json()["message"] == message
    assert (await widgets.get(f"{WIDGETS}/bad")).status_code == 404

    created = (await widgets.post(WIDGETS, json=widget("good"))).json()
    r = await widgets.patch(
        f"{WIDGETS}/good", content=json.dumps({"metadata": metadata}), headers=MERGE
    )
    assert (r.status_code, r.json()["message"]) == (400, message)
    replaced = json.loads(json.dumps(created))
    replaced["metadata"].update(metadata)
    r = await widgets.put(f"{WIDGETS}/good", json=replaced)
    assert (r.status_code, r.json()["message"]) == (400, message)
    stored = (await widgets.get(f"{WIDGETS}/good")).json()
    assert stored["metadata"] == created["metadata"]


@pytest.mark.parametrize(("metadata", "problem"), CASES)
async def test_wrong_typed_collections_of_a_built_in_object_are_400(
    admin_http: httpx.AsyncClient, metadata: dict[str, Any], problem: str
) -> None:
    # a built-in body is decoded whole, so Go names the path from the object's root
    message = 'ConfigMap in version "v1" cannot be handled as a ConfigMap: json: ' + problem.format(
        path="metadata."
    )
    r = await admin_http.post(CM, json={"metadata": {"name": "bad", **metadata}})
    assert (r.status_code, r.json()["reason"]) == (400, "BadRequest"), r.text
    assert r.json()["message"] == message
    assert (await admin_http.get(f"{CM}/bad")).status_code == 404

    created = await admin_http.post(CM, json={"metadata": {"name": "good"}})
    assert created.status_code == 201, created.text
    r = await admin_http.patch(
        f"{CM}/good", content=json.dumps({"metadata": metadata}), headers=MERGE
    )
    assert (r.status_code, r.json()["message"]) == (400, message)


async def test_well_typed_but_invalid_collections_stay_422(admin_http: httpx.AsyncClient) -> None:
    r = await admin_http.post(CM, json={"metadata": {"name": "c", "labels": {"bad key!": "v"}}})
    assert r.status_code == 422, r.text
    r = await admin_http.post(
        CM, json={"metadata": {"name": "c", "ownerReferences": [{"kind": "X", "name": "o"}]}}
    )
    assert r.status_code == 422, r.text


def test_the_first_field_in_body_order_is_reported() -> None:
    meta: dict[str, Any] = {"finalizers": [1], "generateName": 2, "labels": 3}
    with pytest.raises(ApiError) as caught:
        object_meta.decode_object_meta(meta, kind="Run", version="v1alpha1")
    assert "ObjectMeta.finalizers of type string" in caught.value.message
    assert meta == {"finalizers": [1], "generateName": 2, "labels": 3}, "unchanged on error"


def test_nulls_and_well_typed_collections_decode() -> None:
    meta: dict[str, Any] = {
        "labels": None,
        "annotations": {"a": "b"},
        "finalizers": ["example.com/f"],
        "ownerReferences": [{**OWNER, "controller": True, "blockOwnerDeletion": None}],
    }
    object_meta.decode_object_meta(meta, kind="Run", version="v1alpha1")
    object_meta.check_collection_types(meta, kind="Pod", version="v1")
    assert meta["finalizers"] == ["example.com/f"]


@pytest.mark.parametrize("metadata", [5, "x", True, [], ["a"]])
async def test_metadata_that_is_not_an_object_is_400_for_custom_and_built_in_kinds(
    widgets: httpx.AsyncClient,  # noqa: F811
    admin_http: httpx.AsyncClient,
    metadata: Any,
) -> None:
    """A user test sent ``"metadata": 5``: it was a 500 (the create handler read the name
    before the body was checked)."""
    for client, url, body in (
        (widgets, WIDGETS, {**widget("bad"), "metadata": metadata}),
        (admin_http, CM, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata}),
    ):
        r = await client.post(url, json=body)
        assert (r.status_code, r.json()["reason"]) == (400, "BadRequest"), r.text
