"""A Pod's environment, ServiceAccount files, volumes and logs on a real localkube."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import trio
from lk_node_helpers import PODS, eventually, pod

from localkube.cluster import ClusterConfig, ClusterHandle, serve_cluster
from localkube.controllers.kubeapi import Kube
from localkube.node.layout import PodPaths

REPORT = r"""
import json, os, pathlib
root = pathlib.Path(os.environ["KRT_POD_ROOT"])
sa = pathlib.Path(os.environ["KRT_SERVICEACCOUNT_DIR"])
out = {k: v for k, v in os.environ.items()}
out["sa_files"] = {p.name: p.read_text() for p in sa.iterdir() if not p.name.startswith(".")}
out["cfg"] = (root / "etc/cfg/greeting").read_text()
out["secret_file"] = (root / "etc/secret/password").read_text()
(root / "scratch" / "note").write_text("x")
out["cwd"] = os.getcwd()
print(json.dumps(out))
"""


async def read_log(kube: Kube, name: str, **params: str) -> str:
    async with kube.api.call_api(
        "GET", version="", base=PODS, url=f"{name}/log", params=params
    ) as r:
        return str(r.text)


async def phase(kube: Kube, name: str, want: str) -> dict[str, Any] | None:
    p = await kube.get(f"{PODS}/{name}")
    return p if ((p or {}).get("status") or {}).get("phase") == want else None


async def test_env_service_account_and_volumes(kube: Kube, cluster: ClusterHandle) -> None:
    await kube.create(
        "/api/v1/namespaces/default/secrets",
        {
            "metadata": {"name": "creds"},
            "data": {"password": base64.b64encode(b"s3cret").decode()},
        },
    )
    await kube.create(
        "/api/v1/namespaces/default/configmaps",
        {"metadata": {"name": "settings"}, "data": {"greeting": "hello", "level": "debug"}},
    )
    container = {
        "name": "main",
        "image": "localkube/python",
        "args": ["-c", REPORT],
        "env": [
            {"name": "PLAIN", "value": "a-$(MY_NAME)-b"},
            {"name": "MY_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "EXPANDED", "value": "name=$(MY_NAME)"},
            {"name": "MY_NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "MY_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
            {"name": "MY_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "MY_NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {
                "name": "PASSWORD",
                "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}},
            },
            {
                "name": "LEVEL",
                "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "level"}},
            },
        ],
        "volumeMounts": [
            {"name": "cfg", "mountPath": "/etc/cfg"},
            {"name": "secret", "mountPath": "/etc/secret"},
            {"name": "scratch", "mountPath": "/scratch"},
        ],
    }
    body = pod("report", container, restartPolicy="Never")
    body["spec"]["volumes"] = [
        {"name": "cfg", "configMap": {"name": "settings"}},
        {"name": "secret", "secret": {"secretName": "creds"}},
        {"name": "scratch", "emptyDir": {}},
    ]
    await kube.create(PODS, body)
    p = await eventually(lambda: phase(kube, "report", "Succeeded"), what="report Succeeded")
    out = json.loads(await read_log(kube, "report"))
    assert out["PLAIN"] == "a-$(MY_NAME)-b"  # defined before MY_NAME: not expanded
    assert out["EXPANDED"] == "name=report"
    assert (out["MY_NAME"], out["MY_NS"], out["MY_NODE"]) == ("report", "default", "localkube")
    assert out["MY_UID"] == p["metadata"]["uid"]
    assert out["MY_IP"] == p["status"]["podIP"]
    assert out["PASSWORD"] == "s3cret"
    assert out["LEVEL"] == "debug"
    api = urlsplit(cluster.apiserver.url)
    assert out["KUBERNETES_SERVICE_HOST"] == api.hostname
    assert out["KUBERNETES_SERVICE_PORT"] == str(api.port)
    assert out["KRT_SERVICEACCOUNT_DIR"].endswith("/var/run/secrets/kubernetes.io/serviceaccount")
    assert out["KRT_HOSTS_FILE"] == str(cluster.hosts_file)
    assert out["sa_files"]["namespace"] == "default"
    assert out["sa_files"]["ca.crt"] == cluster.apiserver.ca_pem.decode()
    assert out["sa_files"]["token"].count(".") == 2  # a JWT
    assert out["cfg"] == "hello"
    assert out["secret_file"] == "s3cret"
    assert out["cwd"] == out["HOME"]
    assert "KUBECONFIG" not in out  # nothing leaks from the node's own environment

    # the projected token authenticates as the Pod's ServiceAccount
    review = await kube.create(
        "/apis/authentication.k8s.io/v1/tokenreviews",
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": out["sa_files"]["token"]},
        },
    )
    assert review["status"]["user"]["username"] == "system:serviceaccount:default:default"


async def test_missing_secret_is_a_config_error_until_it_exists(kube: Kube) -> None:
    container = {
        "name": "main",
        "image": "localkube/python",
        "args": ["-c", "import os; print(os.environ['TOKEN'])"],
        "env": [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "later", "key": "t"}}}],
    }
    await kube.create(PODS, pod("waits", container, restartPolicy="Never"))

    async def config_error() -> dict[str, Any] | None:
        p = await kube.get(f"{PODS}/waits")
        cs = ((p or {}).get("status") or {}).get("containerStatuses") or []
        w = cs[0]["state"].get("waiting", {}) if cs else {}
        return w if w.get("reason") == "CreateContainerConfigError" else None

    waiting = await eventually(config_error, what="CreateContainerConfigError")
    assert 'secret "later" not found' in waiting["message"]
    assert "env[0] (TOKEN)" in waiting["message"]
    await kube.create(
        "/api/v1/namespaces/default/secrets",
        {
            "metadata": {"name": "later"},
            "stringData": {"t": "now"},
            "data": {"t": base64.b64encode(b"now").decode()},
        },
    )
    await eventually(
        lambda: phase(kube, "waits", "Succeeded"), what="started once the Secret exists"
    )
    assert await read_log(kube, "waits") == "now\n"


async def test_logs_are_served_with_tail_since_container_and_follow(kube: Kube) -> None:
    script = "import time\nfor i in range(5): print('line', i)\ntime.sleep(0.3)\nprint('late')\ntime.sleep(60)"
    body = pod("chatty", {"name": "main", "image": "localkube/python", "args": ["-c", script]})
    body["spec"]["containers"].append(
        {
            "name": "side",
            "image": "localkube/python",
            "args": ["-c", "import sys, time; print('from side', file=sys.stderr); time.sleep(60)"],
        }
    )
    await kube.create(PODS, body)

    async def has_late() -> str | None:
        async with kube.api.call_api(
            "GET",
            version="",
            base=PODS,
            url="chatty/log",
            params={"container": "main"},
            raise_for_status=False,
        ) as r:
            return str(r.text) if "late" in r.text else None

    full = await eventually(has_late, what="late line")
    assert full == "".join(f"line {i}\n" for i in range(5)) + "late\n"
    assert await read_log(kube, "chatty", container="main", tailLines="2") == "line 4\nlate\n"
    assert await read_log(kube, "chatty", container="side") == "from side\n"
    assert await read_log(kube, "chatty", container="main", sinceSeconds="600") == full
    stamped = await read_log(kube, "chatty", container="main", timestamps="true", tailLines="1")
    assert stamped.endswith("Z late\n")
    # a container name is required for a multi-container Pod
    async with kube.api.call_api(
        "GET", version="", base=PODS, url="chatty/log", raise_for_status=False
    ) as r:
        assert r.status_code == 400
    # follow: the existing lines arrive, then the stream stays open
    got = b""
    with trio.move_on_after(3):
        async with kube.api.call_api(
            "GET",
            version="",
            base=PODS,
            url="chatty/log",
            params={"container": "main", "follow": "true", "tailLines": "1"},
            stream=True,
        ) as r:
            async for chunk in r.aiter_bytes():
                got += chunk
                if got.endswith(b"late\n"):
                    break
    assert got == b"late\n"


IN_CLUSTER = r"""
import os, kr8s
api = kr8s.api(serviceaccount=os.environ["KRT_SERVICEACCOUNT_DIR"])
print(api.namespace)
print(api.version()["gitVersion"].startswith("v1."))
try:
    list(api.get("secrets"))
