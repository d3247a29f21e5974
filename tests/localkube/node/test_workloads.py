"""Deployments, ReplicaSets and Pods on a real localkube (processes, probes, deletion)."""

from __future__ import annotations

import copy
import ipaddress
import os
import signal
import time
from typing import Any

import trio
from lk_node_helpers import (
    DEPLOYMENTS,
    PODS,
    deployment,
    echo_container,
    eventually,
    pod,
    ready_pods,
)

from localkube.cluster import ClusterHandle
from localkube.controllers.kubeapi import Kube
from localkube.node.layout import PodPaths

TCP_READY = {"tcpSocket": {"port": "tcp"}, "periodSeconds": 1}


async def greeting(ip: str, port: int) -> str:
    stream = await trio.open_tcp_stream(ip, port)
    async with stream:
        data = b""
        while not data.endswith(b"\n"):
            chunk = await stream.receive_some(100)
            if not chunk:
                break
            data += chunk
        return data.decode().strip()


def process_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def container_pid(p: dict[str, Any], index: int = 0) -> int:
    cid = p["status"]["containerStatuses"][index]["containerID"]
    return int(cid.rsplit("/", 1)[-1])


async def get_pod(kube: Kube, name: str) -> dict[str, Any] | None:
    return await kube.get(f"{PODS}/{name}")


async def test_deployment_becomes_ready_pods_with_distinct_ips(kube: Kube) -> None:
    await kube.create(DEPLOYMENTS, deployment("web", 3, echo_container(readinessProbe=TCP_READY)))
    pods = await ready_pods(kube, "web", 3)
    ips = [p["status"]["podIP"] for p in pods]
    assert len(set(ips)) == 3
    assert all(ipaddress.ip_address(ip) in ipaddress.ip_network("127.0.0.0/17") for ip in ips)
    rs_name = pods[0]["metadata"]["ownerReferences"][0]["name"]
    pod_hash = pods[0]["metadata"]["labels"]["pod-template-hash"]
    assert rs_name == f"web-{pod_hash}"
    for p in pods:
        assert p["metadata"]["name"].startswith(f"web-{pod_hash}-")
        assert len(p["metadata"]["name"]) == len(f"web-{pod_hash}-") + 5
        assert p["spec"]["nodeName"] == "localkube"
        ref = p["metadata"]["ownerReferences"][0]
        assert (ref["kind"], ref["controller"]) == ("ReplicaSet", True)
        # each container bound its own Pod IP and knows its own name
        assert await greeting(p["status"]["podIP"], 7000) == p["metadata"]["name"]
    rs = await kube.get(f"/apis/apps/v1/namespaces/default/replicasets/{rs_name}")
    assert rs is not None
    assert rs["metadata"]["ownerReferences"][0]["kind"] == "Deployment"

    async def controller_events() -> set[str] | None:
        items = (await kube.list("/api/v1/namespaces/default/events"))["items"]
        reasons = {(e["involvedObject"]["kind"], e["reason"]) for e in items}
        wanted = {("Deployment", "ScalingReplicaSet"), ("ReplicaSet", "SuccessfulCreate")}
        return reasons if wanted <= reasons else None

    await eventually(controller_events, what="controller events")

    async def deploy_status() -> dict[str, Any] | None:
        d = await kube.get(f"{DEPLOYMENTS}/web")
        st = (d or {}).get("status") or {}
        return st if st.get("availableReplicas") == 3 and st.get("updatedReplicas") == 3 else None

    st = await eventually(deploy_status, what="deployment status")
    assert st["readyReplicas"] == 3
    assert st["observedGeneration"] == 1
    conds = {c["type"]: c for c in st["conditions"]}
    assert conds["Available"]["status"] == "True"


async def test_deleted_pod_is_replaced_and_scaling_follows_replicas(kube: Kube) -> None:
    await kube.create(DEPLOYMENTS, deployment("rep", 2, echo_container()))
    before = await ready_pods(kube, "rep", 2)
    victim = before[0]["metadata"]["name"]
    await kube.delete(f"{PODS}/{victim}")

    async def replaced() -> list[str] | None:
        items = (await kube.list(PODS, {"labelSelector": "app=rep"}))["items"]
        names = [p["metadata"]["name"] for p in items]
        return names if victim not in names and len(names) == 2 else None

    names = await eventually(replaced, what="replacement pod")
    assert before[1]["metadata"]["name"] in names
    await ready_pods(kube, "rep", 2)
    await kube.merge_patch(f"{DEPLOYMENTS}/rep", {"spec": {"replicas": 3}})
    await ready_pods(kube, "rep", 3)
    await kube.merge_patch(f"{DEPLOYMENTS}/rep", {"spec": {"replicas": 1}})
    await ready_pods(kube, "rep", 1)


