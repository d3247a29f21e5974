"""Which bearer token ``krt invoke`` sends (seed 000, Authentication and Authorization).

A kubeconfig without a bearer token (client certificates) is simulated by clearing the
token kr8s loaded after connecting: the session still authenticates (as the admin), but
:func:`krt.cli.credentials.kubeconfig_token` sees none, which is the case under test.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio
import yaml

from krt.cli.credentials import (
    SELFSUBJECTREVIEWS,
    ServiceAccountRef,
    invoke_token,
    parse_service_account,
)
from krt.cli.exitcodes import ExitCode
from krt.cli.failures import CommandFailed
from krt.kube.client import Kube, connect
from krt.kube.resources import ROLEBINDINGS, ROLES, SERVICEACCOUNTS
from localkube.apiserver import ApiServerHandle

from .conftest import NS


async def whoami(apiserver: ApiServerHandle, token: str, tmp: Path) -> str:
    config = yaml.safe_load(await trio.Path(apiserver.kubeconfig_path).read_text())
    config["users"][0]["user"] = {"token": token}
    path = tmp / f"kubeconfig-{token[-8:]}"
    await trio.Path(path).write_text(yaml.safe_dump(config))
    async with await connect(kubeconfig=path) as client:
        review = await client.request(
            "POST", SELFSUBJECTREVIEWS, body={"kind": "SelfSubjectReview"}
        )
    return str(review["status"]["userInfo"]["username"])


@pytest.fixture
async def invoker(kube: Kube) -> ServiceAccountRef:
    """ServiceAccount default/invoker."""
    await kube.create(SERVICEACCOUNTS, {"metadata": {"name": "invoker", "namespace": NS}})
    return ServiceAccountRef(NS, "invoker")


async def test_the_kubeconfig_token_is_used_when_there_is_one(
    kube: Kube, apiserver: ApiServerHandle
) -> None:
    assert await invoke_token(kube, service_account=None) == apiserver.admin_token


async def test_a_given_service_account_is_used_even_when_the_kubeconfig_has_a_token(
    kube: Kube, apiserver: ApiServerHandle, invoker: ServiceAccountRef, tmp_path: Path
) -> None:
    """F8: --service-account was silently ignored when the kubeconfig had a token."""
    token = await invoke_token(kube, service_account=invoker)
    assert token != apiserver.admin_token
    assert await whoami(apiserver, token, tmp_path) == "system:serviceaccount:default:invoker"


async def test_an_unknown_service_account_fails_even_with_a_kubeconfig_token(kube: Kube) -> None:
    """F8: an explicit identity applies or the command fails (like kubectl --as)."""
    with pytest.raises(CommandFailed) as caught:
        await invoke_token(kube, service_account=ServiceAccountRef(NS, "nosuch"))
    assert caught.value.code is ExitCode.NOT_FOUND
    assert "ServiceAccount default/nosuch" in caught.value.message


async def test_a_bare_service_account_name_is_in_the_commands_namespace(
    kube: Kube, apiserver: ApiServerHandle, invoker: ServiceAccountRef, tmp_path: Path
) -> None:
    """F7: NAME without -n is in the command's namespace (the context's, else default)."""
    assert kube.namespace == NS
    token = await invoke_token(kube, service_account=parse_service_account("invoker"))
    assert await whoami(apiserver, token, tmp_path) == "system:serviceaccount:default:invoker"


async def test_without_a_token_a_token_request_for_the_given_service_account(
    kube: Kube, apiserver: ApiServerHandle, invoker: ServiceAccountRef, tmp_path: Path
) -> None:
    kube.api.auth.token = None
    token = await invoke_token(kube, service_account=invoker)
    assert token != apiserver.admin_token
    assert await whoami(apiserver, token, tmp_path) == "system:serviceaccount:default:invoker"


async def test_without_a_token_or_service_account_the_error_says_what_to_do(kube: Kube) -> None:
    kube.api.auth.token = None
    with pytest.raises(CommandFailed) as caught:
        await invoke_token(kube, service_account=None)
    assert caught.value.code is ExitCode.UNAUTHENTICATED
    assert "--service-account" in caught.value.message


async def test_an_unknown_service_account_is_not_found(kube: Kube) -> None:
    kube.api.auth.token = None
    with pytest.raises(CommandFailed) as caught:
        await invoke_token(kube, service_account=ServiceAccountRef(NS, "ghost"))
    assert caught.value.code is ExitCode.NOT_FOUND
    assert "default/ghost" in caught.value.message


@pytest.fixture
async def service_account_kube(
    kube: Kube, apiserver: ApiServerHandle, invoker: ServiceAccountRef, tmp_path: Path
) -> AsyncIterator[Kube]:
    """A client authenticated as default/invoker, allowed to request its own tokens."""
    await kube.create(
        ROLES,
        {
            "metadata": {"name": "self-token", "namespace": NS},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["serviceaccounts/token"],
                    "resourceNames": ["invoker"],
                    "verbs": ["create"],
                }
            ],
        },
    )
    await kube.create(
        ROLEBINDINGS,
        {
            "metadata": {"name": "self-token", "namespace": NS},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "self-token",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "invoker", "namespace": NS}],
        },
    )
    answer = await kube.request(
        "POST",
        SERVICEACCOUNTS,
        namespace=NS,
        name="invoker",
        subresource="token",
        body={"spec": {}},
    )
    config = yaml.safe_load(await trio.Path(apiserver.kubeconfig_path).read_text())
    config["users"][0]["user"] = {"token": answer["status"]["token"]}
    path = tmp_path / "sa-kubeconfig"
    await trio.Path(path).write_text(yaml.safe_dump(config))
    async with await connect(kubeconfig=path) as client:
        yield client


async def test_without_a_token_the_current_service_account_is_found_by_self_subject_review(
    service_account_kube: Kube, apiserver: ApiServerHandle, tmp_path: Path
) -> None:
    service_account_kube.api.auth.token = None
    token = await invoke_token(service_account_kube, service_account=None)
    assert await whoami(apiserver, token, tmp_path) == "system:serviceaccount:default:invoker"


def test_parse_service_account() -> None:
    assert parse_service_account("a", "ns") == ServiceAccountRef("ns", "a")
    assert parse_service_account("x/a", "ns") == ServiceAccountRef("x", "a")
    assert parse_service_account("system:serviceaccount:x:a", "") == ServiceAccountRef("x", "a")
    with pytest.raises(ValueError, match="NAMESPACE/NAME"):
        parse_service_account("x/", "ns")


def test_a_bare_name_without_a_namespace_yet_is_filled_in_once_connected() -> None:
    """F7: without -n the namespace is only known after connecting (the context's)."""
    bare = parse_service_account("a")
    assert bare == ServiceAccountRef("", "a")
    assert bare.in_namespace("team") == ServiceAccountRef("team", "a")
    assert ServiceAccountRef("x", "a").in_namespace("team") == ServiceAccountRef("x", "a")
    for text in ("", "/a", "system:serviceaccount::a", "system:serviceaccount:x:"):
        with pytest.raises(ValueError, match="NAMESPACE/NAME"):
            parse_service_account(text)
