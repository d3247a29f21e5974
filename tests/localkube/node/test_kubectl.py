"""kubectl 1.32 against a whole localkube: rollout, logs, delete (needs the kubectl binary)."""

from __future__ import annotations

from typing import Any

import pytest
from lk_node_helpers import eventually

pytestmark = pytest.mark.kubectl

MANIFEST = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: echo}
spec:
  replicas: 2
  selector: {matchLabels: {app: echo}}
  template:
    metadata: {labels: {app: echo}}
    spec:
      terminationGracePeriodSeconds: 2
      containers:
      - name: echo
        image: localkube/tcp-echo
        ports: [{name: tcp, containerPort: 7000}]
        env:
        - {name: PORT, value: "7000"}
        - name: POD_IP
          valueFrom: {fieldRef: {fieldPath: status.podIP}}
        readinessProbe: {tcpSocket: {port: tcp}, periodSeconds: 1}
---
apiVersion: v1
kind: Service
metadata: {name: echo}
spec:
  selector: {app: echo}
  ports: [{port: 80, targetPort: tcp}]
"""


async def test_kubectl_rollout_logs_and_delete(kubectl: Any) -> None:
    await kubectl("apply", "-f", "-", input=MANIFEST)
    rollout = await kubectl("rollout", "status", "deployment/echo", "--timeout=20s")
    assert "successfully rolled out" in rollout.stdout
    pods = await kubectl("get", "pods", "-l", "app=echo", "-o", "wide")
    assert pods.stdout.count("Running") == 2
    logs = await kubectl("logs", "deployment/echo")
    assert logs.stdout.startswith("listening on 127.0.")
    name = (await kubectl("get", "pods", "-l", "app=echo", "-o", "name")).stdout.split()[0]
    deleted = await kubectl("delete", name, "--wait=true", "--timeout=20s")
    assert "deleted" in deleted.stdout

    async def replaced() -> bool:
        out = (await kubectl("get", "pods", "-l", "app=echo", "-o", "name")).stdout.split()
        return len(out) == 2 and name not in out

    await eventually(replaced, what="replacement pod")
    svc = await kubectl("get", "svc", "echo", "-o", "jsonpath={.spec.clusterIP}")
    assert svc.stdout.startswith("127.0.20")
    slices = await kubectl(
        "get",
        "endpointslices",
        "-l",
        "kubernetes.io/service-name=echo",
        "-o",
        "jsonpath={.items[0].ports[0].port}",
    )
    assert slices.stdout == "7000"
