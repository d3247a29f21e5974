"""The charts installed on localkube: their RBAC, Secrets and Pods exercised for real.

The rendered manifests (values-localkube.yaml, the overrides `krt dev up` uses) are applied
to an in-process localkube cluster, whose node runs the kruntimes images as local processes:

* the control plane's ServiceAccount token (a TokenRequest, as the kubelet gets one) is
  asked through SelfSubjectAccessReview what it may do, and used for real requests: it can
  do what the controller needs, cannot read Secrets, cannot escalate;
* the real control plane runs with that token (in-process: the chart's RBAC is its only
  authority) and builds the built-in python and bash Runtimes from the kruntimes-runtimes
  chart; a task Run on each succeeds, so the Runtime Server arguments are right;
* the gateway Deployment's Pod serves HTTPS on the runtime-gateway Service (443 -> 8443)
  with the certificate from the mounted Secret, verified against its CA.
"""

from __future__ import annotations

import base64
import shutil
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trustme
import yaml
from chart_rendering import (
    KIND_REFS,
    KRUNTIMES,
    NAMESPACE,
    RUNTIMES_CHART,
    crds,
    deep_merge,
    render,
    requires_helm,
    values_file,
)

from krt.controlplane.app import ControlPlaneConfig, serve_controlplane
from krt.controlplane.runtime_resources import RUNTIMED_RULES
from krt.kube.client import Kube, connect
from krt.kube.errors import Forbidden, NotFound
from krt.kube.resources import (
    DEPLOYMENTS,
    ENDPOINTSLICES,
    LEASES,
    NAMESPACES,
    PODS,
    ROLES,
    RUNS,
    RUNTIMES,
    SELFSUBJECTACCESSREVIEWS,
    SERVICEACCOUNTS,
    SERVICES,
)
from localkube.cluster import ClusterConfig, ClusterHandle, serve_cluster
from localkube.kubeconfig import write_kubeconfig

pytestmark = requires_helm

RUNS_NS = "default"
CP_SA = "krt-kruntimes-controlplane"
#: The chart's leader Lease: named after the release (two releases never share one).
CP_LEASE = "krt-kruntimes-controlplane"
GATEWAY_SA = "krt-kruntimes-gateway"
SECRETS = KIND_REFS["Secret"]
GATEWAY_HOST = f"runtime-gateway.{NAMESPACE}.svc"


@dataclass
class Installed:
    handle: ClusterHandle
    kube: Kube  # admin
    ca: trustme.CA  # the gateway's CA
    state_dir: Path


async def apply(kube: Kube, docs: list[dict[str, Any]]) -> None:
    for doc in docs:
        await kube.create(KIND_REFS[doc["kind"]], doc)


def kruntimes_docs(
    *, without: tuple[str, ...] = (), values: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    values = deep_merge(
        deep_merge(
            values_file(KRUNTIMES, "values-localkube.yaml"),
            {"gateway": {"tls": {"secretName": "gateway-tls"}}},
        ),
        values or {},
    )
    return [
        d
        for d in render(KRUNTIMES, values)
        if (d["kind"], d["metadata"]["name"]) not in {("Deployment", n) for n in without}
    ]


def runtimes_docs() -> list[dict[str, Any]]:
    return render(
        RUNTIMES_CHART, values_file(RUNTIMES_CHART, "values-localkube.yaml"), namespace=RUNS_NS
    )


def gateway_tls_secret(ca: trustme.CA) -> dict[str, Any]:
    cert = ca.issue_cert(GATEWAY_HOST, f"{GATEWAY_HOST}.cluster.local")
    key = cert.private_key_pem.bytes()
    chain = b"".join(blob.bytes() for blob in cert.cert_chain_pems)

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {"name": "gateway-tls", "namespace": NAMESPACE},
        "data": {"tls.crt": b64(chain), "tls.key": b64(key), "ca.crt": b64(ca.cert_pem.bytes())},
    }


