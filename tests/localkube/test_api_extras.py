"""Subresources (scale, log), strict field validation, protobuf bodies, ALPN, Leases."""

from __future__ import annotations

import json
import ssl
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from localkube.apiserver import ApiServerConfig, ApiServerHandle
from localkube.errors import ApiError
from localkube.protobuf_bodies import MAGIC, decode_body
from tests.localkube.conftest import client_for
from tests.localkube.test_api_crds import CRDS, SCHEMA, WIDGETS, crd, widget
from tests.localkube.test_api_verbs import DEPLOY, deployment

MERGE = {"Content-Type": "application/merge-patch+json"}


async def test_scale_subresource(admin_http: httpx.AsyncClient) -> None:
    await admin_http.post(DEPLOY, json=deployment(replicas=2))
    scale = (await admin_http.get(f"{DEPLOY}/web/scale")).json()
    assert scale["kind"] == "Scale"
    assert scale["spec"]["replicas"] == 2
    assert scale["status"]["selector"] == "app=web"
    r = await admin_http.patch(
        f"{DEPLOY}/web/scale", content=json.dumps({"spec": {"replicas": 5}}), headers=MERGE
    )
    assert r.status_code == 200
    assert r.json()["spec"]["replicas"] == 5
    got = (await admin_http.get(f"{DEPLOY}/web")).json()
    assert got["spec"]["replicas"] == 5
    assert got["metadata"]["generation"] == 2
    bad = await admin_http.put(f"{DEPLOY}/web/scale", json={"spec": {"replicas": -1}})
    assert bad.status_code == 422


async def test_strict_field_validation_rejects_unknown_custom_fields(
    admin_http: httpx.AsyncClient,
) -> None:
    await admin_http.post(CRDS, json=crd())
    body = widget(extra="x")
    r = await admin_http.post(WIDGETS, json=body, params={"fieldValidation": "Strict"})
    assert r.status_code == 400
    assert (
        r.json()["message"]
        == 'Widget in version "v1" cannot be handled as a Widget: strict decoding error: unknown field "spec.extra"'
    )
    r = await admin_http.post(WIDGETS, json=body)
    assert r.status_code == 201
    assert "extra" not in r.json()["spec"], "without Strict: pruned"


async def test_strict_field_validation_takes_a_null_known_field_for_known(
    admin_http: httpx.AsyncClient,
) -> None:
    # kube: strict decoding reports what structural pruning removes; a null of a known,
    # non-nullable field is dropped later (defaulting), so it is not "unknown"
    await admin_http.post(CRDS, json=crd())
    strict = {"fieldValidation": "Strict"}
    r = await admin_http.post(WIDGETS, json=widget(name=None), params=strict)
    assert r.status_code == 201, r.text
    assert "name" not in r.json()["spec"]
    r = await admin_http.post(WIDGETS, json=widget("w2", size=None), params=strict)
    assert r.status_code == 422, r.text
    assert r.json()["details"]["causes"][0]["field"] == "spec.size"
    r = await admin_http.post(WIDGETS, json=widget("w3", bogus=None), params=strict)
    assert r.status_code == 400
    assert r.json()["message"].endswith('unknown field "spec.bogus"')


async def test_pod_log_reads_node_files(tmp_path: Path, start_apiserver: Any) -> None:
    from localkube.node.layout import PodPaths
    from localkube.node.logs import encode_records

    async with (
        start_apiserver(ApiServerConfig(state_dir=tmp_path)) as handle,
        client_for(handle) as admin,
    ):
        pods = "/api/v1/namespaces/default/pods"
        spec = {"nodeName": "localkube", "containers": [{"name": "main", "image": "x"}]}
        pod = (await admin.post(pods, json={"metadata": {"name": "p"}, "spec": spec})).json()
        waiting = await admin.get(f"{pods}/p/log")
        assert waiting.status_code == 400
        log_dir = PodPaths.for_pod(tmp_path, "default", "p", pod["metadata"]["uid"]).log_dir
        (log_dir / "main").mkdir(parents=True)
        (log_dir / "main" / "0.log").write_bytes(
            encode_records("stdout", b"hello\nworld\n", now=time.time())
        )
        r = await admin.get(f"{pods}/p/log")
        assert r.status_code == 200
        assert r.text == "hello\nworld\n"
        assert (await admin.get(f"{pods}/p/log", params={"tailLines": "1"})).text == "world\n"
        assert (await admin.get(f"{pods}/p/log", params={"container": "nope"})).status_code == 400
        (log_dir / "main" / "0.exited").write_text("0")
        with trio.fail_after(5):
            async with admin.stream("GET", f"{pods}/p/log", params={"follow": "true"}) as followed:
                body = b"".join([chunk async for chunk in followed.aiter_bytes()])
        assert body == b"hello\nworld\n", "follow ends when the container run has exited"


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _ssar_protobuf() -> bytes:
    attrs = _field(1, b"team") + _field(2, b"list") + _field(5, b"pods")
    spec = _field(1, attrs)
    raw = _field(1, _field(1, b"") + _field(3, b"")) + _field(2, spec)
    type_meta = _field(1, b"authorization.k8s.io/v1") + _field(2, b"SelfSubjectAccessReview")
    return MAGIC + _field(1, type_meta) + _field(2, raw)


