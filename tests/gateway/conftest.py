"""Fixtures for gateway tests: a trustme CA, a fake FunctionRuntime, a running gateway.

Test files here share one import namespace (no ``__init__.py``: a ``tests/gateway`` package
would shadow ``src/gateway``), so they have unique basenames (``test_gateway_*.py``) and the
helpers live in ``gwfakes.py``.

``gateway_stack`` starts, on 127.0.0.1 with ephemeral ports: the fake FunctionRuntime
(purerpc) and a gateway whose resolver maps Runtime ``python`` in namespace ``demo`` to it,
and yields a :class:`Stack` with an httpx client that trusts the test CA.
"""

from __future__ import annotations

import functools
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trustme
from gwfakes import FakeFunctionRuntime, serve_fake

from gateway.metrics import GatewayMetrics
from gateway.server import GatewayAddresses, GatewayConfig, serve_gateway
from gateway.targets import StaticResolver, Target, service_dns_name
from krt.api.endpoint import function_endpoint_path

NAMESPACE = "demo"
RUNTIME = "python"
UID = "2c24c1f0-9f8f-4f80-82d5-3dd16a12d1e6"
TOKEN = "sekr1t-token-value"
PATH = function_endpoint_path(NAMESPACE, RUNTIME, UID)


@dataclass
class TLSFiles:
    """A CA and a server certificate for 127.0.0.1/localhost, written to files."""

    ca: trustme.CA
    cert_file: str
    key_file: str

    def client_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context()
        self.ca.configure_trust(context)
        return context


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TLSFiles:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost", "runtime-gateway.kruntimes-system.svc")
    directory = tmp_path_factory.mktemp("gateway-tls")
    cert_file = directory / "tls.crt"
    key_file = directory / "tls.key"
    cert.cert_chain_pems[0].write_to_path(str(cert_file))
    for pem in cert.cert_chain_pems[1:]:
        pem.write_to_path(str(cert_file), append=True)
    cert.private_key_pem.write_to_path(str(key_file))
    return TLSFiles(ca, str(cert_file), str(key_file))


@dataclass
class Stack:
    """A running fake FunctionRuntime and gateway."""

    fake: FakeFunctionRuntime
    addresses: GatewayAddresses
    client: httpx.AsyncClient
    metrics: GatewayMetrics
    tls: TLSFiles
    config: GatewayConfig
    shutdown: trio.Event
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return self.addresses.https + PATH

    def headers(self, **overrides: str | None) -> dict[str, str]:
        """Valid invoke headers, with ``overrides`` (``None`` removes a header)."""
        headers: dict[str, str | None] = {
            "authorization": f"Bearer {TOKEN}",
            "content-type": "application/json",
        }
        headers.update({name.replace("_", "-"): value for name, value in overrides.items()})
        return {name: value for name, value in headers.items() if value is not None}

    async def invoke(self, body: bytes = b'{"x": 1}', **headers: str | None) -> httpx.Response:
        return await self.client.post(self.url, content=body, headers=self.headers(**headers))

    def metric(self, name: str, labels: dict[str, str] | None = None) -> float:
        value = self.metrics.registry.get_sample_value(name, labels or {})
        return 0.0 if value is None else value


StackFactory = Callable[..., Any]


@pytest.fixture
def gateway_stack(tls_files: TLSFiles) -> StackFactory:
    """``async with gateway_stack(**config_overrides) as stack:`` (see :class:`Stack`)."""
    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def start(client_http2: bool = False, **overrides: Any) -> AsyncIterator[Stack]:
        fake = FakeFunctionRuntime()
        async with trio.open_nursery() as nursery:
            port = await nursery.start(serve_fake, fake)
            resolver = StaticResolver(
                {service_dns_name(NAMESPACE, RUNTIME): Target("127.0.0.1", port)}
            )
            settings: dict[str, Any] = {
                "tls_cert_file": tls_files.cert_file,
                "tls_key_file": tls_files.key_file,
                "bind": "127.0.0.1:0",
                "metrics_bind": "127.0.0.1:0",
                "resolver": resolver,
            }
            settings.update(overrides)
            config = GatewayConfig(**settings)
            metrics = GatewayMetrics()
            shutdown = trio.Event()
            addresses = await nursery.start(
                functools.partial(serve_gateway, config, metrics=metrics, shutdown=shutdown)
            )
            async with httpx.AsyncClient(
                verify=tls_files.client_context(), http2=client_http2, timeout=10
            ) as client:
                yield Stack(fake, addresses, client, metrics, tls_files, config, shutdown)
            nursery.cancel_scope.cancel()

    return start


@pytest.fixture
def tmp_dir(tmp_path: Path) -> Path:
    return tmp_path