async def test_template_change_rolls_pods(kube: Kube) -> None:
    await kube.create(DEPLOYMENTS, deployment("roll", 2, echo_container(readinessProbe=TCP_READY)))
    old = await ready_pods(kube, "roll", 2)
    old_hash = old[0]["metadata"]["labels"]["pod-template-hash"]
    d = await kube.get(f"{DEPLOYMENTS}/roll")
    assert d is not None
    template = copy.deepcopy(d["spec"]["template"])
    template["spec"]["containers"][0]["env"].append({"name": "VERSION", "value": "2"})
    await kube.merge_patch(f"{DEPLOYMENTS}/roll", {"spec": {"template": template}})

    async def rolled() -> list[dict[str, Any]] | None:
        pods = await ready_pods(kube, "roll", 2)
        hashes = {p["metadata"]["labels"]["pod-template-hash"] for p in pods}
        return pods if hashes and old_hash not in hashes else None

    new = await eventually(rolled, seconds=15, what="rolled pods")
    assert not {p["metadata"]["uid"] for p in new} & {p["metadata"]["uid"] for p in old}
    old_rs = await kube.get(f"/apis/apps/v1/namespaces/default/replicasets/roll-{old_hash}")
    assert old_rs is not None
    assert old_rs["spec"]["replicas"] == 0

    async def complete() -> dict[str, Any] | None:
        # kubectl rollout status's test: every replica updated and available, and the
        # Progressing condition says the new ReplicaSet is available (written a moment
        # after the counts: the same status may show ReplicaSetUpdated first)
        d = await kube.get(f"{DEPLOYMENTS}/roll")
        st = (d or {}).get("status") or {}
        ok = st.get("observedGeneration") == 2 and st.get("updatedReplicas") == 2
        reasons = {c["type"]: c["reason"] for c in st.get("conditions") or []}
        done = reasons.get("Progressing") == "NewReplicaSetAvailable"
        return st if ok and st.get("replicas") == 2 and done else None

    st = await eventually(complete, what="rollout complete")
    assert st["availableReplicas"] == 2


async def test_killed_container_restarts_and_bumps_restart_count(kube: Kube) -> None:
    await kube.create(PODS, pod("crash", echo_container()))

    async def running() -> dict[str, Any] | None:
        p = await get_pod(kube, "crash")
        cs = ((p or {}).get("status") or {}).get("containerStatuses") or []
        return p if cs and "running" in cs[0]["state"] else None

    first = await eventually(running, what="running container")
    pid = container_pid(first)
    os.kill(pid, signal.SIGKILL)

    async def restarted() -> dict[str, Any] | None:
        p = await get_pod(kube, "crash")
        cs = (p or {})["status"]["containerStatuses"][0]
        return p if cs["restartCount"] == 1 and "running" in cs["state"] else None

    second = await eventually(restarted, what="restart")
    cs = second["status"]["containerStatuses"][0]
    assert cs["lastState"]["terminated"]["exitCode"] == 128 + signal.SIGKILL
    assert container_pid(second) != pid

    async def events() -> list[str] | None:
        items = (
            await kube.list(
                "/api/v1/namespaces/default/events", {"fieldSelector": "involvedObject.name=crash"}
            )
        )["items"]
        reasons = [e["reason"] for e in items]
        # repeated Events are aggregated: one "Started" object counting both starts
        started = sum(int(e.get("count", 1)) for e in items if e["reason"] == "Started")
        return reasons if started >= 2 and "Scheduled" in reasons else None

    reasons = await eventually(events, what="Pod events")
    assert {"Pulled", "Created"} <= set(reasons)