@asynccontextmanager
async def installed(
    tmp_path: Path,
    *,
    without: tuple[str, ...] = (),
    values: dict[str, Any] | None = None,
    namespaces: tuple[str, ...] = (),
) -> AsyncIterator[Installed]:
    """localkube with the CRDs, the gateway Secret and the kruntimes chart applied.

    ``values`` override the chart's (localkube) values; ``namespaces`` are created first.
    """
    state_dir = tmp_path / "state"
    async with trio.open_nursery() as nursery:
        handle: ClusterHandle = await nursery.start(
            serve_cluster,
            ClusterConfig(state_dir=state_dir, backoff_initial=0.2, shutdown_grace=1.0),
        )
        kube = await connect(kubeconfig=Path(handle.apiserver.kubeconfig_path))
        async with kube:
            for namespace in (NAMESPACE, *namespaces):
                await kube.create(NAMESPACES, {"metadata": {"name": namespace}})
            await apply(kube, crds())
            with trio.fail_after(10):
                while True:
                    try:
                        await kube.list(RUNTIMES, RUNS_NS)
                        await kube.list(RUNS, RUNS_NS)
                        break
                    except NotFound:
                        await trio.sleep(0.05)
            ca = trustme.CA()
            await apply(kube, [gateway_tls_secret(ca)])
            await apply(kube, kruntimes_docs(without=without, values=values))
            yield Installed(handle=handle, kube=kube, ca=ca, state_dir=state_dir)
            nursery.cancel_scope.cancel()


@asynccontextmanager
async def service_account_client(
    cluster: Installed, name: str, *, namespace: str = NAMESPACE
) -> AsyncIterator[Kube]:
    """A client authenticated as ServiceAccount ``namespace/name`` (a TokenRequest token)."""
    answer = await cluster.kube.request(
        "POST",
        SERVICEACCOUNTS,
        namespace=namespace,
        name=name,
        subresource="token",
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
        },
    )
    token = answer["status"]["token"]
    api = cluster.handle.apiserver
    path = write_kubeconfig(
        cluster.state_dir / f"{name}.kubeconfig", server=api.url, ca_pem=api.ca_pem, token=token
    )
    kube = await connect(kubeconfig=path)
    async with kube:
        yield kube


async def can(
    kube: Kube, verb: str, group: str, resource: str, *, namespace: str | None = RUNS_NS
) -> bool:
    plural, _, sub = resource.partition("/")
    attributes = {"verb": verb, "group": group, "resource": plural}
    if sub:
        attributes["subresource"] = sub
    if namespace is not None:
        attributes["namespace"] = namespace
    review = await kube.request(
        "POST",
        SELFSUBJECTACCESSREVIEWS,
        body={
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes},
        },
    )
    return bool(review["status"]["allowed"])


