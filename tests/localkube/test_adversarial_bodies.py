"""Hostile request bodies get a Status (400/413/422), never a 500 or a half-stored object.

Spec: issue 3, "Errors" (bad JSON 400, oversized 413). Found by the adversarial review:
deeply nested JSON and lone UTF-16 surrogates used to end in 500 Internal Error.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from localkube import jsonbody
from tests.localkube.test_api_crds import WIDGETS, crd

CM = "/api/v1/namespaces/default/configmaps"
JSON = {"Content-Type": "application/json"}
MERGE = {"Content-Type": "application/merge-patch+json"}

FREE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": True,
            "x-kubernetes-validations": [{"rule": "self == self", "message": "never"}],
        },
    },
}


def nested(depth: int) -> str:
    """A JSON value of ``depth`` nested arrays."""
    return "[" * depth + "]" * depth


def test_loads_replaces_lone_surrogates_and_invalid_utf8_like_go() -> None:
    doc = jsonbody.loads(b'{"a\\udc00": ["x\\ud800y", "\\ud83d\\ude00"], "b": "\xff"}')
    assert doc == {"a\ufffd": ["x\ufffdy", "\U0001f600"], "b": "\ufffd"}


def test_loads_limits_nesting_depth() -> None:
    assert jsonbody.loads(nested(jsonbody.MAX_DEPTH)) is not None
    with pytest.raises(ValueError, match="exceeded max depth"):
        jsonbody.loads(nested(jsonbody.MAX_DEPTH + 1))
    with pytest.raises(ValueError, match="exceeded max depth"):
        jsonbody.loads(nested(100_000))
    with pytest.raises(ValueError, match="Expecting"):
        jsonbody.loads(b"{bad")


@pytest.mark.parametrize("depth", [jsonbody.MAX_DEPTH + 5, 5_000, 100_000])
async def test_deeply_nested_bodies_are_400(admin_http: httpx.AsyncClient, depth: int) -> None:
    body = '{"metadata":{"name":"deep"},"data":{"a":"b"},"x":' + nested(depth) + "}"
    r = await admin_http.post(CM, content=body, headers=JSON)
    assert r.status_code == 400, r.text
    assert r.json()["reason"] == "BadRequest"
    assert "exceeded max depth" in r.json()["message"]
    assert (await admin_http.get(f"{CM}/deep")).status_code == 404

    await admin_http.post(CM, json={"metadata": {"name": "flat"}})
    patch = '{"metadata":{"annotations":{"a":"b"}},"x":' + nested(depth) + "}"
    r = await admin_http.patch(f"{CM}/flat", content=patch, headers=MERGE)
    assert r.status_code == 400, r.text
    assert "exceeded max depth" in r.json()["message"]


async def test_nesting_just_inside_the_limit_survives_crd_validation_and_cel(
    admin_http: httpx.AsyncClient,
) -> None:
    r = await admin_http.post(
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=crd(schema=FREE_SCHEMA)
    )
    assert r.status_code == 201, r.text
    # apiVersion/kind/metadata at depth 1, spec at 2, "x" holds the rest
    body = (
        '{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"deep"},'
        '"spec":{"x":' + nested(jsonbody.MAX_DEPTH - 2) + "}}"
    )
    r = await admin_http.post(WIDGETS, content=body, headers=JSON)
    assert r.status_code == 201, r.text
    r = await admin_http.patch(
        f"{WIDGETS}/deep", content='{"spec":{"y":' + nested(50) + "}}", headers=MERGE
    )
    assert r.status_code == 200, r.text
    r = await admin_http.get(f"{WIDGETS}/deep")
    assert r.status_code == 200
    assert r.json()["spec"]["x"] == json.loads(nested(jsonbody.MAX_DEPTH - 2))


async def test_lone_surrogates_are_stored_as_replacement_characters(
    admin_http: httpx.AsyncClient,
) -> None:
    body = (
        b'{"metadata":{"name":"uni","annotations":{"a":"\\udfff"}},'
        b'"data":{"k":"h\\u00e9llo \\ud800 \\ud83d\\ude00"}}'
    )
    r = await admin_http.post(CM, content=body, headers=JSON)
    assert r.status_code == 201, r.text
    assert r.json()["data"] == {"k": "h\u00e9llo \ufffd \U0001f600"}
    assert r.json()["metadata"]["annotations"] == {"a": "\ufffd"}
    r = await admin_http.patch(f"{CM}/uni", content=b'{"data":{"z":"\\udbff"}}', headers=MERGE)
    assert r.status_code == 200, r.text
    assert r.json()["data"]["z"] == "\ufffd"
    listed = await admin_http.get(CM)
    assert listed.status_code == 200


async def test_body_over_3_mib_is_413_and_just_under_is_read(
    admin_http: httpx.AsyncClient,
) -> None:
    def body(size: int) -> bytes:
        head = b'{"metadata":{"name":"big"},"data":{"a":"'
        return head + b"x" * (size - len(head) - 3) + b'"}}'

    r = await admin_http.post(CM, content=body(3 * 1024 * 1024 + 1), headers=JSON)
    assert r.status_code == 413, r.text
    assert r.json()["reason"] == "RequestEntityTooLarge"
    # read and decoded; then refused by the ConfigMap's own 1 MiB rule, not the body limit
    r = await admin_http.post(CM, content=body(3 * 1024 * 1024), headers=JSON)
    assert r.status_code == 422, r.text[:200]
    assert r.json()["details"]["causes"][0]["message"].startswith("Too long")
