"""Idempotent apply of the dev manifest set (krt.cli.dev_apply)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import trio

from krt.cli.dev_apply import apply, is_applied, load_manifests, ref_for
from krt.kube.client import Kube
from krt.kube.errors import NotFound
from krt.kube.resources import DEPLOYMENTS, NAMESPACES, RUNTIMES, SERVICES


def test_is_applied_ignores_server_defaults_but_not_changed_values() -> None:
    desired = {"spec": {"replicas": 1, "ports": [{"port": 80}], "flag": False}}
    live = {
        "spec": {"replicas": 1, "ports": [{"port": 80, "protocol": "TCP"}], "flag": False},
        "status": {"x": 1},
    }
    assert is_applied(desired, live)
    assert not is_applied({"spec": {"replicas": 2}}, live)
    assert not is_applied({"spec": {"ports": [{"port": 80}, {"port": 81}]}}, live)
    assert not is_applied({"spec": {"missing": 1}}, live)
    # False is not 0 and 1 is not True (YAML booleans vs numbers)
    assert not is_applied({"spec": {"flag": 0}}, live)
    assert not is_applied({"v": True}, {"v": 1})
    assert not is_applied({"spec": {"replicas": 1}}, {"spec": "text"})


def test_ref_for_names_an_unknown_kind() -> None:
    with pytest.raises(ValueError, match="cannot apply kind 'Gadget'"):
        ref_for({"kind": "Gadget"})


def deployment(replicas: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default", "labels": {"a": "b"}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "localkube/python"}]},
            },
        },
    }


async def test_apply_creates_then_leaves_alone_then_replaces_what_changed(kube: Kube) -> None:
    assert await apply(kube, deployment()) == "created"
    first = await kube.get(DEPLOYMENTS, "web", "default")
    assert await apply(kube, deployment()) == "unchanged"
    same = await kube.get(DEPLOYMENTS, "web", "default")
    assert same["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    assert await apply(kube, deployment(replicas=3)) == "configured"
    changed = await kube.get(DEPLOYMENTS, "web", "default")
    assert changed["spec"]["replicas"] == 3
    assert changed["metadata"]["uid"] == first["metadata"]["uid"]


async def test_apply_keeps_an_allocated_cluster_ip(kube: Kube) -> None:
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "svc", "namespace": "default"},
        "spec": {"selector": {"app": "x"}, "ports": [{"port": 80}], "clusterIP": "127.0.200.44"},
    }
    assert await apply(kube, service) == "created"
    without_ip = copy.deepcopy(service)
    del without_ip["spec"]["clusterIP"]
    without_ip["spec"]["ports"] = [{"port": 81}]
    assert await apply(kube, without_ip) == "configured"
    live = await kube.get(SERVICES, "svc", "default")
    assert live["spec"]["clusterIP"] == "127.0.200.44"
    assert live["spec"]["ports"][0]["port"] == 81


async def test_a_namespaced_manifest_without_namespace_is_refused(kube: Kube) -> None:
    doc = deployment()
    del doc["metadata"]["namespace"]
    with pytest.raises(ValueError, match="metadata.namespace is required"):
        await apply(kube, doc)


async def test_the_whole_manifest_set_applies_twice_without_changes(kube: Kube) -> None:
    """The rendered charts are accepted by the API server, and a second apply is a no-op."""
    await kube.create(NAMESPACES, {"metadata": {"name": "kruntimes-system"}})
    crds = load_manifests("crds")
    for doc in crds:
        assert await apply(kube, doc) == "created"
    with trio.fail_after(10):
        while True:
            try:
                await kube.list(RUNTIMES, "default")
                break
            except NotFound:
                await trio.sleep(0.05)
    rest = load_manifests("kruntimes") + load_manifests("runtimes")
    assert {await apply(kube, doc) for doc in rest} == {"created"}
    assert {await apply(kube, doc) for doc in crds + rest} == {"unchanged"}