def test_protobuf_body_decodes_like_json() -> None:
    body = decode_body(_ssar_protobuf())
    assert body == {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "metadata": {},
        "spec": {"resourceAttributes": {"namespace": "team", "verb": "list", "resource": "pods"}},
    }
    with pytest.raises(ApiError) as unsupported:
        decode_body(
            MAGIC
            + _field(1, _field(1, b"coordination.k8s.io/v1") + _field(2, b"Lease"))
            + _field(2, b"")
        )
    assert unsupported.value.code == 415
    with pytest.raises(ApiError) as garbage:
        decode_body(b"not protobuf")
    assert garbage.value.code == 400


async def test_protobuf_request_is_served(admin_http: httpx.AsyncClient) -> None:
    r = await admin_http.post(
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        content=_ssar_protobuf(),
        headers={
            "Content-Type": "application/vnd.kubernetes.protobuf",
            "Accept": "application/vnd.kubernetes.protobuf,application/json",
        },
    )
    assert r.status_code == 201
    assert r.headers["content-type"] == "application/json"
    assert r.json()["status"]["allowed"] is True


async def test_alpn_negotiates_http11_only(apiserver: ApiServerHandle) -> None:
    host, port = apiserver.url.removeprefix("https://").rsplit(":", 1)
    context = ssl.create_default_context(cadata=apiserver.ca_pem.decode())
    context.set_alpn_protocols(["h2", "http/1.1"])
    stream = await trio.open_ssl_over_tcp_stream(host, int(port), ssl_context=context)
    await stream.do_handshake()
    assert stream.selected_alpn_protocol() == "http/1.1"
    await stream.aclose()


async def test_lease_optimistic_concurrency(admin_http: httpx.AsyncClient) -> None:
    leases = "/apis/coordination.k8s.io/v1/namespaces/default/leases"
    lease = {
        "metadata": {"name": "leader"},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15},
    }
    created = (await admin_http.post(leases, json=lease)).json()
    mine = {**created, "spec": {**created["spec"], "holderIdentity": "b"}}
    theirs = {**created, "spec": {**created["spec"], "holderIdentity": "c"}}
    assert (await admin_http.put(f"{leases}/leader", json=mine)).status_code == 200
    assert (await admin_http.put(f"{leases}/leader", json=theirs)).status_code == 409


async def test_events_are_one_store_served_in_both_groups(admin_http: httpx.AsyncClient) -> None:
    core = {
        "metadata": {"name": "e1"},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
        "reason": "Started",
        "message": "Started container",
        "count": 2,
        "type": "Normal",
    }
    assert (
        await admin_http.post("/api/v1/namespaces/default/events", json=core)
    ).status_code == 201
    found = await admin_http.get(
        "/api/v1/namespaces/default/events",
        params={"fieldSelector": "involvedObject.name=p,reason=Started"},
    )
    assert [e["metadata"]["name"] for e in found.json()["items"]] == ["e1"]
    new_api = "/apis/events.k8s.io/v1/namespaces/default/events"
    seen = (await admin_http.get(f"{new_api}/e1")).json()
    assert seen["apiVersion"] == "events.k8s.io/v1"
    assert seen["regarding"]["name"] == "p"
    assert seen["note"] == "Started container"
    assert seen["deprecatedCount"] == 2
    assert "involvedObject" not in seen
    new = {
        "metadata": {"name": "e2"},
        "regarding": {"kind": "Pod", "name": "q"},
        "reason": "Pulled",
        "note": "pulled",
        "action": "Pull",
        "type": "Normal",
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": "x",
        "reportingInstance": "y",
    }
    assert (await admin_http.post(new_api, json=new)).status_code == 201
    as_core = (await admin_http.get("/api/v1/namespaces/default/events/e2")).json()
    assert as_core["involvedObject"]["name"] == "q"
    assert as_core["message"] == "pulled"
    assert as_core["reportingComponent"] == "x"
    by_regarding = await admin_http.get(new_api, params={"fieldSelector": "regarding.name=q"})
    assert [e["metadata"]["name"] for e in by_regarding.json()["items"]] == ["e2"]
    with trio.fail_after(5):
        params = {"watch": "1", "fieldSelector": "regarding.name=p"}
        async with admin_http.stream("GET", new_api, params=params) as response:
            async for line in response.aiter_lines():
                event = json.loads(line)
                break
    assert event["type"] == "ADDED"
    assert event["object"]["note"] == "Started container"


