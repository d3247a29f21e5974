"""Built-in defaults (kube-apiserver's SetDefaults subset) and their application on writes."""

from __future__ import annotations

from typing import Any

import httpx

from localkube.defaults import deployment_defaults, pod_defaults, service_defaults


def test_pod_defaults_fill_only_missing_fields() -> None:
    pod: dict[str, Any] = {
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {"name": "a", "image": "x:1.2", "ports": [{"containerPort": 80}]},
                {"name": "b", "image": "y"},
            ],
        }
    }
    pod_defaults(pod, creating=True)
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Never"
    assert spec["terminationGracePeriodSeconds"] == 30
    assert spec["dnsPolicy"] == "ClusterFirst"
    assert spec["serviceAccountName"] == "default"
    assert [c["imagePullPolicy"] for c in spec["containers"]] == ["IfNotPresent", "Always"]
    assert spec["containers"][0]["ports"] == [{"containerPort": 80, "protocol": "TCP"}]
    assert spec["containers"][0]["terminationMessagePolicy"] == "File"


def test_workload_and_service_defaults() -> None:
    dep: dict[str, Any] = {
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i:latest"}]}}}
    }
    deployment_defaults(dep, creating=True)
    assert dep["spec"]["replicas"] == 1
    assert dep["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"},
    }
    assert dep["spec"]["template"]["spec"]["restartPolicy"] == "Always"
    assert "serviceAccountName" not in dep["spec"]["template"]["spec"], (
        "templates get no ServiceAccount"
    )
    svc: dict[str, Any] = {"spec": {"ports": [{"port": 80}, {"port": 81, "targetPort": "web"}]}}
    service_defaults(svc, creating=True)
    assert svc["spec"]["type"] == "ClusterIP"
    assert svc["spec"]["ports"] == [
        {"port": 80, "protocol": "TCP", "targetPort": 80},
        {"port": 81, "targetPort": "web", "protocol": "TCP"},
    ]


async def test_defaults_applied_on_create_and_update(admin_http: httpx.AsyncClient) -> None:
    pods = "/api/v1/namespaces/default/pods"
    created = (
        await admin_http.post(
            pods,
            json={"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]}},
        )
    ).json()
    assert created["spec"]["restartPolicy"] == "Always"
    assert created["spec"]["serviceAccountName"] == "default"
    # a PUT of the object without the defaulted fields is defaulted again: no spec change
    body = {
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "x2"}], "serviceAccountName": "default"},
    }
    r = await admin_http.put(f"{pods}/p", json=body)
    assert r.status_code == 200, r.text
    assert r.json()["spec"]["terminationGracePeriodSeconds"] == 30
    secret = (
        await admin_http.post(
            "/api/v1/namespaces/default/secrets", json={"metadata": {"name": "s"}}
        )
    ).json()
    assert secret["type"] == "Opaque"
