"""CRDs served at run time: discovery, validation, defaults, pruning, CEL, status, tables.

Spec: issue 3, "CRDs". Validation itself is localkube.crd's (tested there); these tests
check that the API server applies it on every write path and answers like kube-apiserver.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import httpx
import pytest
from kr8s.asyncio.objects import new_class

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
WIDGETS = "/apis/example.com/v1/namespaces/default/widgets"
MERGE = {"Content-Type": "application/merge-patch+json"}

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "required": ["size"],
            "properties": {
                "size": {"type": "integer", "minimum": 1, "maximum": 10},
                "color": {"type": "string", "enum": ["blue", "red"], "default": "blue"},
                "port": {"x-kubernetes-int-or-string": True},
                "name": {"type": "string", "maxLength": 5, "pattern": "^[a-z]+$"},
                "tags": {"type": "array", "maxItems": 2, "items": {"type": "string"}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "mode": {
                    "type": "string",
                    "x-kubernetes-validations": [
                        {"rule": "self == oldSelf", "message": "mode is immutable"}
                    ],
                },
            },
            "x-kubernetes-validations": [
                {
                    "rule": "self.size < 9 || self.color == 'red'",
                    "message": "big widgets must be red",
                }
            ],
        },
        "status": {"type": "object", "properties": {"phase": {"type": "string"}}},
    },
}


def crd(scope: str = "Namespaced", schema: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": scope,
            "names": {
                "plural": "widgets",
                "singular": "widget",
                "kind": "Widget",
                "shortNames": ["wd"],
            },
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
                        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                    ],
                    "schema": {"openAPIV3Schema": schema or SCHEMA},
                }
            ],
        },
    }


def widget(obj_name: str = "w", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": obj_name},
        "spec": {"size": 3, **spec},
    }


@pytest.fixture
async def widgets(admin_http: httpx.AsyncClient) -> httpx.AsyncClient:
    r = await admin_http.post(CRDS, json=crd())
    assert r.status_code == 201, r.text
    return admin_http


async def test_crd_is_served_and_discoverable(widgets: httpx.AsyncClient) -> None:
    stored = (await widgets.get(f"{CRDS}/widgets.example.com")).json()
    conditions = {c["type"]: c["status"] for c in stored["status"]["conditions"]}
    assert conditions == {"NamesAccepted": "True", "Established": "True"}
    assert stored["status"]["storedVersions"] == ["v1"]
    groups = (await widgets.get("/apis")).json()["groups"]
    assert "example.com" in [g["name"] for g in groups]
    resources = (await widgets.get("/apis/example.com/v1")).json()["resources"]
    main = next(r for r in resources if r["name"] == "widgets")
    assert main["kind"] == "Widget"
    assert main["namespaced"]
    assert main["shortNames"] == ["wd"]
    assert "watch" in main["verbs"]
    assert any(r["name"] == "widgets/status" for r in resources)


async def test_defaults_pruning_and_preserved_fields(widgets: httpx.AsyncClient) -> None:
    body = widget(port="http", unknown="gone", free={"any": {"thing": 1}})
    r = await widgets.post(WIDGETS, json=body)
    assert r.status_code == 201, r.text
    spec = r.json()["spec"]
    assert spec["color"] == "blue", "default applied"
    assert "unknown" not in spec, "unknown field pruned"
    assert spec["free"] == {"any": {"thing": 1}}
    assert spec["port"] == "http"


async def test_invalid_object_is_422_with_field_paths(widgets: httpx.AsyncClient) -> None:
    r = await widgets.post(
        WIDGETS, json=widget(size=30, color="green", name="TOOLONG", tags=["a", "b", "c"])
    )
    assert r.status_code == 422
    status = r.json()
    assert status["reason"] == "Invalid"
    assert status["message"].startswith('Widget.example.com "w" is invalid: [')
    fields = {c["field"] for c in status["details"]["causes"]}
    assert {"spec.size", "spec.color", "spec.name", "spec.tags"} <= fields
    missing = await widgets.post(WIDGETS, json={**widget(), "spec": {}})
    assert missing.status_code == 422
    assert missing.json()["details"]["causes"][0]["field"] == "spec.size"


async def test_cel_rules_and_transition_rules(widgets: httpx.AsyncClient) -> None:
    r = await widgets.post(WIDGETS, json=widget(size=9))
    assert r.status_code == 422
    assert "big widgets must be red" in r.json()["message"]
    assert (
        await widgets.post(WIDGETS, json=widget(size=9, color="red", mode="a"))
    ).status_code == 201
    r = await widgets.patch(
        f"{WIDGETS}/w", content=json.dumps({"spec": {"mode": "b"}}), headers=MERGE
    )
    assert r.status_code == 422
    assert "mode is immutable" in r.json()["message"]
    r = await widgets.patch(
        f"{WIDGETS}/w", content=json.dumps({"spec": {"size": 10}}), headers=MERGE
    )
    assert r.status_code == 200


async def test_crd_with_unsupported_cel_function_is_rejected(admin_http: httpx.AsyncClient) -> None:
    schema = copy.deepcopy(SCHEMA)
    schema["properties"]["spec"]["x-kubernetes-validations"] = [
        {"rule": "quantity(self.name).isGreaterThan(quantity('1'))"}
    ]
    r = await admin_http.post(CRDS, json=crd(schema=schema))
    assert r.status_code == 422, r.text
    assert "quantity" in r.json()["message"]
    assert (await admin_http.get("/apis/example.com/v1")).status_code == 404, "nothing served"


async def test_status_subresource_and_generation_for_custom_objects(
    widgets: httpx.AsyncClient,
) -> None:
    created = (
        await widgets.post(WIDGETS, json={**widget(), "status": {"phase": "Ignored"}})
    ).json()
    assert "status" not in created
    assert created["metadata"]["generation"] == 1
    r = await widgets.patch(
        f"{WIDGETS}/w/status",
        content=json.dumps({"status": {"phase": "Ready"}, "spec": {"size": 7}}),
        headers=MERGE,
    )
    assert r.json()["status"] == {"phase": "Ready"}
    assert r.json()["spec"]["size"] == 3
    assert r.json()["metadata"]["generation"] == 1
    r = await widgets.patch(
        f"{WIDGETS}/w",
        content=json.dumps({"spec": {"size": 4}, "status": {"phase": "X"}}),
        headers=MERGE,
    )
    assert r.json()["metadata"]["generation"] == 2
    assert r.json()["status"] == {"phase": "Ready"}
    smp = await widgets.patch(
        f"{WIDGETS}/w",
        content=b"{}",
        headers={"Content-Type": "application/strategic-merge-patch+json"},
    )
    assert smp.status_code == 415


async def test_an_update_that_only_restates_defaults_is_a_no_op(
    widgets: httpx.AsyncClient,
) -> None:
    # kube-apiserver defaults while decoding, so the update equals the stored object: no
    # write, same resourceVersion and generation, no watch event
    created = (await widgets.post(WIDGETS, json=widget())).json()
    assert created["spec"]["color"] == "blue"
    version = created["metadata"]["resourceVersion"]
    without = copy.deepcopy(created)
    del without["spec"]["color"]
    nulled = copy.deepcopy(created)
    nulled["spec"]["color"] = None
    for body in (without, nulled):
        r = await widgets.put(f"{WIDGETS}/w", json=body)
        assert r.status_code == 200, r.text
        assert r.json()["metadata"]["resourceVersion"] == version
        assert r.json()["metadata"]["generation"] == 1
        assert r.json()["spec"]["color"] == "blue"
    r = await widgets.patch(
        f"{WIDGETS}/w", content=json.dumps({"spec": {"color": None}}), headers=MERGE
    )
    assert (r.json()["metadata"]["resourceVersion"], r.json()["metadata"]["generation"]) == (
        version,
        1,
    )
    r = await widgets.patch(
        f"{WIDGETS}/w", content=json.dumps({"spec": {"color": "red"}}), headers=MERGE
    )
    assert r.json()["metadata"]["resourceVersion"] != version
    assert r.json()["metadata"]["generation"] == 2


async def test_table_output_uses_printer_columns(widgets: httpx.AsyncClient) -> None:
    await widgets.post(WIDGETS, json=widget())
    await widgets.patch(
        f"{WIDGETS}/w/status", content=json.dumps({"status": {"phase": "Ready"}}), headers=MERGE
    )
    accept = {"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"}
    table = (await widgets.get(WIDGETS, headers=accept)).json()
    assert table["kind"] == "Table"
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Size", "Phase", "Age"]
    cells = table["rows"][0]["cells"]
    assert cells[:3] == ["w", 3, "Ready"]
    assert table["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
    builtin = (await widgets.get("/api/v1/namespaces", headers=accept)).json()
    assert [c["name"] for c in builtin["columnDefinitions"]] == ["Name", "Status", "Age"]


async def test_cluster_scoped_crd_and_kr8s_generic_class(
    admin_http: httpx.AsyncClient, kr8s_api: Any
) -> None:
    assert (await admin_http.post(CRDS, json=crd(scope="Cluster"))).status_code == 201
    Widget = new_class(kind="Widget", version="example.com/v1", namespaced=False, plural="widgets")
    w = await Widget({"metadata": {"name": "cw"}, "spec": {"size": 2}}, api=kr8s_api)
    await w.create()
    assert w.raw["spec"]["color"] == "blue"
    assert (await admin_http.get("/apis/example.com/v1/widgets/cw")).status_code == 200
    assert (
        await admin_http.get("/apis/example.com/v1/namespaces/default/widgets/cw")
    ).status_code == 404


async def test_deleting_crd_removes_objects_and_stops_serving(widgets: httpx.AsyncClient) -> None:
    await widgets.post(WIDGETS, json=widget())
    r = await widgets.delete(f"{CRDS}/widgets.example.com")
    assert r.status_code == 200
    assert (await widgets.get(WIDGETS)).status_code == 404
    # recreating starts empty
    assert (await widgets.post(CRDS, json=crd())).status_code == 201
    assert (await widgets.get(WIDGETS)).json()["items"] == []


async def test_openapi_v3_advertises_field_validation(widgets: httpx.AsyncClient) -> None:
    root = (await widgets.get("/openapi/v3")).json()
    url = root["paths"]["apis/example.com/v1"]["serverRelativeURL"]
    doc = (await widgets.get(url)).json()
    patch_ops = [p["patch"] for p in doc["paths"].values() if "patch" in p]
    op = next(o for o in patch_ops if o["x-kubernetes-group-version-kind"]["kind"] == "Widget")
    assert "fieldValidation" in [p["name"] for p in op["parameters"]]
    assert "application/strategic-merge-patch+json" not in op["requestBody"]["content"]


async def test_every_served_version_shares_the_objects(admin_http: httpx.AsyncClient) -> None:
    two = crd()
    v1 = two["spec"]["versions"][0]
    alpha = {**copy.deepcopy(v1), "name": "v1alpha1", "storage": False}
    alpha["schema"] = {
        "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    }
    two["spec"]["versions"] = [alpha, v1]
    assert (await admin_http.post(CRDS, json=two)).status_code == 201
    alpha_path = "/apis/example.com/v1alpha1/namespaces/default/widgets"
    created = await admin_http.post(
        alpha_path, json={**widget(), "apiVersion": "example.com/v1alpha1"}
    )
    assert created.status_code == 201
    assert created.json()["apiVersion"] == "example.com/v1alpha1"
    via_v1 = (await admin_http.get(f"{WIDGETS}/w")).json()
    assert via_v1["apiVersion"] == "example.com/v1"
    assert via_v1["metadata"]["uid"] == created.json()["metadata"]["uid"]
    versions = (await admin_http.get("/apis/example.com")).json()["versions"]
    assert [v["version"] for v in versions] == ["v1", "v1alpha1"], "preferred version first"


@pytest.mark.parametrize(
    ("metadata", "problem"),
    [
        ({"generateName": 7}, "cannot unmarshal number into Go struct field ObjectMeta.generateName of type string"),
        ({"selfLink": 5}, "cannot unmarshal number into Go struct field ObjectMeta.selfLink of type string"),
        ({"deletionGracePeriodSeconds": "x"},
         "cannot unmarshal string into Go struct field ObjectMeta.deletionGracePeriodSeconds of type int64"),
        ({"deletionGracePeriodSeconds": 1.5},
         "cannot unmarshal number 1.5 into Go struct field ObjectMeta.deletionGracePeriodSeconds of type int64"),
        ({"generation": True}, "cannot unmarshal bool into Go struct field ObjectMeta.generation of type int64"),
        ({"uid": ["u"]}, "cannot unmarshal array into Go struct field ObjectMeta.uid of type types.UID"),
        ({"creationTimestamp": 5},
         "cannot unmarshal number into Go struct field ObjectMeta.creationTimestamp of type string"),
        ({"deletionTimestamp": "yesterday"},
         'parsing time "yesterday" as "2006-01-02T15:04:05Z07:00": cannot parse "yesterday" as "2006"'),
    ],
)  # fmt: skip
async def test_wrong_typed_object_meta_is_400_on_every_write(
    widgets: httpx.AsyncClient, metadata: dict[str, Any], problem: str
) -> None:
    """Finding F3: kube-apiserver decodes a custom object's metadata into ObjectMeta."""
    prefix = 'Widget in version "v1" cannot be handled as a Widget: json: '
    if problem.startswith("parsing"):
        prefix = prefix.removesuffix("json: ")
    body = widget("bad")
    body["metadata"].update(metadata)
    r = await widgets.post(WIDGETS, json=body)
    assert r.status_code == 400, r.text
    assert r.json()["reason"] == "BadRequest"
    assert r.json()["message"] == prefix + problem
    assert (await widgets.get(f"{WIDGETS}/bad")).status_code == 404

    created = (await widgets.post(WIDGETS, json=widget("good"))).json()
    r = await widgets.patch(
        f"{WIDGETS}/good", content=json.dumps({"metadata": metadata}), headers=MERGE
    )
    assert (r.status_code, r.json()["message"]) == (400, prefix + problem)
    replaced = copy.deepcopy(created)
    replaced["metadata"].update(metadata)
    r = await widgets.put(f"{WIDGETS}/good", json=replaced)
    assert (r.status_code, r.json()["message"]) == (400, prefix + problem)
    r = await widgets.put(f"{WIDGETS}/good/status", json=replaced)
    assert r.status_code == 400, r.text
    stored = (await widgets.get(f"{WIDGETS}/good")).json()
    assert stored["metadata"] == created["metadata"]


async def test_unknown_object_meta_fields_are_dropped(widgets: httpx.AsyncClient) -> None:
    """Finding F3: fields ObjectMeta does not have are not stored (nor nulls of known ones)."""
    body = widget("w")
    body["metadata"].update({"foo": 1, "clusterName": "c", "selfLink": None, "labels": {"a": "b"}})
    r = await widgets.post(WIDGETS, json=body)
    assert r.status_code == 201, r.text
    meta = r.json()["metadata"]
    assert {"foo", "clusterName", "selfLink"}.isdisjoint(meta)
    assert meta["labels"] == {"a": "b"}
    r = await widgets.patch(
        f"{WIDGETS}/w", content=json.dumps({"metadata": {"bar": {"x": 1}}}), headers=MERGE
    )
    assert r.status_code == 200, r.text
    assert "bar" not in r.json()["metadata"]
    stored = (await widgets.get(f"{WIDGETS}/w")).json()
    assert {"foo", "bar", "clusterName"}.isdisjoint(stored["metadata"])
