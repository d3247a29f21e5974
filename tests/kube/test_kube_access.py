"""Caller-identity requests: Kube.with_token and SelfSubjectAccessReview (seed 000)."""

from __future__ import annotations

import pytest
from conftest import service_account_token

from krt.kube import errors
from krt.kube.access import check_access
from krt.kube.client import Kube
from krt.kube.resources import NAMESPACES, ROLEBINDINGS, ROLES


async def grant_get_run(kube: Kube, account: str, run: str) -> None:
    await kube.create(
        ROLES,
        {
            "metadata": {"name": f"get-{run}", "namespace": "default"},
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
            "metadata": {"name": f"{account}-get-{run}", "namespace": "default"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": f"get-{run}",
            },
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": "default"}],
        },
    )


async def test_review_is_made_as_the_caller(kube: Kube) -> None:
    caller = kube.with_token(await service_account_token(kube, "invoker"))
    await grant_get_run(kube, "invoker", "fn-a")

    async def may_get(client: Kube, run: str) -> bool:
        decision = await check_access(
            client, verb="get", group="kruntimes.io", resource="runs", namespace="default", name=run
        )
        return decision.allowed

    assert await may_get(caller, "fn-a")
    assert not await may_get(caller, "fn-b")  # only the exact Run
    assert await may_get(kube, "fn-b")  # the admin identity is different
    other_ns = await check_access(
        caller,
        verb="get",
        group="kruntimes.io",
        resource="runs",
        namespace="kube-system",
        name="fn-a",
    )
    assert not other_ns.allowed


async def test_invalid_caller_token_is_unauthorized_without_reload(kube: Kube) -> None:
    caller = kube.with_token("not-a-valid-token")
    with pytest.raises(errors.Unauthorized):
        await check_access(caller, verb="get", resource="pods", namespace="default")
    assert caller.requests == 1  # a caller's bad token is final: no credential reload


async def test_view_shares_the_session_and_does_not_close_it(kube: Kube) -> None:
    view = kube.with_token(await service_account_token(kube, "viewer"))
    await view.aclose()
    await kube.get(NAMESPACES, "default")  # the shared session still works


async def test_bad_input_is_rejected_before_any_request(kube: Kube) -> None:
    for bad in ("", "has space", "line\nbreak", "tab\t", "caf\u00e9"):
        with pytest.raises(ValueError, match="printable ASCII"):
            kube.with_token(bad)
    before = kube.requests
    with pytest.raises(ValueError, match="must not be empty"):
        await check_access(kube, verb="", resource="pods")
    assert kube.requests == before
