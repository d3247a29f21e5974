"""The SSAR authorization path against localkube's API server (RBAC, tokens; seed 000).

The proxy runs with the production :class:`KubeReviewer` on a real API server; the ownership
cache and the Runtime Server are the harness's (the Run object itself is not needed for an
access review: RBAC decides on the names).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio
from dp_harness import UID, FakeRuntimeServer, client, gateway_metadata, invoke
from dp_objects import NAMESPACE, RUNTIME, function_run

from krt.grpc.client import GrpcStatusError
from krt.kube.access import check_access
from krt.kube.client import Kube, connect
from krt.kube.errors import Unauthorized
from krt.kube.informer import EventType, InformerEvent
from krt.kube.resources import NAMESPACES, ROLEBINDINGS, ROLES, SERVICEACCOUNTS
from localkube.apiserver import ApiServerConfig, running_apiserver
from localkube.pki import ClusterPKI
from runtimed.dataplane.authz import AuthzCache, KubeReviewer
from runtimed.dataplane.channels import Channels
from runtimed.dataplane.ownership import OwnershipCache
from runtimed.dataplane.proxy import InvokeProxy, ProxyIdentity
from runtimed.dataplane.server import serve_grpc
from runtimed.functions.registry import FunctionRegistry

PERMISSION_DENIED, UNAUTHENTICATED = 7, 16


async def account_token(kube: Kube, name: str) -> tuple[str, str]:
    """Create ServiceAccount ``name``; return (TokenRequest token, its UID)."""
    account = await kube.create(
        SERVICEACCOUNTS, {"metadata": {"name": name, "namespace": NAMESPACE}}
    )
    answer = await kube.request(
        "POST",
        SERVICEACCOUNTS,
        namespace=NAMESPACE,
        name=name,
        subresource="token",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    return str(answer["status"]["token"]), str(account["metadata"]["uid"])


async def grant_get_run(kube: Kube, accounts: list[str], run: str) -> None:
    await kube.create(
        ROLES,
        {
            "metadata": {"name": f"get-{run}", "namespace": NAMESPACE},
            "rules": [
                {
                    "apiGroups": ["kruntimes.io"],
                    "resources": ["runs"],
                    "resourceNames": [run],
                    "verbs": ["get"],
                }
            ],
        },
    )
    await kube.create(
        ROLEBINDINGS,
        {
            "metadata": {"name": f"get-{run}", "namespace": NAMESPACE},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": f"get-{run}",
            },
            "subjects": [
                {"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}
                for account in accounts
            ],
        },
    )


class World:
    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[Any]:
    async with running_apiserver(ApiServerConfig(state_dir=tmp_path / "state")) as api:
        kube = await connect(kubeconfig=api.kubeconfig_path)
        try:
            await kube.create(NAMESPACES, {"metadata": {"name": NAMESPACE}})
            invoker, _ = await account_token(kube, "invoker")
            restricted, _ = await account_token(kube, "restricted")
            _, expired_uid = await account_token(kube, "expired")
            await grant_get_run(kube, ["invoker", "expired"], "fn")
            pki = ClusterPKI.create(tmp_path / "state", ["127.0.0.1"])  # the same signing key
            expired, _ = pki.token_authority.issue(
                NAMESPACE,
                "expired",
                expired_uid,
                audiences=[],
                expiration_seconds=600,
                now=time.time() - 3600,
            )
            async with trio.open_nursery() as nursery:
                server = FakeRuntimeServer()
                server_port = await nursery.start(
                    lambda task_status: serve_grpc(
                        {"executor.v1.FunctionRuntime": server.service},
                        host="127.0.0.1",
                        port=0,
                        tls=None,
                        task_status=task_status,
                    )
                )
                cache = OwnershipCache(runtime=RUNTIME)
                cache.on_run_event(InformerEvent(EventType.ADDED, function_run(UID, pod_uid="me")))
                cache.mark_synced()
                registry = FunctionRegistry()
                registry.registering(UID, key=f"{NAMESPACE}/fn", attempt=1, digest="d")
                registry.ready(UID, attempt=1, registration_id="reg-1")
                authz = AuthzCache(KubeReviewer(kube))
                proxy = InvokeProxy(
                    identity=ProxyIdentity("me", NAMESPACE, RUNTIME, "127.0.0.1", server_port),
                    cache=cache,
                    registrations=registry,
                    authz=authz,
                    server=Channels(nursery),
                    peers=None,
                )
                port = await nursery.start(
                    lambda task_status: serve_grpc(
                        {"executor.v1.FunctionRuntime": proxy.service},
                        host="127.0.0.1",
                        port=0,
                        tls=None,
                        task_status=task_status,
                    )
                )
                with trio.fail_after(20):
                    yield World(
                        kube=kube,
                        port=port,
                        server=server,
                        authz=authz,
                        tokens={"invoker": invoker, "restricted": restricted, "expired": expired},
                    )
                nursery.cancel_scope.cancel()
        finally:
            await kube.aclose()


async def code_for(world: Any, token: str | None) -> int:
    async with client("127.0.0.1", world.port) as conn:
        try:
            await invoke(conn, metadata=gateway_metadata(token))
        except GrpcStatusError as exc:
            return exc.code
    return 0


async def test_allowed_caller_invokes_and_the_decision_is_cached(world: Any) -> None:
    assert await code_for(world, world.tokens["invoker"]) == 0
    assert await code_for(world, world.tokens["invoker"]) == 0
    assert world.authz.reviews == 1  # API traffic only on the miss
    assert len(world.server.requests) == 2


async def test_rbac_restricted_token_is_permission_denied(world: Any) -> None:
    assert await code_for(world, world.tokens["restricted"]) == PERMISSION_DENIED
    assert world.server.requests == []


async def test_missing_token_is_unauthenticated(world: Any) -> None:
    assert await code_for(world, None) == UNAUTHENTICATED
    assert world.authz.reviews == 0


async def test_invalid_token_is_unauthenticated_by_the_api_server(world: Any) -> None:
    assert await code_for(world, "not-a-real-token") == UNAUTHENTICATED
    assert world.authz.reviews == 1


async def test_expired_token_is_unauthenticated(world: Any) -> None:
    token = world.tokens["expired"]
    # the API server itself rejects it ...
    with pytest.raises(Unauthorized):
        await check_access(world.kube.with_token(token), verb="get", resource="pods")
    # ... and runtimed answers UNAUTHENTICATED without asking (its exp has passed)
    assert await code_for(world, token) == UNAUTHENTICATED
    assert world.authz.reviews == 0
    assert world.server.requests == []