except kr8s.ServerError as exc:  # the default ServiceAccount may not list Secrets
    print(exc)
"""


async def test_a_pod_reaches_the_api_as_its_service_account_with_kr8s(kube: Kube) -> None:
    """The contract components rely on: kr8s in-cluster config from the standard variables
    plus ``KRT_SERVICEACCOUNT_DIR``."""
    body = pod(
        "incluster",
        {"name": "main", "image": "localkube/python", "args": ["-c", IN_CLUSTER]},
        restartPolicy="Never",
    )
    await kube.create(PODS, body)
    p = await eventually(
        lambda: _finished(kube, "incluster"), seconds=15, what="in-cluster client done"
    )
    log = await read_log(kube, "incluster")
    assert p["status"]["phase"] == "Succeeded", log
    lines = log.splitlines()
    assert lines[:2] == ["default", "True"]
    assert 'User "system:serviceaccount:default:default" cannot list resource "secrets"' in lines[2]


async def _finished(kube: Kube, name: str) -> dict[str, Any] | None:
    p = await kube.get(f"{PODS}/{name}")
    return p if ((p or {}).get("status") or {}).get("phase") in ("Succeeded", "Failed") else None


async def test_init_containers_run_in_order_before_the_containers(kube: Kube) -> None:
    def step(name: str, script: str) -> dict[str, Any]:
        return {"name": name, "image": "localkube/python", "args": ["-c", script]}

    body = pod(
        "initd",
        step("main", "import pathlib; print(pathlib.Path('order').read_text())"),
        restartPolicy="Never",
    )
    body["spec"]["initContainers"] = [
        step("first", "open('order', 'a').write('first ')"),
        step("second", "import time; time.sleep(0.3); open('order', 'a').write('second')"),
    ]
    await kube.create(PODS, body)

    async def initializing() -> dict[str, Any] | None:
        p = await kube.get(f"{PODS}/initd")
        st = (p or {}).get("status") or {}
        conds = {c["type"]: c for c in st.get("conditions", [])}
        init = conds.get("Initialized", {})
        return st if init.get("status") == "False" and st.get("phase") == "Pending" else None

    st = await eventually(initializing, what="Pending while initializing")
    assert st["containerStatuses"][0]["state"]["waiting"]["reason"] == "PodInitializing"
    p = await eventually(lambda: phase(kube, "initd", "Succeeded"), what="initd Succeeded")
    assert [s["ready"] for s in p["status"]["initContainerStatuses"]] == [True, True]
    assert await read_log(kube, "initd", container="main") == "first second\n"


async def test_a_failed_init_container_fails_a_never_pod(kube: Kube) -> None:
    body = pod(
        "badinit",
        {"name": "main", "image": "localkube/python", "args": ["-c", "print('never')"]},
        restartPolicy="Never",
    )
    body["spec"]["initContainers"] = [
        {"name": "setup", "image": "localkube/python", "args": ["-c", "raise SystemExit(7)"]}
    ]
    await kube.create(PODS, body)
    p = await eventually(lambda: phase(kube, "badinit", "Failed"), what="Failed")
    assert p["status"]["initContainerStatuses"][0]["state"]["terminated"]["exitCode"] == 7
    assert "waiting" in p["status"]["containerStatuses"][0]["state"]


async def test_mounted_secret_follows_its_updates(
    tmp_path: Path, nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    # the kubelet's periodic sync: a running Pod's secret volume shows the new data (a
    # renewed certificate), and a key that is gone disappears; no restart
    state = tmp_path / "state"
    cluster: ClusterHandle = await nursery.start(
        serve_cluster,
        ClusterConfig(
            state_dir=state, backoff_initial=0.2, shutdown_grace=1.0, volume_sync_period=0.1
        ),
    )
    kube = cluster.kube
    secrets = "/api/v1/namespaces/default/secrets"

    def data(**values: bytes) -> dict[str, str]:
        return {k: base64.b64encode(v).decode() for k, v in values.items()}

    await kube.create(secrets, {"metadata": {"name": "tls"}, "data": data(crt=b"one", old=b"x")})
    container = {
        "name": "main",
        "image": "localkube/python",
        "args": ["-c", "import time; time.sleep(60)"],
        "volumeMounts": [{"name": "tls", "mountPath": "/etc/tls"}],
    }
    body = pod("holder", container)
    body["spec"]["volumes"] = [{"name": "tls", "secret": {"secretName": "tls"}}]
    created = await kube.create(PODS, body)
    await eventually(lambda: phase(kube, "holder", "Running"), what="holder Running")
    volume = PodPaths.for_pod(state, "default", "holder", created["metadata"]["uid"]).volume("tls")
    assert (volume / "crt").read_bytes() == b"one"

    current = await kube.get(f"{secrets}/tls")
    assert current is not None
    current["data"] = data(crt=b"two", new=b"y")
    await kube.replace(f"{secrets}/tls", current)

    async def updated() -> bool:
        names = sorted(p.name for p in volume.iterdir() if not p.name.startswith("."))
        return names == ["crt", "new"] and (volume / "crt").read_bytes() == b"two"

    await eventually(updated, what="the volume to show the updated Secret")
    restarts = await kube.get(f"{PODS}/holder")
    assert restarts is not None
    assert restarts["status"]["containerStatuses"][0]["restartCount"] == 0

    # the Secret goes: the files stay, and the lasting failure is logged once
    await kube.delete(f"{secrets}/tls")

    async def warned() -> list[str]:
        return [r.getMessage() for r in caplog.records if "volumes not updated" in r.getMessage()]

    await eventually(warned, what="a warning about the missing Secret")
    await trio.sleep(0.5)  # five more looks at the same missing Secret
    assert len(await warned()) == 1
    assert (volume / "crt").read_bytes() == b"two"