async def test_table_watch_sends_column_definitions_once(admin_http: httpx.AsyncClient) -> None:
    accept = {"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"}
    await admin_http.post(
        "/api/v1/namespaces/default/configmaps", json={"metadata": {"name": "t1"}}
    )
    await admin_http.post(
        "/api/v1/namespaces/default/configmaps", json={"metadata": {"name": "t2"}}
    )
    events = []
    with trio.fail_after(5):
        async with admin_http.stream(
            "GET", "/api/v1/namespaces/default/configmaps", params={"watch": "1"}, headers=accept
        ) as response:
            async for line in response.aiter_lines():
                if line:
                    events.append(json.loads(line))
                if len(events) == 3:
                    break
    assert all(e["object"]["kind"] == "Table" for e in events)
    assert events[0]["object"]["columnDefinitions"]
    assert not events[1]["object"]["columnDefinitions"]
    assert sorted(e["object"]["rows"][0]["cells"][0] for e in events) == [
        "kube-root-ca.crt",
        "t1",
        "t2",
    ]


async def test_event_table_columns(admin_http: httpx.AsyncClient) -> None:
    event = {
        "metadata": {"name": "e1"},
        "involvedObject": {"kind": "Pod", "name": "web-1", "namespace": "default"},
        "reason": "Started",
        "type": "Normal",
        "message": "Started container c",
        "lastTimestamp": "2026-01-01T00:00:00Z",
    }
    await admin_http.post("/api/v1/namespaces/default/events", json=event)
    accept = {"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"}
    table = (await admin_http.get("/api/v1/namespaces/default/events", headers=accept)).json()
    assert [c["name"] for c in table["columnDefinitions"]] == [
        "Last Seen",
        "Type",
        "Reason",
        "Object",
        "Message",
        "Name",
    ]
    assert table["rows"][0]["cells"][1:] == [
        "Normal",
        "Started",
        "pod/web-1",
        "Started container c",
        "e1",
    ]


def _scaled_crd(scale: dict[str, Any]) -> dict[str, Any]:
    schema = json.loads(json.dumps(SCHEMA))
    schema["properties"]["status"]["properties"].update(
        {"count": {"type": "integer"}, "selector": {"type": "string"}}
    )
    body = crd(schema=schema)
    body["spec"]["versions"][0]["subresources"]["scale"] = scale
    return body


async def test_custom_resource_scale_follows_the_crd_paths(admin_http: httpx.AsyncClient) -> None:
    """``subresources.scale`` of a CRD: the Scale reads and writes the declared paths."""
    paths = {
        "specReplicasPath": ".spec.size",
        "statusReplicasPath": ".status.count",
        "labelSelectorPath": ".status.selector",
    }
    assert (await admin_http.post(CRDS, json=_scaled_crd(paths))).status_code == 201
    assert (await admin_http.post(WIDGETS, json=widget(size=2))).status_code == 201
    status = {"status": {"count": 1, "selector": "app=w"}}
    r = await admin_http.patch(f"{WIDGETS}/w/status", content=json.dumps(status), headers=MERGE)
    assert r.status_code == 200, r.text
    scale = (await admin_http.get(f"{WIDGETS}/w/scale")).json()
    assert scale["spec"] == {"replicas": 2}
    assert scale["status"] == {"replicas": 1, "selector": "app=w"}
    r = await admin_http.patch(
        f"{WIDGETS}/w/scale", content=json.dumps({"spec": {"replicas": 4}}), headers=MERGE
    )
    assert r.status_code == 200, r.text
    assert (await admin_http.get(f"{WIDGETS}/w")).json()["spec"]["size"] == 4
    too_big = await admin_http.put(f"{WIDGETS}/w/scale", json={"spec": {"replicas": 11}})
    assert too_big.status_code == 422  # the CRD schema still applies (size <= 10)
    assert (await admin_http.get(f"{WIDGETS}/w")).json()["spec"]["size"] == 4


async def test_crd_scale_paths_must_be_spec_and_status_fields(
    admin_http: httpx.AsyncClient,
) -> None:
    bad = _scaled_crd({"specReplicasPath": ".metadata.name", "statusReplicasPath": ".status.n"})
    r = await admin_http.post(CRDS, json=bad)
    assert r.status_code == 422
    assert "specReplicasPath" in r.text
