"""``kubectl apply|create -f`` of a ``kind: List`` works (user test finding F2).

kubectl 1.32 validates a List client-side against ``/openapi/v2`` (its server-side
``fieldValidation`` check never covers ``v1/List``), so localkube serves a minimal v2
document; every item is still validated by the server, as a single object is.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import yaml

from localkube import openapi
from tests.localkube.test_kubectl_acceptance import _apply_crd_and_gadget

LIST = """
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: a, namespace: default}
  data: {k: v}
- apiVersion: example.com/v1
  kind: Gadget
  metadata: {name: g2, namespace: default}
  spec: {size: 2}
"""


@pytest.mark.kubectl
async def test_apply_and_create_of_a_list(kubectl: Any) -> None:
    await _apply_crd_and_gadget(kubectl)
    out = await kubectl("apply", "-f", "-", input=LIST)
    assert out.stdout.split("\n")[:2] == ["configmap/a created", "gadget.example.com/g2 created"]
    out = await kubectl("apply", "-f", "-", input=LIST.replace("k: v", "k: w"))
    assert "configmap/a configured" in out.stdout
    assert "gadget.example.com/g2 unchanged" in out.stdout
    # kubectl's own List output round-trips (the tester's reproduction)
    listed = (await kubectl("get", "cm/a", "gadget/g2", "-o", "yaml")).stdout
    assert yaml.safe_load(listed)["kind"] == "List"
    out = await kubectl("apply", "-f", "-", input=listed)
    assert out.stdout.split("\n")[:2] == [
        "configmap/a configured",
        "gadget.example.com/g2 configured",
    ]
    out = await kubectl(
        "create", "-f", "-", input=LIST.replace("name: a", "name: b").replace("g2", "g3")
    )
    assert out.stdout.split("\n")[:2] == ["configmap/b created", "gadget.example.com/g3 created"]


@pytest.mark.kubectl
async def test_list_items_are_still_validated_by_the_server(kubectl: Any) -> None:
    await _apply_crd_and_gadget(kubectl)
    out = await kubectl("apply", "-f", "-", input=LIST.replace("size: 2", "size: 30"), check=False)
    assert out.returncode != 0
    assert "configmap/a created" in out.stdout
    assert (
        'The Gadget "g2" is invalid: spec.size: Invalid value: 30: spec.size in body should '
        "be less than or equal to 10" in out.stderr
    )
    unknown = LIST.replace("spec: {size: 2}", "spec: {size: 2, bogus: 1}")
    out = await kubectl("apply", "-f", "-", input=unknown, check=False)
    assert out.returncode != 0
    assert 'unknown field "spec.bogus"' in out.stderr


async def test_openapi_v2_is_an_empty_swagger_document(admin_http: httpx.AsyncClient) -> None:
    r = await admin_http.get("/openapi/v2")
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"
    assert json.loads(r.content) == {
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": openapi.INFO_VERSION},
        "paths": {},
        "definitions": {},
    }
    for accept in openapi._V2_PROTOBUF_ACCEPTS:
        r = await admin_http.get("/openapi/v2", headers={"Accept": f"{accept}, application/json"})
        assert r.headers["content-type"] == openapi.V2_PROTOBUF_MEDIA_TYPE
        assert r.content == openapi.v2_protobuf()


def test_v2_protobuf_encodes_the_document_fields() -> None:
    # gnostic openapi.v2.Document: swagger=1, info=2 (title=1, version=2), paths=8, definitions=9
    version = openapi.INFO_VERSION.encode()
    info = b"\x0a\x0aKubernetes" + bytes([0x12, len(version)]) + version
    assert openapi.v2_protobuf() == (
        b"\x0a\x032.0" + bytes([0x12, len(info)]) + info + b"\x42\x00" + b"\x4a\x00"
    )
