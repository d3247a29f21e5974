"""Wrong-typed fields inside built-in bodies are 400 decoding errors, as on kube-apiserver.

kube-apiserver decodes a built-in body whole into its Go struct, so a pod template's
``metadata.labels: 5`` fails like a top-level one: 400 BadRequest naming the full path
(``ObjectMeta.spec.template.metadata.labels``), never a 500, a 422 or a stored object that
a controller then fails on (user test finding F1).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import httpx
import pytest

from localkube import builtin_types
from localkube.errors import ApiError

MERGE = {"Content-Type": "application/merge-patch+json"}
PATHS = {
    "Deployment": "/apis/apps/v1/namespaces/default/deployments",
    "ReplicaSet": "/apis/apps/v1/namespaces/default/replicasets",
}


def workload(kind: str, name: str, *, replicas: int = 0) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"a": "b"}},
            "template": {
                "metadata": {"labels": {"a": "b"}},
                "spec": {"containers": [{"name": "c", "image": "x"}]},
            },
        },
    }


def _set(body: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    node = body
    *parents, last = path.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value
    return body


#: (dotted path in a workload body, value, Go's problem).
WORKLOAD_CASES: list[tuple[str, Any, str]] = [
    ("spec.template.metadata.labels", 5, "number into Go struct field ObjectMeta.spec.template.metadata.labels of type map[string]string"),
    ("spec.template.metadata.labels", {"a": 1}, "number into Go struct field ObjectMeta.spec.template.metadata.labels of type string"),
    ("spec.template.metadata.annotations", 5, "number into Go struct field ObjectMeta.spec.template.metadata.annotations of type map[string]string"),
    ("spec.template.metadata.annotations", {"n": True}, "bool into Go struct field ObjectMeta.spec.template.metadata.annotations of type string"),
    ("spec.template.metadata.finalizers", "f", "string into Go struct field ObjectMeta.spec.template.metadata.finalizers of type []string"),
    ("spec.template.metadata", [], "array into Go struct field PodTemplateSpec.spec.template.metadata of type v1.ObjectMeta"),
    ("spec.template", "t", "string into Go struct field ReplicaSetSpec.spec.template of type v1.PodTemplateSpec"),
    ("spec.template.spec.nodeSelector", 5, "number into Go struct field PodSpec.spec.template.spec.nodeSelector of type map[string]string"),
    ("spec.template.spec.nodeSelector", {"k": 1}, "number into Go struct field PodSpec.spec.template.spec.nodeSelector of type string"),
    ("spec.selector.matchLabels", 5, "number into Go struct field LabelSelector.spec.selector.matchLabels of type map[string]string"),
    ("spec.selector.matchExpressions", [{"key": "a", "operator": 1}], "number into Go struct field LabelSelectorRequirement.spec.selector.matchExpressions.operator of type v1.LabelSelectorOperator"),
    ("spec.replicas", "2", "string into Go struct field ReplicaSetSpec.spec.replicas of type int32"),
    ("spec.replicas", 1.5, "number 1.5 into Go struct field ReplicaSetSpec.spec.replicas of type int32"),
    ("spec.replicas", 2**31, "number 2147483648 into Go struct field ReplicaSetSpec.spec.replicas of type int32"),
    ("spec", 5, "number into Go struct field ReplicaSet.spec of type v1.ReplicaSetSpec"),
]  # fmt: skip


def _message(kind: str, problem: str) -> str:
    problem = problem.replace("ReplicaSet", kind)
    return f'{kind} in version "v1" cannot be handled as a {kind}: json: cannot unmarshal {problem}'


@pytest.mark.parametrize("kind", ["Deployment", "ReplicaSet"])
@pytest.mark.parametrize(("path", "value", "problem"), WORKLOAD_CASES)
async def test_wrong_typed_workload_fields_are_400_and_not_stored(
    admin_http: httpx.AsyncClient, kind: str, path: str, value: Any, problem: str
) -> None:
    url = PATHS[kind]
    message = _message(kind, problem)
    r = await admin_http.post(url, json=_set(workload(kind, "bad"), path, value))
    assert (r.status_code, r.json()["reason"]) == (400, "BadRequest"), r.text
    assert r.json()["message"] == message
    assert (await admin_http.get(f"{url}/bad")).status_code == 404

    created = await admin_http.post(url, json=workload(kind, "good"))
    assert created.status_code == 201, created.text
    replaced = _set(copy.deepcopy(created.json()), path, value)
    r = await admin_http.put(f"{url}/good", json=replaced)
    assert (r.status_code, r.json()["message"]) == (400, message), r.text
    patch = _set({}, path, value)
    r = await admin_http.patch(f"{url}/good", content=json.dumps(patch), headers=MERGE)
    assert (r.status_code, r.json()["message"]) == (400, message), r.text
    stored = (await admin_http.get(f"{url}/good")).json()
    assert stored["spec"] == created.json()["spec"]


async def test_pod_node_selector_must_be_a_string_map(admin_http: httpx.AsyncClient) -> None:
    url = "/api/v1/namespaces/default/pods"
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
    for value, go_type in ((5, "map[string]string"), ({"k": ["v"]}, "string")):
        r = await admin_http.post(url, json=_set(copy.deepcopy(pod), "spec.nodeSelector", value))
        assert (r.status_code, r.json()["message"]) == (
            400,
            'Pod in version "v1" cannot be handled as a Pod: json: cannot unmarshal '
            f"{'number' if value == 5 else 'array'} into Go struct field "
            f"PodSpec.spec.nodeSelector of type {go_type}",
        ), r.text
    assert (await admin_http.get(f"{url}/p")).status_code == 404


async def test_well_typed_and_null_fields_still_create(admin_http: httpx.AsyncClient) -> None:
    body = workload("Deployment", "ok")
    body["spec"]["template"]["metadata"]["annotations"] = None
    body["spec"]["template"]["spec"]["nodeSelector"] = {"disk": "ssd"}
    body["spec"]["minReadySeconds"] = None
    body["spec"]["template"]["spec"]["unknownField"] = 5  # not ours to type-check
    r = await admin_http.post(PATHS["Deployment"], json=body)
    assert r.status_code == 201, r.text


async def test_well_typed_template_labels_not_matching_stay_422(
    admin_http: httpx.AsyncClient,
) -> None:
    body = _set(workload("Deployment", "d"), "spec.template.metadata.labels", {"a": "c"})
    r = await admin_http.post(PATHS["Deployment"], json=body)
    assert r.status_code == 422, r.text
    assert "`selector` does not match template `labels`" in r.text


#: Kinds localkube does not serve yet: the decoding table is ready for them.
TEMPLATE_OWNERS: list[tuple[str, str, str, str]] = [
    ("apps/statefulsets", "StatefulSet", "spec.template.metadata.labels", "ObjectMeta"),
    ("apps/daemonsets", "DaemonSet", "spec.template.metadata.annotations", "ObjectMeta"),
    ("batch/jobs", "Job", "spec.template.metadata.labels", "ObjectMeta"),
    ("batch/jobs", "Job", "spec.template.spec.nodeSelector", "PodSpec"),
    ("batch/cronjobs", "CronJob", "spec.jobTemplate.metadata.labels", "ObjectMeta"),
    ("batch/cronjobs", "CronJob", "spec.jobTemplate.spec.template.metadata.labels", "ObjectMeta"),
    ("batch/cronjobs", "CronJob", "spec.jobTemplate.spec.template.spec.nodeSelector", "PodSpec"),
]


@pytest.mark.parametrize(("storage_key", "kind", "path", "struct"), TEMPLATE_OWNERS)
def test_every_pod_template_owner_decodes_its_embedded_maps(
    storage_key: str, kind: str, path: str, struct: str
) -> None:
    body = _set({"metadata": {"name": "x"}}, path, 5)
    before = copy.deepcopy(body)
    with pytest.raises(ApiError) as caught:
        builtin_types.check_builtin_types(body, storage_key=storage_key, kind=kind, version="v1")
    assert (caught.value.code, caught.value.message) == (
        400,
        f'{kind} in version "v1" cannot be handled as a {kind}: json: cannot unmarshal '
        f"number into Go struct field {struct}.{path} of type map[string]string",
    )
    assert body == before
    builtin_types.check_builtin_types(
        _set({}, path, {"a": "b"}), storage_key=storage_key, kind=kind, version="v1"
    )


def test_the_first_problem_in_body_order_is_reported() -> None:
    body = {
        "spec": {"template": {"metadata": {"annotations": 1}}},
        "metadata": {"labels": 2},
    }
    with pytest.raises(ApiError) as caught:
        builtin_types.check_builtin_types(
            body, storage_key="apps/replicasets", kind="ReplicaSet", version="v1"
        )
    assert "ObjectMeta.spec.template.metadata.annotations" in caught.value.message


#: (metadata field, value, Go's problem) of a built-in body's top-level ObjectMeta scalars.
SCALAR_CASES: list[tuple[str, Any, str]] = [
    ("name", 5, "number into Go struct field ObjectMeta.metadata.name of type string"),
    ("generateName", ["g"], "array into Go struct field ObjectMeta.metadata.generateName of type string"),
    ("namespace", 5, "number into Go struct field ObjectMeta.metadata.namespace of type string"),
    ("uid", 5, "number into Go struct field ObjectMeta.metadata.uid of type types.UID"),
    ("generation", "1", "string into Go struct field ObjectMeta.metadata.generation of type int64"),
    ("creationTimestamp", 5, "number into Go struct field ObjectMeta.metadata.creationTimestamp of type string"),
]  # fmt: skip


@pytest.mark.parametrize(("field", "value", "problem"), SCALAR_CASES)
async def test_wrong_typed_object_meta_scalars_of_a_built_in_object_are_400(
    admin_http: httpx.AsyncClient, field: str, value: Any, problem: str
) -> None:
    url = "/api/v1/namespaces/default/configmaps"
    r = await admin_http.post(url, json={"metadata": {"name": "c", field: value}})
    assert (r.status_code, r.json()["message"]) == (
        400,
        f'ConfigMap in version "v1" cannot be handled as a ConfigMap: json: cannot unmarshal {problem}',
    ), r.text
    assert (await admin_http.get(f"{url}/c")).status_code == 404
