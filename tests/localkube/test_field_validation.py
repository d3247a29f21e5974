"""Server-side field validation of built-in kinds (``fieldValidation=Strict|Warn|Ignore``).

kube-apiserver, for a built-in kind: Strict refuses a body with a field the kind does not
declare (create/update: 400 ``... cannot be handled as a Pod: strict decoding error:
unknown field "spec.containers[0].imagee"``; patches: 422 on ``patch``), Warn (the default)
accepts it with a ``Warning`` header per field and drops the field, Ignore drops it
silently. kubectl 1.32 sends Strict; our controllers and kr8s send nothing (Warn).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import httpx
import pytest

from localkube import field_validation
from localkube.errors import ApiError
from localkube.field_validation import Directive

PODS = "/api/v1/namespaces/default/pods"
DEPLOYMENTS = "/apis/apps/v1/namespaces/default/deployments"
IMAGEE = 'unknown field "spec.containers[0].imagee"'


def _pod(name: str = "p1", **container_extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "busybox", **container_extra}]},
    }


def _warnings(response: httpx.Response) -> list[str]:
    return response.headers.get_list("warning")


# pure functions ---------------------------------------------------------------------------


def test_unknown_fields_paths_in_body_order() -> None:
    pod = _pod(imagee="x")
    pod["metadata"]["nam"] = "typo"
    pod["metadata"]["managedFields"] = [{"manager": "m", "fieldsV1": {"f:spec": {}}}]
    pod["spec"]["volumes"] = [{"name": "v", "emptyDir": {"medium": "", "sizeLimitt": "1Gi"}}]
    pod["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1"}}
    pod["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "Port": 1}]  # case matters
    pod["status"] = {"phase": "Running", "bogus": 1}
    assert field_validation.unknown_fields(pod, "io.k8s.api.core.v1.Pod") == [
        "metadata.nam",
        "spec.containers[0].imagee",
        "spec.containers[0].ports[0].Port",
        "spec.volumes[0].emptyDir.sizeLimitt",
        "status.bogus",
    ]


def test_unknown_fields_remove_drops_only_unknown_ones() -> None:
    pod = _pod(imagee="x")
    expected = _pod()
    assert field_validation.unknown_fields(pod, "io.k8s.api.core.v1.Pod", remove=True) == [
        "spec.containers[0].imagee"
    ]
    assert pod == expected


def test_open_ended_fields_take_anything() -> None:
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "xs.example.io"},
        "spec": {
            "group": "example.io",
            "names": {"plural": "xs", "kind": "X"},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {"spec": {"type": "object", "default": {"any": 1}}},
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }
    name = "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinition"
    assert field_validation.unknown_fields(crd, name) == []
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["typo"] = 1
    assert field_validation.unknown_fields(crd, name) == [
        "spec.versions[0].schema.openAPIV3Schema.properties.spec.typo"
    ]


def test_at_most_100_unknown_fields_are_reported_but_all_removed() -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
    cm.update({f"f{i}": i for i in range(150)})
    found = field_validation.unknown_fields(cm, "io.k8s.api.core.v1.ConfigMap", remove=True)
    assert len(found) == field_validation.MAX_REPORTED
    assert set(cm) == {"apiVersion", "kind", "metadata"}


def test_go_map_text_prints_like_go() -> None:
    patch = {"spec": {"containers": [{"name": "c", "imagee": None, "n": 1.5, "b": True}]}}
    assert field_validation.go_map_text(patch) == (
        "map[spec:map[containers:[map[b:true imagee:<nil> n:1.5 name:c]]]]"
    )
    assert field_validation.go_map_text(1000000.0) == "1e+06"
    assert field_validation.go_map_text(3) == "3"


def test_parse_directive() -> None:
    assert field_validation.parse_directive("", options_kind="CreateOptions") is Directive.WARN
    assert field_validation.parse_directive("Ignore", options_kind="x") is Directive.IGNORE
    assert field_validation.parse_directive("Strict", options_kind="x") is Directive.STRICT
    with pytest.raises(ApiError) as caught:
        field_validation.parse_directive("strict", options_kind="CreateOptions")
    assert caught.value.code == 422
    assert caught.value.message == (
        'CreateOptions.meta.k8s.io "" is invalid: fieldValidation: Unsupported value: '
        '"strict": supported values: "Ignore", "Strict", "Warn"'
    )


# over HTTP --------------------------------------------------------------------------------


async def test_create_strict_refuses_unknown_field(admin_http: httpx.AsyncClient) -> None:
    response = await admin_http.post(
        PODS, json=_pod(imagee="x"), params={"fieldValidation": "Strict"}
    )
    assert response.status_code == 400
    status = response.json()
    assert status["reason"] == "BadRequest"
    assert status["message"] == (
        'Pod in version "v1" cannot be handled as a Pod: strict decoding error: ' + IMAGEE
    )
    assert (await admin_http.get(f"{PODS}/p1")).status_code == 404  # nothing stored


async def test_create_warn_is_the_default_and_drops_the_field(
    admin_http: httpx.AsyncClient,
) -> None:
    for params, name in (({}, "p1"), ({"fieldValidation": "Warn"}, "p2")):
        response = await admin_http.post(PODS, json=_pod(name, imagee="x"), params=params)
        assert response.status_code == 201, response.text
        assert _warnings(response) == [f'299 - "{IMAGEE.replace(chr(34), chr(92) + chr(34))}"']
        assert "imagee" not in response.json()["spec"]["containers"][0]
        stored = (await admin_http.get(f"{PODS}/{name}")).json()
        assert "imagee" not in stored["spec"]["containers"][0]


async def test_create_ignore_drops_silently(admin_http: httpx.AsyncClient) -> None:
    response = await admin_http.post(
        PODS, json=_pod(imagee="x"), params={"fieldValidation": "Ignore"}
    )
    assert response.status_code == 201
    assert _warnings(response) == []
    assert "imagee" not in response.json()["spec"]["containers"][0]


async def test_a_valid_body_gets_no_warning(admin_http: httpx.AsyncClient) -> None:
    response = await admin_http.post(PODS, json=_pod(), params={"fieldValidation": "Strict"})
    assert response.status_code == 201
    assert _warnings(response) == []


async def test_unsupported_directive_is_invalid(admin_http: httpx.AsyncClient) -> None:
    response = await admin_http.post(PODS, json=_pod(), params={"fieldValidation": "Loud"})
    assert response.status_code == 422
    assert "fieldValidation: Unsupported value" in response.json()["message"]


@pytest.mark.parametrize(
    ("collection", "body", "path"),
    [
        (
            DEPLOYMENTS,
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "d"},
                "spec": {
                    "selector": {"matchLabels": {"a": "b"}},
                    "template": {
                        "metadata": {"labels": {"a": "b"}},
                        "spec": {"containers": [{"name": "c", "image": "i", "imagee": "x"}]},
                    },
                },
            },
            "spec.template.spec.containers[0].imagee",
        ),
        (
            "/apis/apps/v1/namespaces/default/replicasets",
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "metadata": {"name": "r"},
                "spec": {"replica": 2, "selector": {"matchLabels": {"a": "b"}}},
            },
            "spec.replica",
        ),
        (
            "/api/v1/namespaces/default/services",
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "s"},
                "spec": {"ports": [{"port": 80, "targetport": 8080}]},
            },
            "spec.ports[0].targetport",
        ),
        (
            "/api/v1/namespaces/default/configmaps",
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "date": {}},
            "date",
        ),
        (
            "/api/v1/namespaces/default/secrets",
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "s"},
                "stringdata": {"a": "b"},
            },
            "stringdata",
        ),
        (
            "/api/v1/namespaces",
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": "n", "label": {"a": "b"}},
            },
            "metadata.label",
        ),
        (
            "/api/v1/namespaces/default/serviceaccounts",
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": "sa"},
                "automountServiceAccountTokens": False,
            },
            "automountServiceAccountTokens",
        ),
    ],
)
async def test_strict_for_each_kind(
    admin_http: httpx.AsyncClient, collection: str, body: dict[str, Any], path: str
) -> None:
    response = await admin_http.post(collection, json=body, params={"fieldValidation": "Strict"})
    assert response.status_code == 400, response.text
    assert response.json()["message"].endswith(f'strict decoding error: unknown field "{path}"')


async def test_update_strict_and_warn(admin_http: httpx.AsyncClient) -> None:
    created = (await admin_http.post(PODS, json=_pod())).json()
    body = copy.deepcopy(created)
    body["spec"]["containers"][0]["imagee"] = "x"
    refused = await admin_http.put(f"{PODS}/p1", json=body, params={"fieldValidation": "Strict"})
    assert refused.status_code == 400
    assert refused.json()["message"].endswith(IMAGEE)
    accepted = await admin_http.put(f"{PODS}/p1", json=body)
    assert accepted.status_code == 200, accepted.text
    assert len(_warnings(accepted)) == 1
    assert "imagee" not in accepted.json()["spec"]["containers"][0]


async def test_status_update_is_checked_too(admin_http: httpx.AsyncClient) -> None:
    created = (await admin_http.post(PODS, json=_pod())).json()
    body = copy.deepcopy(created)
    body["status"] = {"phase": "Pending", "phaze": "x"}
    refused = await admin_http.put(
        f"{PODS}/p1/status", json=body, params={"fieldValidation": "Strict"}
    )
    assert refused.status_code == 400
    assert refused.json()["message"].endswith('unknown field "status.phaze"')


@pytest.mark.parametrize(
    ("content_type", "patch"),
    [
        ("application/merge-patch+json", {"metadata": {"labels": {"a": "b"}}, "spec": {"foo": 1}}),
        ("application/json-patch+json", [{"op": "add", "path": "/spec/foo", "value": 1}]),
        (
            "application/strategic-merge-patch+json",
            {"metadata": {"labels": {"a": "b"}}, "spec": {"foo": 1}},
        ),
    ],
)
async def test_patch_strict_is_invalid_on_patch(
    admin_http: httpx.AsyncClient, content_type: str, patch: Any
) -> None:
    await admin_http.post(PODS, json=_pod())
    response = await admin_http.patch(
        f"{PODS}/p1",
        content=json.dumps(patch),
        headers={"content-type": content_type},
        params={"fieldValidation": "Strict"},
    )
    assert response.status_code == 422, response.text
    status = response.json()
    assert status["reason"] == "Invalid"
    assert status["message"].startswith(' "" is invalid: patch: Invalid value: "')
    assert status["message"].endswith('": strict decoding error: unknown field "spec.foo"')
    [cause] = status["details"]["causes"]
    assert cause["field"] == "patch"
    assert cause["reason"] == "FieldValueInvalid"
    if content_type.startswith("application/strategic"):  # the patch, as Go prints a map
        assert '"map[metadata:map[labels:map[a:b]] spec:map[foo:1]]"' in status["message"]
    else:  # the patched object as JSON
        assert '\\"kind\\":\\"Pod\\"' in status["message"]
    stored = (await admin_http.get(f"{PODS}/p1")).json()
    assert "foo" not in stored["spec"]
    assert "labels" not in stored["metadata"]  # nothing of the patch was applied


async def test_patch_warn_accepts_and_drops(admin_http: httpx.AsyncClient) -> None:
    await admin_http.post(PODS, json=_pod())
    response = await admin_http.patch(
        f"{PODS}/p1",
        content=json.dumps({"metadata": {"labels": {"a": "b"}}, "spec": {"foo": 1}}),
        headers={"content-type": "application/merge-patch+json"},
    )
    assert response.status_code == 200, response.text
    assert _warnings(response) == ['299 - "unknown field \\"spec.foo\\""']
    assert response.json()["metadata"]["labels"] == {"a": "b"}
    assert "foo" not in response.json()["spec"]


async def test_custom_object_warn_gets_warnings(admin_http: httpx.AsyncClient) -> None:
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.io"},
        "spec": {
            "group": "example.io",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "properties": {"size": {"type": "integer"}},
                                }
                            },
                        }
                    },
                }
            ],
        },
    }
    created = await admin_http.post(
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=crd
    )
    assert created.status_code == 201, created.text
    widget = {
        "apiVersion": "example.io/v1",
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": {"size": 1, "colour": "red"},
    }
    response = await admin_http.post("/apis/example.io/v1/namespaces/default/widgets", json=widget)
    assert response.status_code == 201, response.text
    assert _warnings(response) == ['299 - "unknown field \\"spec.colour\\""']
    assert response.json()["spec"] == {"size": 1}


async def test_kr8s_clients_still_write_with_unknown_fields(kr8s_api: Any) -> None:
    """Our controllers and krt use kr8s, which sends no fieldValidation: Warn, never a 400."""
    from kr8s.asyncio.objects import Pod

    pod = await Pod(_pod("k1", imagee="x"), api=kr8s_api)
    await pod.create()
    await pod.refresh()
    assert "imagee" not in pod.raw["spec"]["containers"][0]
    await pod.patch({"metadata": {"labels": {"a": "b"}}, "spec": {"bogus": 1}})
    await pod.refresh()
    assert pod.raw["metadata"]["labels"] == {"a": "b"}


POD_YAML = """\
apiVersion: v1
kind: Pod
metadata:
  name: typo
spec:
  containers:
  - name: c
    image: busybox
    imagee: busybox:1
"""


@pytest.mark.kubectl
async def test_kubectl_apply_of_a_typo_fails_like_kube_apiserver(kubectl: Any) -> None:
    out = await kubectl("apply", "-f", "-", input=POD_YAML, check=False)
    assert out.returncode == 1
    assert out.stderr.strip() == (
        'Error from server (BadRequest): error when creating "STDIN": Pod in version "v1" '
        "cannot be handled as a Pod: strict decoding error: " + IMAGEE
    )
    warned = await kubectl("apply", "-f", "-", "--validate=warn", input=POD_YAML)
    assert f"Warning: {IMAGEE}" in warned.stderr
    assert "pod/typo created" in warned.stdout
    # an apply of an existing object is a strategic merge patch: 422 on "patch"
    changed = POD_YAML.replace("imagee: busybox:1", "imagePullPolicyy: Always")
    out = await kubectl("apply", "-f", "-", input=changed, check=False)
    assert out.returncode == 1
    assert out.stderr.startswith("The request is invalid: patch: Invalid value: ")
    assert out.stderr.strip().endswith(
        'strict decoding error: unknown field "spec.containers[0].imagePullPolicyy"'
    )