async def test_controlplane_service_account_can_do_its_job_and_nothing_more(
    tmp_path: Path,
) -> None:
    async with (
        installed(
            tmp_path, without=("krt-kruntimes-controlplane", "krt-kruntimes-gateway")
        ) as cluster,
        service_account_client(cluster, CP_SA) as cp,
        service_account_client(cluster, GATEWAY_SA) as gw,
    ):
        # everything the controller does, in any namespace (no watchNamespaces)
        for namespace in (RUNS_NS, "team-x"):
            for verb, group, resource in [
                ("watch", "kruntimes.io", "runs"),
                ("delete", "kruntimes.io", "runs"),
                ("update", "kruntimes.io", "runs/status"),
                ("watch", "kruntimes.io", "runtimes"),
                ("update", "kruntimes.io", "runtimes/status"),
                ("update", "kruntimes.io", "runtimes/finalizers"),
                ("create", "apps", "deployments"),
                ("update", "apps", "deployments"),
                ("create", "", "services"),
                ("create", "", "serviceaccounts"),
                ("create", "rbac.authorization.k8s.io", "roles"),
                ("create", "rbac.authorization.k8s.io", "rolebindings"),
                ("watch", "", "pods"),
                ("patch", "", "pods"),  # pod-deletion-cost before a Runtime scale-down
                ("watch", "discovery.k8s.io", "endpointslices"),
                ("update", "coordination.k8s.io", "leases"),
                ("create", "", "events"),
            ]:
                assert await can(cp, verb, group, resource, namespace=namespace), (verb, resource)
            # escalation prevention: it holds every permission of the Role it gives runtimed
            for rule in RUNTIMED_RULES:
                for group in rule["apiGroups"]:
                    for resource in rule["resources"]:
                        for verb in rule["verbs"]:
                            assert await can(cp, verb, group, resource, namespace=namespace), (
                                verb,
                                group,
                                resource,
                            )
        # ... and nothing it does not need
        for verb, group, resource, namespace in [
            ("get", "", "secrets", RUNS_NS),
            ("list", "", "secrets", None),
            ("get", "", "secrets", NAMESPACE),
            ("get", "", "configmaps", RUNS_NS),
            ("create", "kruntimes.io", "runs", RUNS_NS),
            ("update", "kruntimes.io", "runtimes", RUNS_NS),
            ("delete", "apps", "deployments", RUNS_NS),
            ("create", "", "pods", RUNS_NS),
            ("delete", "", "pods", RUNS_NS),
            ("create", "", "pods/exec", RUNS_NS),
            ("escalate", "rbac.authorization.k8s.io", "roles", RUNS_NS),
            ("bind", "rbac.authorization.k8s.io", "roles", RUNS_NS),
            ("create", "rbac.authorization.k8s.io", "clusterroles", None),
            ("create", "", "serviceaccounts/token", RUNS_NS),
        ]:
            assert not await can(cp, verb, group, resource, namespace=namespace), (verb, resource)
        # real requests, not only reviews
        await cluster.kube.create(
            SECRETS, {"metadata": {"name": "s", "namespace": RUNS_NS}, "stringData": {"k": "v"}}
        )
        with pytest.raises(Forbidden):
            await cp.get(SECRETS, "s", RUNS_NS)
        with pytest.raises(Forbidden):
            await cp.list(SECRETS)
        role = {
            "metadata": {"name": "runtimed-like", "namespace": RUNS_NS},
            "rules": [dict(rule) for rule in RUNTIMED_RULES],
        }
        created = await cp.create(ROLES, role)
        assert created["rules"] == role["rules"]
        # the gateway's ServiceAccount may do nothing at all (it never calls the API)
        assert not await can(gw, "get", "kruntimes.io", "runs")
        assert not await can(gw, "list", "", "pods")
        with pytest.raises(Forbidden):
            await gw.list(RUNS, RUNS_NS)


async def test_watch_namespaces_bound_every_write_to_the_listed_namespaces(
    tmp_path: Path,
) -> None:
    """controlplane.watchNamespaces: Deployments, Pod patches and Leases only where listed,
    the leader Lease only by name in the release namespace (kubectl auth can-i --as ...)."""
    async with (
        installed(
            tmp_path,
            without=("krt-kruntimes-controlplane", "krt-kruntimes-gateway"),
            values={"controlplane": {"watchNamespaces": [RUNS_NS]}},
            namespaces=("team-x",),
        ) as cluster,
        service_account_client(cluster, CP_SA) as cp,
    ):
        for verb, group, resource in [
            ("create", "apps", "deployments"),
            ("update", "apps", "deployments"),
            ("patch", "", "pods"),
            ("update", "coordination.k8s.io", "leases"),
            ("create", "rbac.authorization.k8s.io", "roles"),
        ]:
            assert await can(cp, verb, group, resource, namespace=RUNS_NS), (verb, resource)
            for elsewhere in ("kube-system", "team-x", NAMESPACE):
                assert not await can(cp, verb, group, resource, namespace=elsewhere), (
                    verb,
                    resource,
                    elsewhere,
                )
        # the leader Lease: created, read and renewed by name; no other Lease there
        lease = {"metadata": {"name": CP_LEASE, "namespace": NAMESPACE}, "spec": {}}
        created = await cp.create(LEASES, lease)
        created["spec"]["holderIdentity"] = "me"
        await cp.replace(LEASES, created)
        await cluster.kube.create(
            LEASES, {"metadata": {"name": "kube-scheduler", "namespace": NAMESPACE}, "spec": {}}
        )
        other = await cluster.kube.get(LEASES, "kube-scheduler", NAMESPACE)
        with pytest.raises(Forbidden):
            await cp.get(LEASES, "kube-scheduler", NAMESPACE)
        with pytest.raises(Forbidden):
            await cp.replace(LEASES, other)
        with pytest.raises(Forbidden):
            await cp.create(
                LEASES, {"metadata": {"name": "x", "namespace": "kube-system"}, "spec": {}}
            )


