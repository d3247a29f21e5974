"""Gateway answers that tell a client what to do: a missing Runtime, a restarting runtimed.

* F10: an invoke URL naming a Runtime (or namespace) whose Service name does not exist
  (``EAI_NONAME``) is a 404 ``FunctionNotFound`` (stop retrying), while a temporary resolver
  failure (``EAI_AGAIN``) stays a 503 ``RuntimeUnreachable`` + ``Retry-After``.
* F11: a TLS handshake the peer cuts short (EOF or reset: a Service address with nothing
  serving behind it yet) reads "the connection closed before the TLS handshake completed
  (is runtimed restarting? ...)", not "TLS handshake failed", which troubleshooting.md
  reserves for certificate problems.
"""

from __future__ import annotations

import functools
import socket
import ssl
import struct
from pathlib import Path
from typing import Any

import pytest
import trio
from conftest import NAMESPACE, RUNTIME, StackFactory

from gateway.pool import ConnectFailedError, PoolKey, ServiceNotFoundError, open_channel_pool
from gateway.targets import DnsResolver, HostsFileResolver, StaticResolver, Target

SERVICE = "executor.v1.FunctionRuntime"


class FakeHostnames(trio.abc.HostnameResolver):
    """trio's resolver for this test run: ``failures`` maps a name to a gaierror code."""

    def __init__(self, failures: dict[str, int]) -> None:
        self.failures = failures
        self.asked: list[str] = []

    async def getaddrinfo(
        self,
        host: bytes | None,
        port: bytes | str | int | None,
        family: int = 0,
        type: int = 0,
        proto: int = 0,
        flags: int = 0,
    ) -> list[Any]:
        name = (host or b"").decode()
        self.asked.append(name)
        await trio.lowlevel.checkpoint()
        if name in self.failures:
            code = self.failures[name]
            raise socket.gaierror(code, "name or service not known" if code else "?")
        return socket.getaddrinfo(name, port, family, type, proto, flags)

    async def getnameinfo(self, sockaddr: Any, flags: int) -> tuple[str, str]:
        raise NotImplementedError


def error_body(response: Any) -> dict[str, object]:
    error = response.json()["error"]
    assert isinstance(error, dict)
    return error


async def test_a_runtime_whose_service_name_does_not_exist_is_404(
    gateway_stack: StackFactory,
) -> None:
    name = f"runtime-{RUNTIME}.{NAMESPACE}.svc"
    fake = FakeHostnames({name: socket.EAI_NONAME})
    trio.socket.set_custom_hostname_resolver(fake)
    async with gateway_stack(resolver=DnsResolver(port=9090)) as stack:
        response = await stack.invoke()
    assert name in fake.asked
    assert response.status_code == 404
    assert "retry-after" not in response.headers
    error = error_body(response)
    assert error["reason"] == "FunctionNotFound"
    assert error["message"] == (
        f"no Runtime {RUNTIME!r} in namespace {NAMESPACE} (Service {name} does not resolve)"
    )


async def test_on_localkube_a_name_missing_from_the_hosts_file_is_404(tmp_path: Path) -> None:
    """localkube: no entry in ``$KRT_HOSTS_FILE`` falls back to DNS, which says NXDOMAIN."""
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.9 runtime-python.demo.svc\n")
    trio.socket.set_custom_hostname_resolver(
        FakeHostnames({"runtime-nosuch.demo.svc": socket.EAI_NONAME})
    )
    async with open_channel_pool(HostsFileResolver(str(hosts))) as pool:
        with pytest.raises(ServiceNotFoundError) as failed:
            await pool.unary_call(PoolKey("demo", "nosuch"), SERVICE, "InvokeFunction", b"")
    assert str(failed.value) == "Service runtime-nosuch.demo.svc does not resolve"


async def test_a_temporary_resolver_failure_stays_503_with_retry_after(
    gateway_stack: StackFactory,
) -> None:
    name = f"runtime-{RUNTIME}.{NAMESPACE}.svc"
    trio.socket.set_custom_hostname_resolver(FakeHostnames({name: socket.EAI_AGAIN}))
    async with gateway_stack(resolver=DnsResolver(port=9090)) as stack:
        response = await stack.invoke()
    assert response.status_code == 503
    assert response.headers["retry-after"] == "1"
    assert error_body(response)["reason"] == "RuntimeUnreachable"


async def test_a_target_override_that_does_not_resolve_is_no_404() -> None:
    """``--target`` names another host: its NXDOMAIN says nothing about the Runtime."""
    trio.socket.set_custom_hostname_resolver(FakeHostnames({"typo.example": socket.EAI_NONAME}))
    resolver = StaticResolver({"runtime-py.ns.svc": Target("typo.example", 9090)})
    async with open_channel_pool(resolver) as pool:
        with pytest.raises(ConnectFailedError) as failed:
            await pool.unary_call(PoolKey("ns", "py"), SERVICE, "InvokeFunction", b"")
    assert not isinstance(failed.value, ServiceNotFoundError)


async def close_at_once(stream: trio.SocketStream) -> None:
    """Accept TCP, then close without a word (a Service proxy with no backend yet)."""
    await stream.receive_some(65536)
    await stream.aclose()


async def reset_at_once(stream: trio.SocketStream) -> None:
    """Accept TCP, read the ClientHello, then reset (a runtimed killed mid-handshake)."""
    await stream.receive_some(65536)
    stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    stream.socket.close()


@pytest.mark.parametrize("handler", [close_at_once, reset_at_once])
async def test_a_handshake_cut_short_points_at_a_restarting_runtimed(handler: Any) -> None:
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            functools.partial(trio.serve_tcp, handler, 0, host="127.0.0.1")
        )
        port = listeners[0].socket.getsockname()[1]
        resolver = StaticResolver({"runtime-py.ns.svc": Target("127.0.0.1", port)})
        async with open_channel_pool(resolver, ssl_context=ssl.create_default_context()) as pool:
            with pytest.raises(ConnectFailedError) as failed:
                await pool.unary_call(PoolKey("ns", "py"), SERVICE, "InvokeFunction", b"")
        nursery.cancel_scope.cancel()
    assert str(failed.value) == (
        f"cannot connect to the Service of Runtime ns/py at 127.0.0.1:{port}: the connection "
        "closed before the TLS handshake completed (is runtimed restarting? "
        "kubectl get pods -n ns -l kruntimes.io/runtime=py)"
    )
