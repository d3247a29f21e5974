"""Acceptance: real ``kubectl`` 1.32 commands against localkube (issue 3, "Acceptance").

Skipped, with a printed reason, only where kubectl is not installed.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import trio
import yaml

from localkube.apiserver import ApiServerHandle
from tests.localkube.conftest import KUBECTL

pytestmark = pytest.mark.kubectl

RUNTIME_CRD_FILE = (
    Path(__file__).resolve().parents[2]
    / "charts"
    / "kruntimes"
    / "crds"
    / "runtimes.kruntimes.io.yaml"
)

CRD = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: gadgets, singular: gadget, kind: Gadget, shortNames: [gd]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    additionalPrinterColumns:
    - {name: Size, type: integer, jsonPath: .spec.size}
    - {name: Phase, type: string, jsonPath: .status.phase}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [size]
            properties:
              size: {type: integer, minimum: 1, maximum: 10}
              color: {type: string, default: blue}
          status:
            type: object
            properties:
              phase: {type: string}
"""

GADGET = """
apiVersion: example.com/v1
kind: Gadget
metadata: {name: g1, namespace: default}
spec: {size: 3}
"""


async def _apply_crd_and_gadget(kubectl: Any) -> None:
    out = await kubectl("apply", "-f", "-", input=CRD)
    assert "customresourcedefinition.apiextensions.k8s.io/gadgets.example.com created" in out.stdout
    out = await kubectl("apply", "-f", "-", input=GADGET)
    assert "gadget.example.com/g1 created" in out.stdout


async def test_get_namespaces(kubectl: Any) -> None:
    out = await kubectl("get", "ns")
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["NAME", "STATUS", "AGE"]
    assert {line.split()[0] for line in lines[1:]} >= {"default", "kube-system", "kube-public"}


async def test_apply_crd_then_custom_object_and_get_yaml(kubectl: Any) -> None:
    await _apply_crd_and_gadget(kubectl)
    obj = yaml.safe_load((await kubectl("get", "gadgets", "g1", "-o", "yaml")).stdout)
    assert obj["spec"] == {"size": 3, "color": "blue"}
    assert obj["metadata"]["generation"] == 1
    assert obj["metadata"]["uid"]
    table = (await kubectl("get", "gd")).stdout.splitlines()
    assert table[0].split() == ["NAME", "SIZE", "PHASE", "AGE"]
    assert table[1].split()[:2] == ["g1", "3"]
    again = await kubectl("apply", "-f", "-", input=GADGET.replace("size: 3", "size: 4"))
    assert "gadget.example.com/g1 configured" in again.stdout
    assert (
        json.loads((await kubectl("get", "gd", "g1", "-o", "json")).stdout)["metadata"][
            "generation"
        ]
        == 2
    )


async def test_invalid_custom_object_is_rejected_like_kube_apiserver(kubectl: Any) -> None:
    await _apply_crd_and_gadget(kubectl)
    out = await kubectl(
        "apply",
        "-f",
        "-",
        input=GADGET.replace("g1", "bad").replace("size: 3", "size: 30"),
        check=False,
    )
    assert out.returncode != 0
    assert 'The Gadget "bad" is invalid' in out.stderr
    assert (
        "spec.size: Invalid value: 30: spec.size in body should be less than or equal to 10"
        in out.stderr
    )


async def test_patch_status_subresource(kubectl: Any) -> None:
    await _apply_crd_and_gadget(kubectl)
    await kubectl(
        "patch",
        "gadget",
        "g1",
        "--subresource=status",
        "--type=merge",
        "-p",
        '{"status":{"phase":"Ready"},"spec":{"size":9}}',
    )
    obj = json.loads((await kubectl("get", "gadget", "g1", "-o", "json")).stdout)
    assert obj["status"] == {"phase": "Ready"}
    assert obj["spec"]["size"] == 3


async def test_a_patch_that_changes_nothing_says_no_change(kubectl: Any) -> None:
    """kube-apiserver does not write a no-op update: same resourceVersion, and kubectl
    prints "(no change)"."""
    await _apply_crd_and_gadget(kubectl)
    before = json.loads((await kubectl("get", "gadget", "g1", "-o", "json")).stdout)
    size = before["spec"]["size"]
    out = await kubectl(
        "patch", "gadget", "g1", "--type=merge", "-p", json.dumps({"spec": {"size": size}})
    )
    assert "patched (no change)" in out.stdout
    after = json.loads((await kubectl("get", "gadget", "g1", "-o", "json")).stdout)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    out = await kubectl("patch", "gadget", "g1", "--type=merge", "-p", '{"spec":{"size":4}}')
    assert "patched" in out.stdout
    assert "no change" not in out.stdout