def crash_report(state_dir: Path, pod: dict[str, Any]) -> str | None:
    """The last log lines of a container that keeps exiting, or ``None`` if none does."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("restartCount", 0) >= 2:
            meta = pod["metadata"]
            root = state_dir / "node" / "pods" / f"{meta['namespace']}_{meta['name']}_{meta['uid']}"
            logs = sorted((root / "logs" / status["name"]).glob("*.log"))
            tail = "".join(p.read_text() for p in logs[-2:])[-1500:]
            return f"container {status['name']} of {meta['name']} keeps exiting:\n{tail}"
    return None


async def wait_ready_pods(
    cluster: Installed, namespace: str, selector: str, count: int
) -> list[dict[str, Any]]:
    """Wait (30 s at most) for ``count`` Ready Pods; fail at once on a crash-looping container."""
    with trio.fail_after(30):
        while True:
            pods, _ = await cluster.kube.list(PODS, namespace, label_selector=selector)
            for pod in pods:
                report = crash_report(cluster.state_dir, pod)
                if report:
                    pytest.fail(report)
            ready = [
                p
                for p in pods
                if any(
                    c.get("type") == "Ready" and c.get("status") == "True"
                    for c in (p.get("status") or {}).get("conditions") or []
                )
            ]
            if len(ready) >= count:
                return ready
            await trio.sleep(0.1)


async def wait_phase(kube: Kube, name: str, *phases: str) -> dict[str, Any]:
    with trio.fail_after(30):
        while True:
            run = await kube.get(RUNS, name, RUNS_NS)
            if (run.get("status") or {}).get("phase") in phases:
                return run
            await trio.sleep(0.05)


async def test_controlplane_with_chart_rbac_builds_the_builtin_runtimes(tmp_path: Path) -> None:
    """The real control plane, authorized only by the chart's RBAC, serves the runtimes chart."""
    async with (
        installed(
            tmp_path, without=("krt-kruntimes-controlplane", "krt-kruntimes-gateway")
        ) as cluster,
        service_account_client(cluster, CP_SA) as cp,
        trio.open_nursery() as nursery,
    ):
        await nursery.start(
            serve_controlplane,
            cp,
            ControlPlaneConfig(lease_namespace=NAMESPACE, leader_elect=True, retry_period=0.2),
        )
        kube = cluster.kube
        await apply(kube, runtimes_docs())
        for runtime in ("python", "bash"):
            await wait_ready_pods(cluster, RUNS_NS, f"kruntimes.io/runtime={runtime}", 1)
            for ref in (DEPLOYMENTS, SERVICES, SERVICEACCOUNTS, ROLES):
                await kube.get(ref, f"runtime-{runtime}", RUNS_NS)
        lease = await kube.get(LEASES, "krt-controlplane", NAMESPACE)
        assert lease["spec"]["holderIdentity"]
        scripts = {
            "python": "import os\nopen(os.environ['KRUNTIME_OUTPUTS'], 'a').write('lang=python\\n')\n",
            "bash": 'echo "lang=bash" >> "$KRUNTIME_OUTPUTS"\n',
        }
        for runtime, script in scripts.items():
            await kube.create(
                RUNS,
                {
                    "apiVersion": "kruntimes.io/v1alpha1",
                    "kind": "Run",
                    "metadata": {"name": f"hello-{runtime}", "namespace": RUNS_NS},
                    "spec": {
                        "runtime": runtime,
                        "source": {"inline": script},
                        "mode": {"task": {}},
                    },
                },
            )
        for runtime in scripts:
            run = await wait_phase(kube, f"hello-{runtime}", "Succeeded", "Failed")
            assert run["status"]["phase"] == "Succeeded", run["status"]
            assert run["status"]["outputs"] == {"lang": runtime}
        for runtime in scripts:
            runtime_obj = await kube.get(RUNTIMES, runtime, RUNS_NS)
            assert runtime_obj["status"]["readyReplicas"] == 1
        nursery.cancel_scope.cancel()


