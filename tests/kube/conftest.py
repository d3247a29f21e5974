"""Fixtures for the krt.kube tests: a localkube API server and a connected :class:`Kube`.

* ``apiserver``: a fresh in-memory localkube API server (port 0), its handle.
* ``start_kube``: ``start_kube(**ApiServerConfig fields)``, a context manager giving a client
  of its own server (for a small watch history, for example).
* ``kube``: :func:`krt.kube.client.connect` bound to ``apiserver``'s kubeconfig.
* ``widgets``: installs a small namespaced test CRD (``widgets.test.kruntimes.io``) with a
  status subresource and returns its :class:`ResourceRef`; tests use it where the object's
  schema does not matter, so they do not depend on the Run schema.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import pytest
import trio

from krt.kube.client import Kube, connect
from krt.kube.errors import NotFound
from krt.kube.resources import SERVICEACCOUNTS, ResourceRef
from localkube.apiserver import ApiServerConfig, ApiServerHandle, running_apiserver

CRDS = ResourceRef(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", False, "CustomResourceDefinition"
)
WIDGETS = ResourceRef("test.kruntimes.io", "v1", "widgets", True, "Widget")


@pytest.fixture
async def apiserver() -> AsyncIterator[ApiServerHandle]:
    """A fresh in-memory API server; 0.2 s bookmarks so watch tests see them quickly."""
    async with running_apiserver(ApiServerConfig(bookmark_interval=0.2)) as handle:
        yield handle


@pytest.fixture
async def kube(apiserver: ApiServerHandle) -> AsyncIterator[Kube]:
    """A client connected to ``apiserver`` as the admin."""
    client = await connect(kubeconfig=apiserver.kubeconfig_path)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
def start_kube() -> Callable[..., AbstractAsyncContextManager[Kube]]:
    """``start_kube(**ApiServerConfig fields)``: own API server + client, as a context."""

    @asynccontextmanager
    async def start(**config: Any) -> AsyncIterator[Kube]:
        async with running_apiserver(ApiServerConfig(**config)) as handle:
            client = await connect(kubeconfig=handle.kubeconfig_path)
            try:
                yield client
            finally:
                await client.aclose()

    return start


def widget_crd() -> dict[str, Any]:
    """A permissive namespaced CRD with the status subresource."""
    return {
        "metadata": {"name": "widgets.test.kruntimes.io"},
        "spec": {
            "group": "test.kruntimes.io",
            "scope": "Namespaced",
            "names": {
                "plural": "widgets",
                "singular": "widget",
                "kind": "Widget",
                "listKind": "WidgetList",
            },
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


async def install_widgets(kube: Kube) -> ResourceRef:
    """Install the Widget CRD through ``kube`` and wait until it is served."""
    await kube.create(CRDS, widget_crd())
    with trio.fail_after(10):
        while True:
            try:
                await kube.list(WIDGETS, "default")
                return WIDGETS
            except NotFound:
                await trio.sleep(0.01)


@pytest.fixture
async def widgets(kube: Kube) -> ResourceRef:
    """The Widget CRD, installed and served."""
    return await install_widgets(kube)


async def service_account_token(kube: Kube, name: str, namespace: str = "default") -> str:
    """Create ServiceAccount ``name`` and return a bearer token for it (TokenRequest)."""
    await kube.create(SERVICEACCOUNTS, {"metadata": {"name": name, "namespace": namespace}})
    answer = await kube.request(
        "POST",
        SERVICEACCOUNTS,
        namespace=namespace,
        name=name,
        subresource="token",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    return str(answer["status"]["token"])


async def eventually(predicate: Callable[[], bool], *, seconds: float = 5.0) -> None:
    """Poll ``predicate`` (a counter or flag with no event to wait on) until true.

    Raises:
        trio.TooSlowError: still false after ``seconds``.
    """
    with trio.fail_after(seconds):
        while not predicate():  # noqa: ASYNC110 - the observed objects have no events
            await trio.sleep(0.01)


def widget(name: str, namespace: str = "default", **spec: Any) -> dict[str, Any]:
    """A Widget manifest."""
    return {"metadata": {"name": name, "namespace": namespace}, "spec": dict(spec)}
