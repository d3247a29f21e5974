"""Runtime controller on localkube: a Runtime becomes a ready pool (issue 5 acceptance)."""

from __future__ import annotations

import ssl

import httpx
import trio
import trio.lowlevel

from krt.api.constants import RUNTIME_LABEL
from krt.kube.client import Kube
from krt.kube.errors import NotFound
from krt.kube.resources import (
    DEPLOYMENTS,
    EVENTS,
    PODS,
    ROLEBINDINGS,
    ROLES,
    RUNTIMES,
    SERVICEACCOUNTS,
    SERVICES,
)
from localkube.cluster import ClusterHandle

from .harness import (
    NS,
    HeartbeatDouble,
    create_runtime,
    running_controlplane,
    runtime_manifest,
    wait_for,
)


async def _ready_replicas(kube: Kube) -> int:
    runtime = await kube.get(RUNTIMES, "python", NS)
    return int((runtime.get("status") or {}).get("readyReplicas") or 0)


async def test_runtime_becomes_ready_pool_and_deployment_comes_back(
    kube: Kube, heartbeats: HeartbeatDouble
) -> None:
    await create_runtime(kube, replicas=2, runs=4)
    async with running_controlplane(kube):

        async def two_ready() -> bool:
            return await _ready_replicas(kube) == 2

        await wait_for(two_ready, seconds=30)
        for ref in (SERVICEACCOUNTS, ROLES, ROLEBINDINGS, SERVICES, DEPLOYMENTS):
            obj = await kube.get(ref, "runtime-python", NS)
            owner = obj["metadata"]["ownerReferences"][0]
            assert owner["kind"] == "Runtime"
            assert owner["name"] == "python"
        pods, _ = await kube.list(PODS, NS, label_selector=f"{RUNTIME_LABEL}=python")
        assert len(pods) == 2
        runtime = await kube.get(RUNTIMES, "python", NS)
        conditions = {c["type"]: c for c in runtime["status"]["conditions"]}
        assert conditions["Available"]["status"] == "True"

        # drift repair: a deleted Deployment comes back
        deployment = await kube.get(DEPLOYMENTS, "runtime-python", NS)
        await kube.delete(DEPLOYMENTS, "runtime-python", NS, propagation_policy="Orphan")

        async def recreated() -> bool:
            try:
                again = await kube.get(DEPLOYMENTS, "runtime-python", NS)
            except NotFound:
                return False
            return bool(again["metadata"]["uid"] != deployment["metadata"]["uid"])

        await wait_for(recreated, seconds=20)
        # a deleted Service comes back too
        service = await kube.get(SERVICES, "runtime-python", NS)
        await kube.delete(SERVICES, "runtime-python", NS)

        async def service_back() -> bool:
            try:
                again = await kube.get(SERVICES, "runtime-python", NS)
            except NotFound:
                return False
            return bool(again["metadata"]["uid"] != service["metadata"]["uid"])

        await wait_for(service_back, seconds=20)
        await trio.lowlevel.checkpoint()


async def _can(client: httpx.AsyncClient, verb: str, group: str, resource: str) -> bool:
    resource_name, _, subresource = resource.partition("/")
    attributes = {"namespace": NS, "verb": verb, "group": group, "resource": resource_name}
    if subresource:
        attributes["subresource"] = subresource
    answer = await client.post(
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        json={
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes},
        },
    )
    answer.raise_for_status()
    return bool(answer.json()["status"].get("allowed"))