async def test_graceful_deletion_sends_sigterm_then_sigkill_after_grace(
    kube: Kube, cluster: ClusterHandle
) -> None:
    # ready (listening) implies the SIGTERM handler is installed
    c = echo_container(readinessProbe=TCP_READY)
    c["env"].append({"name": "ECHO_IGNORE_SIGTERM", "value": "1"})
    await kube.create(PODS, pod("stubborn", c, terminationGracePeriodSeconds=1))
    p = await eventually(lambda: ready_pods(kube, "stubborn", 1), what="stubborn ready")
    pid = container_pid(p[0])
    started = time.monotonic()
    await kube.delete(f"{PODS}/stubborn")
    # still there while the grace period runs: the process got SIGTERM and ignored it
    mid = await get_pod(kube, "stubborn")
    assert mid is not None
    assert mid["metadata"]["deletionTimestamp"]

    async def sigterm_logged() -> bool:
        async with kube.api.call_api(
            "GET", version="", base=PODS, url="stubborn/log", raise_for_status=False
        ) as r:
            return b"SIGTERM received" in r.content

    await eventually(sigterm_logged, what="SIGTERM in log")

    async def gone() -> bool:
        return await get_pod(kube, "stubborn") is None

    await eventually(gone, what="pod object removed by the node")
    elapsed = time.monotonic() - started
    assert elapsed >= 0.9, elapsed  # SIGKILL only after terminationGracePeriodSeconds
    assert not process_alive(pid)


