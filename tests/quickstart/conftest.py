"""Fixtures of the quick-start tests: an in-memory localkube API server and an admin client."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from krt.kube.client import Kube, connect
from localkube.apiserver import ApiServerConfig, ApiServerHandle, running_apiserver


@pytest.fixture
async def kube() -> AsyncIterator[Kube]:
    """An admin client of a fresh in-memory API server (no controllers, no node)."""
    handle: ApiServerHandle
    async with running_apiserver(ApiServerConfig(bookmark_interval=0.5)) as handle:
        client = await connect(kubeconfig=handle.kubeconfig_path)
        async with client:
            yield client