async def test_gateway_pod_serves_https_on_the_runtime_gateway_service(tmp_path: Path) -> None:
    async with installed(tmp_path, without=("krt-kruntimes-controlplane",)) as cluster:
        kube = cluster.kube
        (pod,) = await wait_ready_pods(cluster, NAMESPACE, "app.kubernetes.io/component=gateway", 1)
        svc = await kube.get(SERVICES, "runtime-gateway", NAMESPACE)
        with trio.fail_after(10):
            while not svc["spec"].get("clusterIP"):
                await trio.sleep(0.05)
                svc = await kube.get(SERVICES, "runtime-gateway", NAMESPACE)
        assert svc["spec"]["ports"][0]["port"] == 443
        # the Service proxy sends connections to ready endpoints only: wait for the slice
        with trio.fail_after(10):
            while True:
                slices, _ = await kube.list(
                    ENDPOINTSLICES,
                    NAMESPACE,
                    label_selector="kubernetes.io/service-name=runtime-gateway",
                )
                addresses = [
                    address
                    for s in slices
                    for e in s.get("endpoints") or []
                    if (e.get("conditions") or {}).get("ready")
                    for address in e["addresses"]
                ]
                if addresses == [pod["status"]["podIP"]]:
                    break
                await trio.sleep(0.05)
        context = ssl.create_default_context()
        cluster.ca.configure_trust(context)
        uid = "2c24c1f0-9f8f-4f80-82d5-3dd16a12d1e6"
        url = f"https://{svc['spec']['clusterIP']}:443/v1/namespaces/{RUNS_NS}/runtimes/python/functions/{uid}:invoke"
        async with httpx.AsyncClient(verify=context) as client:
            # the certificate verifies for the Service's DNS name (SNI), through the Service
            answer = await client.post(
                url,
                content=b"{}",
                headers={"content-type": "application/json", "host": GATEWAY_HOST},
                extensions={"sni_hostname": GATEWAY_HOST},
            )
            assert answer.status_code == 401  # no bearer token: refused before any dispatch
            assert answer.headers["x-kruntime-invocation-id"]
        # and not for a name the certificate does not cover (a new connection: no reuse)
        async with httpx.AsyncClient(verify=context) as client:
            with pytest.raises(httpx.ConnectError) as refused:
                await client.post(url, content=b"{}", extensions={"sni_hostname": "elsewhere.svc"})
        causes = []
        cause: BaseException | None = refused.value
        while cause is not None:
            causes.append(cause)
            cause = cause.__cause__ or cause.__context__
        assert any(isinstance(c, ssl.SSLCertVerificationError) for c in causes), causes
        # the Pod IP serves HTTPS only on 8443; /healthz is on the plain metrics port
        async with httpx.AsyncClient() as plain:
            health = await plain.get(f"http://{pod['status']['podIP']}:8081/healthz")
        assert health.status_code == 200


