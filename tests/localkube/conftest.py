"""Shared fixtures for localkube tests (and for any test that needs a Kubernetes API).

Fixtures:

* ``apiserver``: a fresh in-memory localkube API server on 127.0.0.1, port 0, yielding its
  :class:`localkube.apiserver.ApiServerHandle` (``url``, ``kubeconfig_path``, ``ca_pem``,
  ``admin_token``). Stopped after the test.
* ``start_apiserver``: a factory ``start_apiserver(config) -> async context manager`` for
  tests that need their own config (a state directory, a short bookmark interval) or two
  servers one after the other.
* ``kr8s_api``: a ``kr8s.asyncio`` API object on trio bound to ``apiserver``'s kubeconfig.
* ``admin_http``: an ``httpx.AsyncClient`` with the admin token and the cluster CA, base URL
  the server (for raw REST calls kr8s does not expose).
* :func:`client_for` (helper): an httpx client for a handle with any bearer token.
* :func:`watch_until` (helper): wait for a condition on one object through a watch (for
  effects of the in-process controllers: garbage collection, namespace cleanup).
* ``kubectl``: an async ``kubectl(*args, input=None, check=True, token=None)`` runner bound
  to the ``apiserver`` kubeconfig, returning ``subprocess.CompletedProcess[str]``; the test
  is skipped with a printed reason when kubectl is not installed.

All fixtures are function-scoped: every test gets a clean cluster (start-up takes about
0.1 s in memory).
"""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from localkube.apiserver import ApiServerConfig, ApiServerHandle, running_apiserver

KUBECTL = shutil.which("kubectl")

KubectlRunner = Callable[..., Awaitable["subprocess.CompletedProcess[str]"]]


@pytest.fixture
async def apiserver() -> AsyncIterator[ApiServerHandle]:
    """A fresh in-memory API server (port 0); yields its handle."""
    async with running_apiserver(ApiServerConfig()) as handle:
        yield handle


@pytest.fixture
def start_apiserver() -> Callable[[ApiServerConfig], AbstractAsyncContextManager[ApiServerHandle]]:
    """Return ``running_apiserver`` for tests that choose their own ``ApiServerConfig``."""
    return running_apiserver


@pytest.fixture
async def kr8s_api(apiserver: ApiServerHandle) -> AsyncIterator[Any]:
    """A ``kr8s.asyncio`` API client on trio bound to ``apiserver``'s kubeconfig.

    Through :func:`krt.kube.kr8s_auth.private_api`: kr8s's own loading writes the
    kubeconfig's CA to a temporary file it never deletes (one per test otherwise).
    """
    from krt.kube.kr8s_auth import private_api

    api = await private_api(kubeconfig=str(apiserver.kubeconfig_path))
    try:
        yield api
    finally:
        session = getattr(api, "_session", None)
        if session is not None:
            await session.aclose()


def client_for(handle: ApiServerHandle, token: str | None = None) -> httpx.AsyncClient:
    """Return an httpx client trusting the cluster CA, with ``token`` (default: admin)."""
    context = ssl.create_default_context(cadata=handle.ca_pem.decode())
    return httpx.AsyncClient(
        base_url=handle.url,
        verify=context,
        headers={"Authorization": f"Bearer {token or handle.admin_token}"},
        timeout=10.0,
    )


@pytest.fixture
async def admin_http(apiserver: ApiServerHandle) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client for raw REST calls as the admin."""
    async with client_for(apiserver) as client:
        yield client


@pytest.fixture
def kubectl(apiserver: ApiServerHandle, tmp_path: Path) -> KubectlRunner:
    """An async runner for ``kubectl --kubeconfig <apiserver kubeconfig> ...``.

    Each test gets its own ``--cache-dir``, so discovery cached for another server that
    happened to use the same port is never read.
    """
    if KUBECTL is None:
        print("SKIP: kubectl is not installed; the kubectl acceptance tests need it")
        pytest.skip("kubectl is not installed")
    kubectl_path = KUBECTL

    async def run(
        *args: str, input: str | None = None, check: bool = True, token: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        argv = [
            kubectl_path,
            "--kubeconfig",
            str(apiserver.kubeconfig_path),
            "--cache-dir",
            str(tmp_path / "kubectl-cache"),
        ]
        if token is not None:
            argv += ["--token", token]
        argv += list(args)
        with trio.fail_after(30):
            done = await trio.run_process(
                argv,
                stdin=input.encode() if input is not None else b"",
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
        result = subprocess.CompletedProcess(
            argv, done.returncode, done.stdout.decode(), done.stderr.decode()
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} failed ({result.returncode}):\n{result.stderr}"
            )
        return result

    return run


async def watch_until(
    client: httpx.AsyncClient,
    collection: str,
    name: str,
    predicate: Callable[[dict[str, Any] | None], bool],
) -> dict[str, Any] | None:
    """Wait (list, then watch) until ``predicate(object or None)`` holds for one object.

    Args:
        client: an authenticated client. collection: e.g.
            ``/api/v1/namespaces/default/configmaps``. name: the object's name.
        predicate: called with the object, or None once it is deleted.

    Returns:
        The object (None if deleted) that satisfied ``predicate``. Callers bound the wait
        with ``trio.fail_after``.
    """
    selector = {"fieldSelector": f"metadata.name={name}"}
    listing = (await client.get(collection, params=selector)).json()
    current = listing["items"][0] if listing["items"] else None
    if predicate(current):
        return current
    params = {
        **selector,
        "watch": "true",
        "resourceVersion": listing["metadata"]["resourceVersion"],
    }
    async with client.stream("GET", collection, params=params) as response:
        async for line in response.aiter_lines():
            if not line:
                continue
            event = json.loads(line)
            current = None if event["type"] == "DELETED" else event["object"]
            if predicate(current):
                return current
    raise AssertionError(f"watch of {collection}/{name} ended before the condition held")
