"""REST verbs, metadata rules, status subresource, finalizers and errors over HTTPS.

Spec: issue 3, "Object metadata", "Verbs", "Status subresource", "Finalizers and
deletionTimestamp", "Errors".
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from kr8s.asyncio.objects import ConfigMap

from tests.localkube.conftest import watch_until

CM = "/api/v1/namespaces/default/configmaps"
DEPLOY = "/apis/apps/v1/namespaces/default/deployments"


def deployment(name: str = "web", replicas: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "x"}]},
            },
        },
        "status": {"replicas": 99},
    }


async def test_kr8s_create_get_patch_delete(kr8s_api: Any) -> None:
    cm = await ConfigMap(
        {"metadata": {"name": "a", "namespace": "default"}, "data": {"x": "1"}}, api=kr8s_api
    )
    await cm.create()
    assert cm.metadata["uid"]
    assert cm.metadata["creationTimestamp"]
    got = await ConfigMap.get("a", namespace="default", api=kr8s_api)
    assert got.raw["data"] == {"x": "1"}
    await got.patch({"data": {"x": "2"}})
    await got.patch([{"op": "add", "path": "/data/y", "value": "3"}], type="json")
    assert got.raw["data"] == {"x": "2", "y": "3"}
    await got.delete()
    assert not await got.exists()


async def test_create_sets_metadata_and_generate_name(admin_http: httpx.AsyncClient) -> None:
    r = await admin_http.post(
        CM, json={"metadata": {"generateName": "job-", "resourceVersion": "7"}}
    )
    assert r.status_code == 201
    meta = r.json()["metadata"]
    assert meta["name"].startswith("job-")
    assert len(meta["name"]) == len("job-") + 5
    assert meta["resourceVersion"] != "7"
    r2 = await admin_http.post(CM, json={"metadata": {"name": meta["name"]}})
    assert r2.status_code == 409
    assert r2.json()["reason"] == "AlreadyExists"


async def test_resource_versions_are_one_global_increasing_counter(
    admin_http: httpx.AsyncClient,
) -> None:
    revs = []
    for i in range(3):
        r = await admin_http.post(
            CM if i % 2 else "/api/v1/namespaces/default/secrets",
            json={"metadata": {"name": f"o{i}"}},
        )
        revs.append(int(r.json()["metadata"]["resourceVersion"]))
    assert revs == sorted(revs)
    assert len(set(revs)) == 3


async def test_update_with_stale_resource_version_is_409(admin_http: httpx.AsyncClient) -> None:
    created = (
        await admin_http.post(CM, json={"metadata": {"name": "c"}, "data": {"a": "1"}})
    ).json()
    first = dict(created, data={"a": "2"})
    assert (await admin_http.put(f"{CM}/c", json=first)).status_code == 200
    stale = dict(created, data={"a": "3"})
    r = await admin_http.put(f"{CM}/c", json=stale)
    assert r.status_code == 409
    body = r.json()
    assert body["kind"] == "Status"
    assert body["reason"] == "Conflict"
    assert body["message"] == (
        'Operation cannot be fulfilled on configmaps "c": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )
    unconditional = {"metadata": {"name": "c"}, "data": {"a": "4"}}
    assert (await admin_http.put(f"{CM}/c", json=unconditional)).json()["data"] == {"a": "4"}


async def test_generation_bumps_on_spec_change_only(admin_http: httpx.AsyncClient) -> None:
    created = (await admin_http.post(DEPLOY, json=deployment())).json()
    assert created["metadata"]["generation"] == 1
    assert "status" not in created, "status is ignored on create for kinds with /status"
    merge = {"Content-Type": "application/merge-patch+json"}
    r = await admin_http.patch(
        f"{DEPLOY}/web/status", content=json.dumps({"status": {"replicas": 1}}), headers=merge
    )
    assert r.json()["metadata"]["generation"] == 1
    assert r.json()["status"] == {"replicas": 1}
    r = await admin_http.patch(
        f"{DEPLOY}/web", content=json.dumps({"metadata": {"labels": {"a": "b"}}}), headers=merge
    )
    assert r.json()["metadata"]["generation"] == 1
    r = await admin_http.patch(
        f"{DEPLOY}/web", content=json.dumps({"spec": {"replicas": 3}}), headers=merge
    )
    assert r.json()["metadata"]["generation"] == 2


async def test_status_subresource_separation(admin_http: httpx.AsyncClient) -> None:
    await admin_http.post(DEPLOY, json=deployment())
    merge = {"Content-Type": "application/merge-patch+json"}
    # main resource ignores status
    r = await admin_http.patch(
        f"{DEPLOY}/web",
        content=json.dumps({"spec": {"replicas": 2}, "status": {"replicas": 5}}),
        headers=merge,
    )
    assert r.json()["spec"]["replicas"] == 2
    assert "status" not in r.json()
    # /status changes only status
    r = await admin_http.patch(
        f"{DEPLOY}/web/status",
        content=json.dumps({"spec": {"replicas": 9}, "status": {"replicas": 5}}),
        headers=merge,
    )
    assert r.json()["spec"]["replicas"] == 2
    assert r.json()["status"] == {"replicas": 5}
    got = (await admin_http.get(f"{DEPLOY}/web/status")).json()
    assert got["status"] == {"replicas": 5}


async def test_strategic_merge_patch_for_builtins_only(admin_http: httpx.AsyncClient) -> None:
    await admin_http.post(DEPLOY, json=deployment())
    smp = {"Content-Type": "application/strategic-merge-patch+json"}
    patch = {"spec": {"template": {"spec": {"containers": [{"name": "side", "image": "s"}]}}}}
    r = await admin_http.patch(f"{DEPLOY}/web", content=json.dumps(patch), headers=smp)
    assert [c["name"] for c in r.json()["spec"]["template"]["spec"]["containers"]] == ["c", "side"]
    bad = await admin_http.patch(
        f"{DEPLOY}/web", content=b"{}", headers={"Content-Type": "application/apply-patch+yaml"}
    )
    assert bad.status_code == 415


async def test_finalizers_and_deletion_timestamp(admin_http: httpx.AsyncClient) -> None:
    await admin_http.post(CM, json={"metadata": {"name": "f", "finalizers": ["example.com/hold"]}})
    r = await admin_http.delete(f"{CM}/f")
    assert r.status_code == 200
    held = (await admin_http.get(f"{CM}/f")).json()
    assert held["metadata"]["deletionTimestamp"]
    merge = {"Content-Type": "application/merge-patch+json"}
    add = {"metadata": {"finalizers": ["example.com/hold", "example.com/new"]}}
    r = await admin_http.patch(f"{CM}/f", content=json.dumps(add), headers=merge)
    assert r.status_code == 422
    assert "no new finalizers can be added if the object is being deleted" in r.json()["message"]
    r = await admin_http.patch(
        f"{CM}/f", content=json.dumps({"metadata": {"finalizers": None}}), headers=merge
    )
    assert r.status_code == 200
    assert (await admin_http.get(f"{CM}/f")).status_code == 404


async def test_delete_preconditions(admin_http: httpx.AsyncClient) -> None:
    created = (await admin_http.post(CM, json={"metadata": {"name": "p"}})).json()
    wrong = {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": "nope"}}
    r = await admin_http.request("DELETE", f"{CM}/p", json=wrong)
    assert r.status_code == 409
    assert "Precondition failed: UID in precondition: nope" in r.json()["message"]
    stale = {"preconditions": {"resourceVersion": "1"}}
    assert (await admin_http.request("DELETE", f"{CM}/p", json=stale)).status_code == 409
    right = {
        "preconditions": {
            "uid": created["metadata"]["uid"],
            "resourceVersion": created["metadata"]["resourceVersion"],
        }
    }
    r = await admin_http.request("DELETE", f"{CM}/p", json=right)
    assert r.status_code == 200
    assert r.json()["status"] == "Success"


async def test_pod_grace_period_only_when_bound_to_a_node(admin_http: httpx.AsyncClient) -> None:
    pods = "/api/v1/namespaces/default/pods"
    spec = {"containers": [{"name": "c", "image": "x"}]}
    created = (
        await admin_http.post(pods, json={"metadata": {"name": "loose"}, "spec": spec})
    ).json()
    assert created["status"]["phase"] == "Pending"
    assert (await admin_http.delete(f"{pods}/loose")).json()["status"] == "Success"
    await admin_http.post(
        pods, json={"metadata": {"name": "bound"}, "spec": {**spec, "nodeName": "n1"}}
    )
    r = await admin_http.delete(f"{pods}/bound", params={"gracePeriodSeconds": "20"})
    meta = r.json()["metadata"]
    assert meta["deletionGracePeriodSeconds"] == 20
    assert meta["deletionTimestamp"]
    assert (await admin_http.get(f"{pods}/bound")).status_code == 200
    # the node finishes with grace 0
    r = await admin_http.delete(f"{pods}/bound", params={"gracePeriodSeconds": "0"})
    assert r.json()["status"] == "Success"
    assert (await admin_http.get(f"{pods}/bound")).status_code == 404


async def test_deletecollection_with_label_selector(admin_http: httpx.AsyncClient) -> None:
    for name, app in (("a", "x"), ("b", "x"), ("c", "y")):
        await admin_http.post(CM, json={"metadata": {"name": name, "labels": {"app": app}}})
    r = await admin_http.delete(CM, params={"labelSelector": "app=x"})
    assert sorted(i["metadata"]["name"] for i in r.json()["items"]) == ["a", "b"]
    left = (await admin_http.get(CM, params={"labelSelector": "app"})).json()["items"]
    assert [i["metadata"]["name"] for i in left] == ["c"]


async def test_errors_are_status_objects(admin_http: httpx.AsyncClient) -> None:
    r = await admin_http.get("/api/v1/namespaces/default/nothings")
    assert r.status_code == 404
    assert r.json()["kind"] == "Status"
    assert r.json()["reason"] == "NotFound"
    assert (await admin_http.get("/no/such/path")).status_code == 404
    r = await admin_http.get(f"{CM}/missing")
    assert r.status_code == 404
    assert r.json()["message"] == 'configmaps "missing" not found'
    r = await admin_http.post(
        CM, content=b"{not json", headers={"Content-Type": "application/json"}
    )
    assert r.status_code == 400
    assert r.json()["reason"] == "BadRequest"
    big = {"metadata": {"name": "big"}, "data": {"x": "y" * (3 * 1024 * 1024 + 1)}}
    r = await admin_http.post(CM, json=big)
    assert r.status_code == 413
    assert r.json()["reason"] == "RequestEntityTooLarge"
    r = await admin_http.post(
        "/api/v1/namespaces/nowhere/configmaps", json={"metadata": {"name": "a"}}
    )
    assert r.status_code == 404
    assert r.json()["message"] == 'namespaces "nowhere" not found'
    r = await admin_http.post(CM, json={"metadata": {"name": "Bad_Name"}})
    assert r.status_code == 422
    assert r.json()["details"]["causes"][0]["field"] == "metadata.name"
    r = await admin_http.post(
        CM, json={"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "a"}}
    )
    assert r.status_code == 400


async def test_namespace_deletion_empties_it(admin_http: httpx.AsyncClient) -> None:
    import trio

    await admin_http.post("/api/v1/namespaces", json={"metadata": {"name": "tmp"}})
    await admin_http.post("/api/v1/namespaces/tmp/configmaps", json={"metadata": {"name": "a"}})
    r = await admin_http.delete("/api/v1/namespaces/tmp")
    assert r.json()["status"]["phase"] == "Terminating"
    blocked = await admin_http.post(
        "/api/v1/namespaces/tmp/configmaps", json={"metadata": {"name": "b"}}
    )
    assert blocked.status_code in (403, 404)
    with trio.fail_after(5):
        await watch_until(admin_http, "/api/v1/namespaces", "tmp", lambda o: o is None)
    assert (await admin_http.get("/api/v1/namespaces/tmp/configmaps/a")).status_code == 404


async def test_new_namespace_gets_default_service_account(admin_http: httpx.AsyncClient) -> None:
    import trio

    await admin_http.post("/api/v1/namespaces", json={"metadata": {"name": "fresh"}})
    with trio.fail_after(5):
        await watch_until(
            admin_http,
            "/api/v1/namespaces/fresh/serviceaccounts",
            "default",
            lambda o: o is not None,
        )


BUILTIN_PATHS = [
    ("/api/v1/namespaces/default/services", {"spec": {"ports": [{"port": 80}]}}),
    ("/api/v1/namespaces/default/endpoints", {"subsets": []}),
    (
        "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices",
        {"addressType": "IPv4", "endpoints": []},
    ),
    ("/api/v1/namespaces/default/secrets", {"data": {"k": "dg=="}}),
    ("/api/v1/namespaces/default/serviceaccounts", {}),
    (
        "/apis/apps/v1/namespaces/default/replicasets",
        {
            "spec": {
                "selector": {"matchLabels": {"a": "b"}},
                "template": {
                    "metadata": {"labels": {"a": "b"}},
                    "spec": {"containers": [{"name": "c", "image": "x"}]},
                },
            }
        },
    ),
    ("/apis/coordination.k8s.io/v1/namespaces/default/leases", {"spec": {"holderIdentity": "x"}}),
    ("/apis/rbac.authorization.k8s.io/v1/clusterroles", {"rules": []}),
    ("/api/v1/nodes", {"spec": {}}),
]


@pytest.mark.parametrize(("collection", "extra"), BUILTIN_PATHS, ids=[p for p, _ in BUILTIN_PATHS])
async def test_builtin_kinds_round_trip(
    admin_http: httpx.AsyncClient, collection: str, extra: dict[str, Any]
) -> None:
    r = await admin_http.post(
        collection, json={"metadata": {"name": "one", "labels": {"t": "x"}}, **extra}
    )
    assert r.status_code == 201, r.text
    got = (await admin_http.get(f"{collection}/one")).json()
    assert got["metadata"]["uid"] == r.json()["metadata"]["uid"]
    listed = (await admin_http.get(collection, params={"labelSelector": "t=x"})).json()
    assert [i["metadata"]["name"] for i in listed["items"]] == ["one"]
    assert (await admin_http.delete(f"{collection}/one")).status_code == 200


async def test_pod_status_subresource_and_field_selectors(admin_http: httpx.AsyncClient) -> None:
    pods = "/api/v1/namespaces/default/pods"
    spec = {"containers": [{"name": "c", "image": "x"}]}
    await admin_http.post(
        pods, json={"metadata": {"name": "a"}, "spec": {**spec, "nodeName": "n1"}}
    )
    await admin_http.post(
        pods, json={"metadata": {"name": "b"}, "spec": {**spec, "nodeName": "n2"}}
    )
    merge = {"Content-Type": "application/merge-patch+json"}
    r = await admin_http.patch(
        f"{pods}/a/status", content=b'{"status":{"phase":"Running"}}', headers=merge
    )
    assert r.json()["status"]["phase"] == "Running"
    r = await admin_http.patch(
        f"{pods}/b", content=b'{"status":{"phase":"Running"}}', headers=merge
    )
    assert r.json()["status"]["phase"] == "Pending", "the main resource ignores status"
    running = await admin_http.get("/api/v1/pods", params={"fieldSelector": "status.phase=Running"})
    assert [p["metadata"]["name"] for p in running.json()["items"]] == ["a"]
    on_n2 = await admin_http.get(pods, params={"fieldSelector": "spec.nodeName=n2"})
    assert [p["metadata"]["name"] for p in on_n2.json()["items"]] == ["b"]


async def test_dry_run_stores_nothing(admin_http: httpx.AsyncClient) -> None:
    r = await admin_http.post(CM, json={"metadata": {"name": "dry"}}, params={"dryRun": "All"})
    assert r.status_code == 201
    assert r.json()["metadata"]["uid"]
    assert (await admin_http.get(f"{CM}/dry")).status_code == 404


async def test_pod_validation_and_spec_immutability(admin_http: httpx.AsyncClient) -> None:
    pods = "/api/v1/namespaces/default/pods"
    r = await admin_http.post(pods, json={"metadata": {"name": "empty"}, "spec": {}})
    assert r.status_code == 422
    assert r.json()["message"] == 'Pod "empty" is invalid: spec.containers: Required value'
    dup = {"containers": [{"name": "c", "image": "x"}, {"name": "c"}]}
    r = await admin_http.post(pods, json={"metadata": {"name": "dup"}, "spec": dup})
    fields = [c["field"] for c in r.json()["details"]["causes"]]
    assert fields == ["spec.containers[1].name", "spec.containers[1].image"]
    ok = {"containers": [{"name": "c", "image": "x"}]}
    await admin_http.post(pods, json={"metadata": {"name": "p"}, "spec": ok})
    merge = {"Content-Type": "application/merge-patch+json"}
    image = {"spec": {"containers": [{"name": "c", "image": "y"}]}}
    assert (
        await admin_http.patch(f"{pods}/p", content=json.dumps(image), headers=merge)
    ).status_code == 200
    r = await admin_http.patch(
        f"{pods}/p", content=b'{"spec":{"restartPolicy":"Never"}}', headers=merge
    )
    assert r.status_code == 422
    assert "pod updates may not change fields other than" in r.json()["message"]
    r = await admin_http.patch(f"{pods}/p", content=b'{"spec":{"nodeName":"n1"}}', headers=merge)
    assert r.status_code == 422, "nodeName is set through the binding subresource"


async def test_pod_binding_subresource(admin_http: httpx.AsyncClient) -> None:
    pods = "/api/v1/namespaces/default/pods"
    created = (
        await admin_http.post(
            pods,
            json={"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]}},
        )
    ).json()
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "p", "uid": created["metadata"]["uid"]},
        "target": {"kind": "Node", "name": "n1"},
    }
    r = await admin_http.post(f"{pods}/p/binding", json=binding)
    assert r.status_code == 201
    assert r.json()["status"] == "Success"
    assert (await admin_http.get(f"{pods}/p")).json()["spec"]["nodeName"] == "n1"
    again = await admin_http.post(f"{pods}/p/binding", json={**binding, "target": {"name": "n2"}})
    assert again.status_code == 409
    assert 'already assigned to node "n1"' in again.json()["message"]


async def test_workload_selector_rules(admin_http: httpx.AsyncClient) -> None:
    bad = deployment()
    bad["spec"]["template"]["metadata"]["labels"] = {"app": "other"}
    r = await admin_http.post(DEPLOY, json=bad)
    assert r.status_code == 422
    assert r.json()["details"]["causes"][0]["field"] == "spec.template.metadata.labels"
    assert "`selector` does not match template `labels`" in r.json()["message"]
    no_selector = deployment()
    del no_selector["spec"]["selector"]
    assert (await admin_http.post(DEPLOY, json=no_selector)).json()["details"]["causes"][0][
        "field"
    ] == "spec.selector"
    await admin_http.post(DEPLOY, json=deployment())
    change = {
        "spec": {
            "selector": {"matchLabels": {"app": "web", "v": "2"}},
            "template": {"metadata": {"labels": {"app": "web", "v": "2"}}},
        }
    }
    r = await admin_http.patch(
        f"{DEPLOY}/web",
        content=json.dumps(change),
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert r.status_code == 422
    assert "field is immutable" in r.json()["message"]


async def test_subresources_serve_only_their_verbs(admin_http: httpx.AsyncClient) -> None:
    pods = "/api/v1/namespaces/default/pods"
    await admin_http.post(
        pods,
        json={"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]}},
    )
    assert (await admin_http.delete(f"{pods}/p/status")).status_code == 405
    assert (await admin_http.put(f"{pods}/p/log", json={})).status_code == 405
    assert (await admin_http.get(f"{pods}/p")).status_code == 200, "nothing was deleted"
    assert (
        await admin_http.get("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews")
    ).status_code == 405