async def test_both_charts_run_entirely_as_pods(tmp_path: Path) -> None:
    """Both charts as `helm install` leaves them: the chart's control-plane Pod (its mounted
    token, its RBAC) becomes the leader and builds the Runtimes; a task Run succeeds."""
    async with installed(tmp_path, without=("krt-kruntimes-gateway",)) as cluster:
        kube = cluster.kube
        await wait_ready_pods(cluster, NAMESPACE, "app.kubernetes.io/component=controlplane", 1)
        with trio.fail_after(20):
            while True:
                try:
                    lease = await kube.get(LEASES, CP_LEASE, NAMESPACE)
                except NotFound:
                    await trio.sleep(0.1)
                    continue
                if (lease.get("spec") or {}).get("holderIdentity"):
                    break
                await trio.sleep(0.1)
        assert lease["spec"]["holderIdentity"].startswith("krt-kruntimes-controlplane-")
        await apply(kube, runtimes_docs())
        await wait_ready_pods(cluster, RUNS_NS, "kruntimes.io/runtime=bash", 1)
        await kube.create(
            RUNS,
            {
                "apiVersion": "kruntimes.io/v1alpha1",
                "kind": "Run",
                "metadata": {"name": "in-pods", "namespace": RUNS_NS},
                "spec": {
                    "runtime": "bash",
                    "source": {"inline": 'echo "where=pods" >> "$KRUNTIME_OUTPUTS"\n'},
                    "mode": {"task": {}},
                },
            },
        )
        run = await wait_phase(kube, "in-pods", "Succeeded", "Failed")
        assert run["status"]["phase"] == "Succeeded", run["status"]
        assert run["status"]["outputs"] == {"where": "pods"}


KUBECTL = shutil.which("kubectl")


@pytest.mark.kubectl
async def test_kubectl_applies_the_charts_and_answers_can_i_for_the_token(tmp_path: Path) -> None:
    """As an operator would: kubectl apply, kubectl create token, kubectl auth can-i --token."""
    if KUBECTL is None:
        print("SKIP: kubectl is not installed; this test drives the charts through kubectl")
        pytest.skip("kubectl is not installed")
    kubectl_path = KUBECTL
    async with trio.open_nursery() as nursery:
        handle: ClusterHandle = await nursery.start(
            serve_cluster, ClusterConfig(state_dir=tmp_path / "state", shutdown_grace=1.0)
        )

        async def kubectl(*args: str, stdin: str = "", token: str | None = None) -> tuple[int, str]:
            argv = [kubectl_path, "--kubeconfig", str(handle.apiserver.kubeconfig_path)]
            argv += ["--token", token] if token else []
            with trio.fail_after(30):
                done = await trio.run_process(
                    [*argv, *args],
                    stdin=stdin.encode(),
                    capture_stdout=True,
                    capture_stderr=True,
                    check=False,
                )
            return done.returncode, (done.stdout + done.stderr).decode()

        code, out = await kubectl("apply", "-f", str(KRUNTIMES / "crds"))
        assert code == 0, out
        code, out = await kubectl("create", "namespace", NAMESPACE)
        assert code == 0, out
        manifests = [d for d in kruntimes_docs() if d["kind"] != "Deployment"]
        code, out = await kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(manifests))
        assert code == 0, out
        assert "clusterrole.rbac.authorization.k8s.io/krt-kruntimes-controlplane created" in out
        code, token = await kubectl("create", "token", CP_SA, "-n", NAMESPACE)
        assert code == 0, token
        token = token.strip()
        for args, expected in [
            (("create", "roles", "-n", RUNS_NS), "yes"),
            (("create", "deployments.apps", "-n", "team-x"), "yes"),
            (("update", "runs.kruntimes.io", "--subresource=status", "-n", RUNS_NS), "yes"),
            (("get", "secrets", "--all-namespaces"), "no"),
            (("get", "secrets", "-n", NAMESPACE), "no"),
            (("escalate", "roles", "-n", RUNS_NS), "no"),
            (("create", "pods", "-n", RUNS_NS), "no"),
        ]:
            code, out = await kubectl("auth", "can-i", *args, token=token)
            assert out.strip().splitlines()[0] == expected, (args, out)
            assert code == (0 if expected == "yes" else 1), (args, out)
        nursery.cancel_scope.cancel()
