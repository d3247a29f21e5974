"""Label and annotation syntax is enforced on create, update and patch, as on Kubernetes.

Spec: issue 3, "Object metadata" (faithful validation). Found by the adversarial review:
labels such as ``{"bad key!": "bad value!"}`` used to be stored.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from localkube import label_rules

CM = "/api/v1/namespaces/default/configmaps"
MERGE = {"Content-Type": "application/merge-patch+json"}

QNAME_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with "
    "an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
    "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)


@pytest.mark.parametrize(
    "key",
    ["app", "a.b_c-D9", "example.com/app", "x" * 63, "k8s.io/" + "x" * 63, "A/b".lower()],
)
def test_valid_qualified_names(key: str) -> None:
    assert label_rules.qualified_name_problems(key) == []


@pytest.mark.parametrize(
    ("key", "problem"),
    [
        ("bad key!", f"name part {QNAME_MSG}"),
        ("", "name part must be non-empty"),
        ("x" * 64, "name part must be no more than 63 characters"),
        ("/app", "prefix part must be non-empty"),
        ("Example.com/app", "prefix part a lowercase RFC 1123 subdomain"),
        ("example.com/", "name part must be non-empty"),
        ("a/b/c", "a qualified name must consist of"),
        ("-app", f"name part {QNAME_MSG}"),
    ],
)
def test_invalid_qualified_names(key: str, problem: str) -> None:
    problems = label_rules.qualified_name_problems(key)
    assert any(p.startswith(problem) for p in problems), problems


def test_label_values() -> None:
    assert label_rules.label_value_problems("") == []
    assert label_rules.label_value_problems("My_value.1") == []
    assert label_rules.label_value_problems("x" * 64) == ["must be no more than 63 characters"]
    [problem] = label_rules.label_value_problems("bad value!")
    assert problem.startswith("a valid label must be an empty string or consist of")


@pytest.mark.parametrize(
    ("metadata", "field", "message"),
    [
        (
            {"labels": {"bad key!": "v"}},
            "metadata.labels",
            f'metadata.labels: Invalid value: "bad key!": name part {QNAME_MSG}',
        ),
        (
            {"labels": {"k": "\u00fc"}},
            "metadata.labels",
            'metadata.labels: Invalid value: "\u00fc": a valid label must be an empty string',
        ),
        (
            {"annotations": {"bad/key/x": "v"}},
            "metadata.annotations",
            'metadata.annotations: Invalid value: "bad/key/x": a qualified name must consist',
        ),
        (
            {"annotations": {"a": "x" * (256 * 1024)}},
            "metadata.annotations",
            "metadata.annotations: Too long: may not be more than 262144 bytes",
        ),
    ],
)
async def test_bad_labels_and_annotations_are_422_on_every_write(
    admin_http: httpx.AsyncClient, metadata: dict[str, Any], field: str, message: str
) -> None:
    r = await admin_http.post(CM, json={"metadata": {"name": "bad", **metadata}})
    assert r.status_code == 422, r.text
    status = r.json()
    assert status["reason"] == "Invalid"
    assert status["message"].startswith(f'ConfigMap "bad" is invalid: {message}'), status
    assert status["details"]["causes"][0]["field"] == field
    assert (await admin_http.get(f"{CM}/bad")).status_code == 404

    created = await admin_http.post(CM, json={"metadata": {"name": "good", "labels": {"a": "b"}}})
    assert created.status_code == 201
    r = await admin_http.patch(f"{CM}/good", json={"metadata": metadata}, headers=MERGE)
    assert r.status_code == 422, r.text
    body = created.json()
    body["metadata"].update(metadata)
    r = await admin_http.put(f"{CM}/good", json=body)
    assert r.status_code == 422, r.text
    stored = (await admin_http.get(f"{CM}/good")).json()
    assert stored["metadata"]["labels"] == {"a": "b"}
    assert stored["metadata"]["resourceVersion"] == created.json()["metadata"]["resourceVersion"]


async def test_annotation_keys_are_checked_case_insensitively(
    admin_http: httpx.AsyncClient,
) -> None:
    r = await admin_http.post(
        CM,
        json={"metadata": {"name": "ok", "annotations": {"Example.COM/Key": "any value !"}}},
    )
    assert r.status_code == 201, r.text


@pytest.mark.parametrize(
    ("metadata", "field", "message"),
    [
        (
            {"finalizers": ["bad finalizer"]},
            "metadata.finalizers",
            f'metadata.finalizers: Invalid value: "bad finalizer": name part {QNAME_MSG}',
        ),
        (
            {"finalizers": ["orphan", "foregroundDeletion"]},
            "metadata.finalizers",
            "metadata.finalizers: Invalid value: "
            '["orphan","foregroundDeletion"]: finalizer orphan and foregroundDeletion cannot '
            "be both set",
        ),
        (
            {"ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "o"}]},
            "metadata.ownerReferences.uid",
            'metadata.ownerReferences.uid: Invalid value: "": uid must not be empty',
        ),
        (
            {"ownerReferences": [{"apiVersion": "apps/", "kind": "X", "name": "o", "uid": "u"}]},
            "metadata.ownerReferences.apiVersion",
            'metadata.ownerReferences.apiVersion: Invalid value: "apps/": version must not be '
            "empty",
        ),
        (
            {
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "A", "name": n, "uid": n, "controller": True}
                    for n in ("a", "b")
                ]
            },
            "metadata.ownerReferences",
            'Only one reference can have Controller set to true. Found "true" in references '
            "for A/a and A/b",
        ),
    ],
)
async def test_bad_finalizers_and_owner_references_are_422(
    admin_http: httpx.AsyncClient, metadata: dict[str, Any], field: str, message: str
) -> None:
    r = await admin_http.post(CM, json={"metadata": {"name": "bad", **metadata}})
    assert r.status_code == 422, r.text
    cause = r.json()["details"]["causes"][0]
    assert cause["field"] == field
    assert message in r.json()["message"]
    created = await admin_http.post(CM, json={"metadata": {"name": "good"}})
    r = await admin_http.patch(f"{CM}/good", json={"metadata": metadata}, headers=MERGE)
    assert r.status_code == 422, r.text
    stored = (await admin_http.get(f"{CM}/good")).json()
    assert stored["metadata"]["resourceVersion"] == created.json()["metadata"]["resourceVersion"]


async def test_valid_finalizers_and_owner_references_are_accepted(
    admin_http: httpx.AsyncClient,
) -> None:
    owner = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d", "uid": "u-1"}
    r = await admin_http.post(
        CM,
        json={
            "metadata": {
                "name": "ok",
                "finalizers": ["example.com/cleanup", "foregroundDeletion"],
                "ownerReferences": [{**owner, "controller": True}],
            }
        },
    )
    assert r.status_code == 201, r.text