async def test_runtimed_service_account_gets_least_privilege(
    kube: Kube, cluster: ClusterHandle
) -> None:
    """The Role the controller creates works on a real RBAC authorizer, and grants no more."""
    await create_runtime(kube, replicas=1, runs=2)
    async with running_controlplane(kube):

        async def bound() -> bool:
            try:
                await kube.get(ROLEBINDINGS, "runtime-python", NS)
            except NotFound:
                return False
            return True

        await wait_for(bound)
    answer = await kube.request(
        "POST",
        SERVICEACCOUNTS,
        namespace=NS,
        name="runtime-python",
        subresource="token",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    token = answer["status"]["token"]
    context = ssl.create_default_context(cadata=cluster.apiserver.ca_pem.decode())
    async with httpx.AsyncClient(
        base_url=cluster.apiserver.url,
        verify=context,
        headers={"Authorization": f"Bearer {token}"},
    ) as client:
        for verb, group, resource in [
            ("list", "kruntimes.io", "runs"),
            ("watch", "kruntimes.io", "runs"),
            ("patch", "kruntimes.io", "runs"),
            ("update", "kruntimes.io", "runs/status"),
            ("watch", "", "pods"),
            ("patch", "", "pods/status"),
            ("watch", "discovery.k8s.io", "endpointslices"),
            ("create", "coordination.k8s.io", "leases"),
            ("update", "coordination.k8s.io", "leases"),
            ("create", "", "events"),
        ]:
            assert await _can(client, verb, group, resource), (verb, group, resource)
        for verb, group, resource in [
            ("create", "kruntimes.io", "runs"),
            ("delete", "kruntimes.io", "runs"),
            ("get", "kruntimes.io", "runtimes"),
            ("delete", "", "pods"),
            ("get", "", "secrets"),
            ("delete", "coordination.k8s.io", "leases"),
        ]:
            assert not await _can(client, verb, group, resource), (verb, group, resource)


async def test_repair_keeps_kubectl_rollout_restart(kube: Kube) -> None:
    """A repair of the Deployment keeps ``kubectl rollout restart``'s annotation (T2 F15).

    Without it the repair (here: an operator's ``kubectl scale deployment``) writes the
    template without ``kubectl.kubernetes.io/restartedAt`` and the Deployment rolls back to
    the pre-restart ReplicaSet, replacing the Pods a second time.
    """
    restarted = "kubectl.kubernetes.io/restartedAt"
    await create_runtime(kube, replicas=1, runs=2)
    async with running_controlplane(kube):

        async def created() -> bool:
            try:
                await kube.get(DEPLOYMENTS, "runtime-python", NS)
            except NotFound:
                return False
            return True

        await wait_for(created)
        # `kubectl rollout restart deployment/runtime-python`
        await kube.patch(
            DEPLOYMENTS,
            "runtime-python",
            NS,
            {
                "spec": {
                    "template": {"metadata": {"annotations": {restarted: "2026-11-30T05:00:00Z"}}}
                }
            },
            type="strategic",
        )
        await kube.patch(DEPLOYMENTS, "runtime-python", NS, {"spec": {"replicas": 3}})

        async def repaired() -> bool:
            deployment = await kube.get(DEPLOYMENTS, "runtime-python", NS)
            return bool(deployment["spec"]["replicas"] == 1)

        await wait_for(repaired)
        deployment = await kube.get(DEPLOYMENTS, "runtime-python", NS)
        annotations = deployment["spec"]["template"]["metadata"]["annotations"]
        assert annotations.get(restarted) == "2026-11-30T05:00:00Z"


async def test_a_misspelled_template_field_is_reported_not_dropped(kube: Kube) -> None:
    """The Deployment is written with fieldValidation=Strict (T3 F5).

    Before, the API server's default (Warn) dropped ``imagePullPolicyy`` and the Runtime ran
    a Pod without it, with no Event or log line saying so.
    """
    manifest = runtime_manifest("typo", replicas=1, runs=2)
    manifest["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    await kube.create(RUNTIMES, manifest)
    async with running_controlplane(kube):

        async def reported() -> bool:
            events, _ = await kube.list(EVENTS, NS)
            return any(
                e.get("reason") == "InvalidTemplate"
                and (e.get("involvedObject") or {}).get("name") == "typo"
                and "imagePullPolicyy" in str(e.get("message"))
                for e in events
            )

        await wait_for(reported)
    try:
        await kube.get(DEPLOYMENTS, "runtime-typo", NS)
    except NotFound:
        return
    raise AssertionError("a Deployment was created from a template with an unknown field")
