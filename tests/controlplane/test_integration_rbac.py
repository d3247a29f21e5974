"""The control plane runs on exactly :data:`~krt.controlplane.rbac.CONTROLPLANE_RULES`.

On localkube's real RBAC authorizer: a ServiceAccount bound to a ClusterRole with those
rules runs the whole control plane (Runtime controller creating a Role for runtimed,
scheduler binding a Run), so the chart's ClusterRole can be rendered from that list.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import trio
import trio.lowlevel
import yaml

from krt.controlplane.rbac import CONTROLPLANE_RULES
from krt.kube.client import Kube, connect
from krt.kube.resources import RUNS, RUNTIMES, SERVICEACCOUNTS, ResourceRef
from localkube.cluster import ClusterHandle

from .harness import (
    NS,
    HeartbeatDouble,
    create_runtime,
    run_manifest,
    running_controlplane,
    wait_for,
)

CLUSTERROLES = ResourceRef("rbac.authorization.k8s.io", "v1", "clusterroles", False, "ClusterRole")
CLUSTERROLEBINDINGS = ResourceRef(
    "rbac.authorization.k8s.io", "v1", "clusterrolebindings", False, "ClusterRoleBinding"
)


async def _service_account_kubeconfig(kube: Kube, cluster: ClusterHandle, directory: Path) -> Path:
    await kube.create(SERVICEACCOUNTS, {"metadata": {"name": "krt-controlplane", "namespace": NS}})
    await kube.create(
        CLUSTERROLES,
        {"metadata": {"name": "krt-controlplane"}, "rules": [dict(r) for r in CONTROLPLANE_RULES]},
    )
    await kube.create(
        CLUSTERROLEBINDINGS,
        {
            "metadata": {"name": "krt-controlplane"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "krt-controlplane",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "krt-controlplane", "namespace": NS}],
        },
    )
    answer = await kube.request(
        "POST",
        SERVICEACCOUNTS,
        namespace=NS,
        name="krt-controlplane",
        subresource="token",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    config: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "localkube",
                "cluster": {
                    "server": cluster.apiserver.url,
                    "certificate-authority-data": base64.b64encode(
                        cluster.apiserver.ca_pem
                    ).decode(),
                },
            }
        ],
        "users": [{"name": "cp", "user": {"token": answer["status"]["token"]}}],
        "contexts": [
            {"name": "cp", "context": {"cluster": "localkube", "user": "cp", "namespace": NS}}
        ],
        "current-context": "cp",
    }
    path = directory / "controlplane.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


async def test_controlplane_works_with_its_cluster_role(
    kube: Kube, cluster: ClusterHandle, heartbeats: HeartbeatDouble, tmp_path: Path
) -> None:
    kubeconfig = await _service_account_kubeconfig(kube, cluster, tmp_path)
    async with await connect(kubeconfig=kubeconfig) as limited:
        await create_runtime(kube, replicas=1, runs=2)
        await kube.create(RUNS, run_manifest("r1"))
        async with running_controlplane(
            limited, namespaces=None, leader_elect=True, lease_namespace=NS
        ):

            async def bound() -> bool:
                run = await kube.get(RUNS, "r1", NS)
                return (run.get("status") or {}).get("phase") == "Scheduled"

            await wait_for(bound, seconds=20)
            runtime = await kube.get(RUNTIMES, "python", NS)
            assert runtime["status"]["readyReplicas"] == 1
            await trio.lowlevel.checkpoint()