async def test_get_watch_receives_an_update(
    kubectl: Any, apiserver: ApiServerHandle, tmp_path: Path
) -> None:
    assert KUBECTL is not None
    await _apply_crd_and_gadget(kubectl)
    argv = [
        KUBECTL,
        "--kubeconfig",
        str(apiserver.kubeconfig_path),
        "--cache-dir",
        str(tmp_path / "kubectl-cache"),
        "get",
        "gadgets",
        "-w",
        "--no-headers",
    ]
    process = await trio.lowlevel.open_process(
        argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    assert process.stdout is not None
    received = b""
    try:
        with trio.fail_after(20):
            while b"g1" not in received:
                received += await process.stdout.receive_some()
            await kubectl("patch", "gadget", "g1", "--type=merge", "-p", '{"spec":{"size":7}}')
            while len([line for line in received.splitlines() if line.strip()]) < 2:
                received += await process.stdout.receive_some()
    finally:
        process.kill()
        await process.wait()
    lines = [line.split() for line in received.decode().splitlines() if line.strip()]
    assert lines[0][:2] == ["g1", "3"]
    assert lines[1][:2] == ["g1", "7"]


async def test_delete_with_pending_finalizer(kubectl: Any) -> None:
    await kubectl("create", "configmap", "held")
    await kubectl(
        "patch",
        "configmap",
        "held",
        "--type=merge",
        "-p",
        '{"metadata":{"finalizers":["example.com/hold"]}}',
    )
    out = await kubectl("delete", "configmap", "held", "--wait=false")
    assert 'configmap "held" deleted' in out.stdout
    obj = json.loads((await kubectl("get", "configmap", "held", "-o", "json")).stdout)
    assert obj["metadata"]["deletionTimestamp"]
    assert obj["metadata"]["finalizers"] == ["example.com/hold"]
    await kubectl(
        "patch",
        "configmap",
        "held",
        "--type=json",
        "-p",
        '[{"op":"remove","path":"/metadata/finalizers"}]',
    )
    gone = await kubectl("get", "configmap", "held", check=False)
    assert gone.returncode != 0
    assert 'configmaps "held" not found' in gone.stderr


async def test_auth_can_i_with_service_account_token(kubectl: Any) -> None:
    await kubectl("create", "namespace", "team")
    await kubectl("create", "serviceaccount", "bot", "-n", "team")
    token = (await kubectl("create", "token", "bot", "-n", "team")).stdout.strip()
    assert token.count(".") == 2
    denied = await kubectl("auth", "can-i", "list", "pods", "-n", "team", token=token, check=False)
    assert denied.stdout.strip() == "no"
    assert denied.returncode == 1
    await kubectl(
        "create", "role", "pod-reader", "-n", "team", "--verb=get,list", "--resource=pods"
    )
    await kubectl(
        "create",
        "rolebinding",
        "bot-read",
        "-n",
        "team",
        "--role=pod-reader",
        "--serviceaccount=team:bot",
    )
    allowed = await kubectl("auth", "can-i", "list", "pods", "-n", "team", token=token)
    assert allowed.stdout.strip() == "yes"
    still_denied = await kubectl(
        "auth", "can-i", "delete", "pods", "-n", "team", token=token, check=False
    )
    assert still_denied.stdout.strip() == "no"
    forbidden = await kubectl("get", "secrets", "-n", "team", token=token, check=False)
    assert (
        'User "system:serviceaccount:team:bot" cannot list resource "secrets"' in forbidden.stderr
    )
    whoami = await kubectl("auth", "whoami", "-o", "json", token=token)
    assert (
        json.loads(whoami.stdout)["status"]["userInfo"]["username"]
        == "system:serviceaccount:team:bot"
    )


async def test_api_resources_lists_builtins(kubectl: Any) -> None:
    out = (await kubectl("api-resources", "--no-headers")).stdout
    names = {line.split()[0] for line in out.splitlines()}
    assert {
        "pods",
        "deployments",
        "leases",
        "endpointslices",
        "customresourcedefinitions",
        "selfsubjectaccessreviews",
    } <= names


async def test_typed_create_commands_send_protobuf(kubectl: Any) -> None:
    # kubectl's typed clients send application/vnd.kubernetes.protobuf bodies
    await kubectl("create", "deployment", "web", "--image=nginx", "--replicas=0", "--port=8080")
    dep = json.loads((await kubectl("get", "deployment", "web", "-o", "json")).stdout)
    assert dep["spec"]["replicas"] == 0
    assert dep["spec"]["selector"] == {"matchLabels": {"app": "web"}}
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    assert (container["name"], container["image"]) == ("nginx", "nginx")
    assert container["ports"] == [{"containerPort": 8080, "protocol": "TCP"}]
    assert container["imagePullPolicy"] == "Always", "defaulted for an untagged image"
    await kubectl("create", "service", "clusterip", "web", "--tcp=80:http")
    svc = json.loads((await kubectl("get", "service", "web", "-o", "json")).stdout)
    assert svc["spec"]["ports"] == [
        {"name": "80-http", "protocol": "TCP", "port": 80, "targetPort": "http"}
    ]
    await kubectl("create", "secret", "generic", "s", "--from-literal=k=v")
    secret = json.loads((await kubectl("get", "secret", "s", "-o", "json")).stdout)
    assert secret["data"] == {"k": "dg=="}


async def test_auth_can_i_as_another_user(kubectl: Any) -> None:
    await kubectl("create", "clusterrole", "pod-getter", "--verb=get", "--resource=pods")
    await kubectl(
        "create", "clusterrolebinding", "alice-gets", "--clusterrole=pod-getter", "--user=alice"
    )
    assert (await kubectl("auth", "can-i", "get", "pods", "--as=alice")).stdout.strip() == "yes"
    denied = await kubectl("auth", "can-i", "delete", "pods", "--as=alice", check=False)
    assert denied.stdout.strip() == "no"


async def test_resource_names_role_allows_kubectl_single_object_get_and_list(
    kubectl: Any,
) -> None:
    await kubectl("create", "namespace", "team")
    await kubectl("create", "serviceaccount", "bot", "-n", "team")
    await kubectl("create", "configmap", "c1", "-n", "team")
    await kubectl("create", "configmap", "c2", "-n", "team")
    await kubectl(
        "create",
        "role",
        "one",
        "-n",
        "team",
        "--verb=get,list,watch",
        "--resource=configmaps",
        "--resource-name=c1",
    )
    await kubectl(
        "create", "rolebinding", "one", "-n", "team", "--role=one", "--serviceaccount=team:bot"
    )
    token = (await kubectl("create", "token", "bot", "-n", "team")).stdout.strip()
    listed = await kubectl(
        "get",
        "cm",
        "-n",
        "team",
        "--field-selector",
        "metadata.name=c1",
        "-o",
        "name",
        token=token,
    )
    assert listed.stdout.split() == ["configmap/c1"]
    denied = await kubectl(
        "get",
        "cm",
        "-n",
        "team",
        "--field-selector",
        "metadata.name=c2",
        token=token,
        check=False,
    )
    assert (
        'configmaps "c2" is forbidden: User "system:serviceaccount:team:bot" cannot list '
        'resource "configmaps"' in denied.stderr
    )


async def test_unsupported_field_selector_is_worded_like_kube_apiserver(kubectl: Any) -> None:
    bad = await kubectl("get", "cm", "--field-selector", "spec.foo=x", check=False)
    assert bad.returncode != 0
    assert bad.stderr.strip().endswith(
        '"/v1, Resource=configmaps" that match label selector "", field selector '
        '"spec.foo=x": field label not supported: spec.foo'
    ), bad.stderr


async def test_get_prints_the_builtin_columns_kubectl_users_expect(kubectl: Any) -> None:
    await kubectl("create", "configmap", "cfg", "--from-literal=a=1", "--from-literal=b=2")
    await kubectl("create", "secret", "generic", "sec", "--from-literal=k=v")
    await kubectl("create", "rolebinding", "rb", "--clusterrole=view", "--user=u")
    cms = (await kubectl("get", "configmap", "cfg")).stdout.splitlines()
    assert cms[0].split() == ["NAME", "DATA", "AGE"]
    assert cms[1].split()[:2] == ["cfg", "2"]
    secrets = (await kubectl("get", "secret", "sec")).stdout.splitlines()
    assert secrets[0].split() == ["NAME", "TYPE", "DATA", "AGE"]
    assert secrets[1].split()[:3] == ["sec", "Opaque", "1"]
    bindings = (await kubectl("get", "rolebinding", "rb")).stdout.splitlines()
    assert bindings[0].split() == ["NAME", "ROLE", "AGE"]
    assert bindings[1].split()[:2] == ["rb", "ClusterRole/view"]
    accounts = (await kubectl("get", "serviceaccount", "default")).stdout.splitlines()
    assert accounts[0].split() == ["NAME", "SECRETS", "AGE"]


async def test_kubectl_scale_runtime(kubectl: Any) -> None:
    """The Runtime CRD's scale subresource: ``kubectl scale runtime NAME --replicas=N``."""
    await kubectl("apply", "-f", str(RUNTIME_CRD_FILE))
    runtime = {
        "apiVersion": "kruntimes.io/v1alpha1",
        "kind": "Runtime",
        "metadata": {"name": "python", "namespace": "default"},
        "spec": {
            "replicas": 1,
            "template": {"spec": {"containers": [{"name": "runtime", "image": "x"}]}},
        },
    }
    await kubectl("apply", "-f", "-", input=json.dumps(runtime))
    out = await kubectl("scale", "runtime", "python", "--replicas=3")
    assert "runtime.kruntimes.io/python scaled" in out.stdout
    obj = json.loads((await kubectl("get", "runtime", "python", "-o", "json")).stdout)
    assert obj["spec"]["replicas"] == 3


async def test_explain_describes_the_type_fields_of_our_kinds(kubectl: Any) -> None:
    await kubectl("apply", "-f", str(RUNTIME_CRD_FILE))
    for _ in range(50):  # the CRD is served (and its OpenAPI published) a moment later
        out = await kubectl("explain", "runtimes", check=False)
        if out.returncode == 0:
            break
        await trio.sleep(0.1)
    out = await kubectl("explain", "runtimes")
    assert "<no description>" not in out.stdout
    # apiVersion's description: kube-apiserver publishes TypeMeta's, not the CRD's own
    assert "APIVersion defines the versioned schema" in out.stdout