async def test_readiness_gates_keep_other_components_conditions(kube: Kube) -> None:
    gate = "kruntimes.io/RuntimedReady"
    await kube.create(
        PODS, pod("gated", echo_container(), readinessGates=[{"conditionType": gate}])
    )

    async def containers_ready() -> dict[str, Any] | None:
        p = await get_pod(kube, "gated")
        conds = {
            c["type"]: c["status"] for c in ((p or {}).get("status") or {}).get("conditions", [])
        }
        return p if conds.get("ContainersReady") == "True" else None

    p = await eventually(containers_ready, what="containers ready")
    conds = {c["type"]: c for c in p["status"]["conditions"]}
    assert conds["Ready"]["status"] == "False"
    assert conds["Ready"]["reason"] == "ReadinessGatesNotReady"
    # another component sets its condition with a conditional update of the status
    body = copy.deepcopy(p)
    body["status"]["conditions"].append(
        {"type": gate, "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}
    )
    await kube.replace(f"{PODS}/gated/status", body)

    async def ready() -> dict[str, Any] | None:
        p = await get_pod(kube, "gated")
        conds = {
            c["type"]: c["status"] for c in ((p or {}).get("status") or {}).get("conditions", [])
        }
        return p if conds.get("Ready") == "True" else None

    p = await eventually(ready, what="Ready through the gate")
    # the node rewrites status after a restart and keeps the gate condition
    os.kill(container_pid(p), signal.SIGKILL)

    async def restarted() -> dict[str, Any] | None:
        p = await get_pod(kube, "gated")
        cs = (p or {})["status"]["containerStatuses"][0]
        return p if cs["restartCount"] == 1 and cs["ready"] else None

    p = await eventually(restarted, what="restart")
    conds = {c["type"]: c["status"] for c in p["status"]["conditions"]}
    assert conds[gate] == "True"
    assert conds["Ready"] == "True"


async def test_unknown_image_stays_pending_with_err_image_pull(kube: Kube) -> None:
    await kube.create(PODS, pod("nginx", {"name": "web", "image": "nginx:1.27"}))

    async def waiting() -> dict[str, Any] | None:
        p = await get_pod(kube, "nginx")
        cs = ((p or {}).get("status") or {}).get("containerStatuses") or []
        return (
            cs[0]
            if cs and cs[0]["state"].get("waiting", {}).get("reason") == "ErrImagePull"
            else None
        )

    cs = await eventually(waiting, what="ErrImagePull")
    assert "localkube runs only the listed images" in cs["state"]["waiting"]["message"]
    assert "kruntimes/runtimed" in cs["state"]["waiting"]["message"]
    p = await get_pod(kube, "nginx")
    assert p is not None
    assert p["status"]["phase"] == "Pending"


async def test_unrunnable_command_fails_to_start_with_clear_message(kube: Kube) -> None:
    c = {"name": "main", "image": "localkube/python", "command": ["/nonexistent/krt-missing"]}
    await kube.create(PODS, pod("broken", c, restartPolicy="Never"))

    async def failed() -> dict[str, Any] | None:
        p = await get_pod(kube, "broken")
        return p if ((p or {}).get("status") or {}).get("phase") == "Failed" else None

    p = await eventually(failed, what="Failed")
    term = p["status"]["containerStatuses"][0]["state"]["terminated"]
    assert term["reason"] == "StartError"
    assert "/nonexistent/krt-missing" in term["message"]
    assert term["exitCode"] == 128


async def test_restart_policies(kube: Kube) -> None:
    def script(code: int) -> dict[str, Any]:
        return {
            "name": "main",
            "image": "localkube/python",
            "args": ["-c", f"import sys; sys.exit({code})"],
        }

    await kube.create(PODS, pod("never-fail", script(3), restartPolicy="Never"))
    await kube.create(PODS, pod("onfailure-ok", script(0), restartPolicy="OnFailure"))
    await kube.create(PODS, pod("onfailure-bad", script(1), restartPolicy="OnFailure"))

    async def phase(name: str, want: str) -> dict[str, Any] | None:
        p = await get_pod(kube, name)
        return p if ((p or {}).get("status") or {}).get("phase") == want else None

    p = await eventually(lambda: phase("never-fail", "Failed"), what="never-fail Failed")
    assert p["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 3
    assert p["status"]["containerStatuses"][0]["restartCount"] == 0
    p = await eventually(lambda: phase("onfailure-ok", "Succeeded"), what="Succeeded")
    assert p["status"]["containerStatuses"][0]["restartCount"] == 0

    async def restarted_twice() -> dict[str, Any] | None:
        p = await get_pod(kube, "onfailure-bad")
        cs = ((p or {}).get("status") or {}).get("containerStatuses") or []
        return p if cs and cs[0]["restartCount"] >= 2 else None

    p = await eventually(restarted_twice, what="OnFailure restarts")
    assert p["status"]["phase"] == "Running"
    # lastState is the run that ended (as the kubelet reports it), never the back-off
    last = p["status"]["containerStatuses"][0]["lastState"]["terminated"]
    assert (last["reason"], last["exitCode"]) == ("Error", 1)


async def test_liveness_failure_restarts_container(kube: Kube, cluster: ClusterHandle) -> None:
    live = {
        "exec": {"command": ["sh", "-c", 'test ! -e "$HOME/dead"']},
        "periodSeconds": 1,
        "failureThreshold": 1,
    }
    await kube.create(PODS, pod("live", echo_container(livenessProbe=live)))
    p = await eventually(lambda: ready_pods(kube, "live", 1), what="live ready")
    uid = p[0]["metadata"]["uid"]
    paths = PodPaths.for_pod(cluster.state_dir, "default", "live", uid)
    (paths.workspace / "dead").touch()

    async def restarted() -> dict[str, Any] | None:
        p = await get_pod(kube, "live")
        cs = (p or {})["status"]["containerStatuses"][0]
        return p if cs["restartCount"] >= 1 else None

    p = await eventually(restarted, what="liveness restart")
    last = p["status"]["containerStatuses"][0]["lastState"]["terminated"]
    assert "Liveness probe failed" in last.get("message", "")


async def test_node_registers_ready_with_a_lease(kube: Kube) -> None:
    node = await kube.get("/api/v1/nodes/localkube")
    assert node is not None
    conds = {c["type"]: c["status"] for c in node["status"]["conditions"]}
    assert conds["Ready"] == "True"
    assert {"type": "InternalIP", "address": "127.0.0.1"} in node["status"]["addresses"]

    async def lease() -> dict[str, Any] | None:
        return await kube.get(
            "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/localkube"
        )

    found = await eventually(lease, what="node lease")
    assert found["spec"]["holderIdentity"] == "localkube"
    assert found["spec"]["renewTime"].endswith("Z")


async def test_a_pod_that_never_started_is_deleted_at_once(kube: Kube) -> None:
    await kube.create(PODS, pod("pull", {"name": "web", "image": "nginx"}))

    async def waiting() -> bool:
        p = await get_pod(kube, "pull")
        cs = ((p or {}).get("status") or {}).get("containerStatuses") or []
        return bool(cs and "waiting" in cs[0]["state"])

    await eventually(waiting, what="ErrImagePull")
    started = time.monotonic()
    await kube.delete(f"{PODS}/pull")

    async def gone() -> bool:
        return await get_pod(kube, "pull") is None

    await eventually(gone, what="deleted")
    assert time.monotonic() - started < 5  # nothing to wait for: no process ran
