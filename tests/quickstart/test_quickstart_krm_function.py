"""The quick start's KRM function (examples/krm/main.py) and its input builder."""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

KRM = Path(__file__).resolve().parents[2] / "examples" / "krm"


def load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


fn = load("krm_example_main", KRM / "main.py")
rl = load("krm_example_resource_list", KRM / "resource_list.py")


def by_name(output: dict[str, Any], kind: str, name: str) -> dict[str, Any]:
    (item,) = [i for i in output["items"] if i["kind"] == kind and i["metadata"]["name"] == name]
    return item


@pytest.fixture
def example() -> dict[str, Any]:
    return rl.build()


def test_shipped_resource_list_json_is_the_built_input(example: dict[str, Any]) -> None:
    assert json.loads((KRM / "resource-list.json").read_text()) == example
    assert len(example["items"]) >= 6
    assert example["items"][3]["metadata"]["annotations"] == {
        "config.kubernetes.io/path": "manifests.yaml",
        "config.kubernetes.io/index": "3",
    }


def test_labels_go_on_every_item_and_on_pod_templates_but_not_selectors(
    example: dict[str, Any],
) -> None:
    before = copy.deepcopy(example)
    out = fn.invoke(example)
    assert example == before  # the input is not modified
    labels = {"app.kubernetes.io/part-of": "shop", "environment": "prod", "team": "storefront"}
    for item in out["items"]:
        assert labels.items() <= item["metadata"]["labels"].items(), item["metadata"]
    web = by_name(out, "Deployment", "storefront")
    assert labels.items() <= web["spec"]["template"]["metadata"]["labels"].items()
    assert web["spec"]["selector"] == {"matchLabels": {"app.kubernetes.io/name": "storefront"}}
    assert web["metadata"]["labels"]["app.kubernetes.io/name"] == "storefront"  # kept
    cron = by_name(out, "CronJob", "cart-cleanup")
    template = cron["spec"]["jobTemplate"]["spec"]["template"]
    assert labels.items() <= template["metadata"]["labels"].items()


def test_namespace_goes_on_namespaced_items_and_service_account_subjects(
    example: dict[str, Any],
) -> None:
    out = fn.invoke(example)
    for item in out["items"]:
        if item["kind"] == "Namespace":
            assert "namespace" not in item["metadata"]
        else:
            assert item["metadata"]["namespace"] == "shop-prod", item["kind"]
    binding = by_name(out, "RoleBinding", "storefront-config-reader")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "storefront", "namespace": "shop-prod"}
    ]


def test_results_report_the_missing_image_as_an_error_and_risks_as_warnings(
    example: dict[str, Any],
) -> None:
    out = fn.invoke(example)
    assert out["apiVersion"] == "config.kubernetes.io/v1"
    assert out["kind"] == "ResourceList"
    summary, *findings = out["results"]
    assert summary == {
        "severity": "info",
        "message": "11 item(s): labels set on 11, namespace shop-prod set on 10; "
        "1 error(s), 3 warning(s)",
    }
    errors = [r for r in findings if r["severity"] == "error"]
    assert errors == [
        {
            "severity": "error",
            "message": "container worker has no image",
            "resourceRef": {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "name": "order-worker",
                "namespace": "shop-prod",
            },
            "field": {"path": "spec.template.spec.containers[0].image"},
        }
    ]
    warnings = sorted(
        (r["resourceRef"]["name"], r["field"]["path"])
        for r in findings
        if r["severity"] == "warning"
    )
    assert warnings == [
        ("cart-cleanup", "spec.jobTemplate.spec.template.spec.containers[0].image"),
        ("cart-cleanup", "spec.jobTemplate.spec.template.spec.containers[0].resources.requests"),
        ("order-worker", "spec.template.spec.containers[0].resources.requests"),
    ]
    json.dumps(out)  # the output is JSON, as the Python Runtime Server will encode it


@pytest.mark.parametrize(
    ("item", "path", "message"),
    [
        (
            {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}, "spec": {}},
            "spec.ports",
            "a Service needs spec.ports",
        ),
        (
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "s"},
                "spec": {"ports": [{"name": "http"}]},
            },
            "spec.ports[0].port",
            "ports[0] has no port number",
        ),
        (
            {
                "apiVersion": "networking.k8s.io/v1",
                "kind": "Ingress",
                "metadata": {"name": "i"},
                "spec": {},
            },
            "spec.rules",
            "an Ingress needs rules or a defaultBackend",
        ),
        (
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}},
            "metadata.name",
            "items[0] (ConfigMap) has no metadata.name",
        ),
        (
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "d"},
                "spec": {
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "c",
                                    "image": "x:1",
                                    "resources": {"requests": {"cpu": "1"}},
                                }
                            ]
                        }
                    }
                },
            },
            "spec.selector",
            "no spec.selector",
        ),
    ],
)
def test_each_required_field_is_checked(item: dict[str, Any], path: str, message: str) -> None:
    out = fn.invoke({"kind": "ResourceList", "items": [item]})
    errors = [r for r in out["results"] if r["severity"] == "error"]
    assert [(r["field"]["path"], r["message"]) for r in errors] == [(path, message)]


def test_a_configmap_function_config_works_too() -> None:
    out = fn.invoke(
        {
            "kind": "ResourceList",
            "functionConfig": {"kind": "ConfigMap", "data": {"namespace": "dev", "team": "a"}},
            "items": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}],
        }
    )
    assert out["items"][0]["metadata"] == {"name": "c", "labels": {"team": "a"}, "namespace": "dev"}


@pytest.mark.parametrize(
    ("resource_list", "message"),
    [
        ({"kind": "List", "items": []}, "input must be a ResourceList"),
        ({"kind": "ResourceList", "items": {}}, "items must be a list"),
        (
            {"kind": "ResourceList", "items": [], "functionConfig": {"kind": "Secret"}},
            "kind 'Secret' is not supported",
        ),
        (
            {
                "kind": "ResourceList",
                "items": [],
                "functionConfig": {"kind": "SetMetadata", "spec": {"namespace": "Bad_NS"}},
            },
            "namespace 'Bad_NS' is not a valid namespace name",
        ),
        (
            {
                "kind": "ResourceList",
                "items": [],
                "functionConfig": {"kind": "SetMetadata", "spec": {"labels": {"a b": "x"}}},
            },
            "label key 'a b' is not a valid label key",
        ),
        (
            {
                "kind": "ResourceList",
                "items": [],
                "functionConfig": {"kind": "SetMetadata", "spec": {"labels": {"a": "x y"}}},
            },
            "label a='x y': not a valid label value",
        ),
    ],
)
def test_unusable_input_fails_the_invocation_with_a_specific_message(
    resource_list: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        fn.invoke(resource_list)


def test_output_is_shown_as_yaml_without_bookkeeping_and_results_as_a_table(
    example: dict[str, Any],
) -> None:
    out = fn.invoke(example)
    text = rl.to_yaml(out)
    assert "config.kubernetes.io/index" not in text
    assert text.count("\n---\n") == len(out["items"]) - 1
    table = rl.format_results(out).splitlines()
    assert table[1].split()[:3] == [
        "ERROR",
        "Deployment/order-worker",
        "spec.template.spec.containers[0].image",
    ]
