"""OpenAPI v3 documents: every kind's ``metadata`` refers to ObjectMeta (``kubectl explain``).

kube-apiserver publishes built-in kinds with their Go types' schemas and a CRD's schema with
``metadata`` replaced by a reference to ``io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta``
(wrapped in ``allOf`` in v3); ``kubectl explain runs.metadata.name`` follows that reference.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from localkube import builtin_schemas, openapi
from localkube.resources import ResourceRegistry

OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
META_REF = {"$ref": f"#/components/schemas/{OBJECT_META}"}
CHART_CRDS = Path(__file__).resolve().parents[2] / "charts" / "kruntimes" / "crds"


def _run_crd() -> dict[str, Any]:
    crd: dict[str, Any] = yaml.safe_load((CHART_CRDS / "runs.kruntimes.io.yaml").read_text())
    return crd


def _crd_schemas(crd: dict[str, Any]) -> dict[tuple[str, str, str], dict[str, Any]]:
    spec = crd["spec"]
    return {
        (spec["group"], v["name"], spec["names"]["kind"]): v["schema"]["openAPIV3Schema"]
        for v in spec["versions"]
    }


def _refs(schema: Any) -> set[str]:
    if isinstance(schema, dict):
        found = {schema["$ref"]} if "$ref" in schema else set()
        for value in schema.values():
            found |= _refs(value)
        return found
    if isinstance(schema, list):
        return set().union(*(_refs(v) for v in schema)) if schema else set()
    return set()


def test_core_document_refers_pod_metadata_to_object_meta() -> None:
    doc = openapi.group_version_document(ResourceRegistry(), "", "v1")
    assert doc is not None
    schemas = doc["components"]["schemas"]
    pod = schemas["io.k8s.api.core.v1.Pod"]
    assert pod["properties"]["metadata"]["allOf"] == [META_REF]
    assert pod["x-kubernetes-group-version-kind"] == [{"group": "", "version": "v1", "kind": "Pod"}]
    meta = schemas[OBJECT_META]
    assert meta["properties"]["name"]["type"] == "string"
    assert meta["properties"]["name"]["description"].startswith(
        "Name must be unique within a namespace."
    )
    assert meta["properties"]["labels"]["additionalProperties"] == {"type": "string"}
    # every reference resolves inside the document (kubectl explain follows them)
    prefix = "#/components/schemas/"
    assert all(r.startswith(prefix) for r in _refs(doc))
    assert {r[len(prefix) :] for r in _refs(doc)} <= set(schemas)
    # the path kubectl reads for the fieldValidation parameter names the real definition
    get = doc["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["get"]
    schema = get["responses"]["200"]["content"]["application/json"]["schema"]
    assert schema == {"$ref": "#/components/schemas/io.k8s.api.core.v1.Pod"}


def test_builtin_schemas_are_openapi_not_json_schema() -> None:
    doc = openapi.group_version_document(ResourceRegistry(), "apps", "v1")
    assert doc is not None
    text = json.dumps(doc)
    assert "#/$defs/" not in text
    assert '"null"' not in text
    schemas = doc["components"]["schemas"]
    deployment = schemas["io.k8s.api.apps.v1.Deployment"]
    assert "enum" not in deployment["properties"]["kind"]
    assert schemas["io.k8s.apimachinery.pkg.util.intstr.IntOrString"] == {
        "type": "string",
        "format": "int-or-string",
    }
    container = schemas["io.k8s.api.core.v1.Container"]
    assert container["properties"]["image"]["type"] == "string"


def test_crd_schema_gets_object_meta_and_type_meta() -> None:
    original = next(iter(_crd_schemas(_run_crd()).values()))
    before = copy.deepcopy(original)
    published = openapi.kube_native_schema(original)
    assert original == before  # the CRD's own schema is not changed
    assert published["properties"]["metadata"] == {
        "allOf": [META_REF],
        "description": openapi.METADATA_DESCRIPTION,
    }
    assert published["properties"]["apiVersion"]["description"].startswith(
        "APIVersion defines the versioned schema"
    )
    assert published["properties"]["kind"]["type"] == "string"
    assert published["properties"]["spec"] == original["properties"]["spec"]  # unchanged


def test_embedded_resources_get_object_meta() -> None:
    schema = {
        "type": "object",
        "properties": {
            "template": {
                "type": "object",
                "x-kubernetes-embedded-resource": True,
                "x-kubernetes-preserve-unknown-fields": True,
            }
        },
    }
    published = openapi.kube_native_schema(schema)
    template = published["properties"]["template"]
    assert template["properties"]["metadata"]["allOf"] == [META_REF]
    assert set(template["required"]) == {"kind", "apiVersion"}
    assert "properties" not in schema["properties"]["template"]


def test_object_meta_closure_is_complete() -> None:
    names = builtin_schemas.closure([OBJECT_META])
    assert names[0] == OBJECT_META
    assert "io.k8s.apimachinery.pkg.apis.meta.v1.OwnerReference" in names
    assert "io.k8s.apimachinery.pkg.apis.meta.v1.ManagedFieldsEntry" in names


async def _apply_run_crd(admin_http: httpx.AsyncClient) -> None:
    for path in sorted(CHART_CRDS.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        response = await admin_http.post(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            json=crd,
            params={"fieldValidation": "Strict"},  # the chart's CRDs are strictly valid
        )
        assert response.status_code == 201, response.text


async def test_served_crd_document_has_object_meta(admin_http: httpx.AsyncClient) -> None:
    await _apply_run_crd(admin_http)
    root = (await admin_http.get("/openapi/v3")).json()
    url = root["paths"]["apis/kruntimes.io/v1alpha1"]["serverRelativeURL"]
    doc = (await admin_http.get(url)).json()
    schemas = doc["components"]["schemas"]
    run = schemas["io.kruntimes.v1alpha1.Run"]
    assert run["properties"]["metadata"]["allOf"] == [META_REF]
    assert "name" in schemas[OBJECT_META]["properties"]
    assert run["x-kubernetes-group-version-kind"] == [
        {"group": "kruntimes.io", "version": "v1alpha1", "kind": "Run"}
    ]


@pytest.mark.kubectl
async def test_kubectl_explain_metadata_fields(admin_http: httpx.AsyncClient, kubectl: Any) -> None:
    await _apply_run_crd(admin_http)
    name = (await kubectl("explain", "runs.metadata.name")).stdout
    assert "FIELD: name <string>" in name
    assert "Name must be unique within a namespace." in name
    labels = (await kubectl("explain", "runs.metadata.labels")).stdout
    assert "FIELD: labels <map[string]string>" in labels
    pod_name = (await kubectl("explain", "pods.metadata.name")).stdout
    assert "KIND:       Pod" in pod_name
    assert "FIELD: name <string>" in pod_name
    spec = (await kubectl("explain", "runs.spec")).stdout
    assert "FIELD: spec <Object>" in spec
    assert "The execution a Run asks for." in spec
    image = (await kubectl("explain", "deployments.spec.template.spec.containers.image")).stdout
    assert "FIELD: image <string>" in image
