"""Where a Runtime's invokes go: the Runtime's Service on runtimed's gRPC port.

Seed 000, Runtime Gateway: the gateway "calls the Kubernetes Service for that Runtime on its
dedicated gRPC port". The Service name and port come from :mod:`krt.api.naming` (the
controller creates the Service under that name), so the gateway never reads the Kubernetes
API to route.

Turning the Service name into an address is pluggable, because the gateway runs both on
Kubernetes (cluster DNS resolves ``<service>.<namespace>.svc``) and on localkube (no cluster
DNS: ``$KRT_HOSTS_FILE`` maps Service names to ClusterIPs, docs/localkube.md "Service
names"), and tests point a Runtime at a fake server on an ephemeral port:

* :class:`DnsResolver` (default): connect to ``<service>.<namespace>.svc:9090`` and let the
  system resolver do the rest;
* :class:`HostsFileResolver`: look the name up in a hosts(5) file re-read on every
  (re)connect, falling back to the DNS name when absent;
* :class:`StaticResolver`: explicit ``name=host:port`` overrides (``--target``), in front of
  another resolver.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

import trio

from krt.api.naming import RUNTIMED_GRPC_PORT, runtime_service_name

log = logging.getLogger("gateway.targets")


@dataclass(frozen=True, slots=True)
class Target:
    """A network address to dial: host (name or IP literal), TCP port, and TLS name.

    Attributes:
        host: what to connect to.
        port: TCP port.
        server_name: the name runtimed's certificate must carry when TLS is on; the
            Service DNS name even when ``host`` is an address from a hosts file (``None``:
            ``host``).
    """

    host: str
    port: int
    server_name: str | None = field(default=None, compare=False)

    @property
    def authority(self) -> str:
        """``host:port`` as used in the HTTP/2 ``:authority`` header (IPv6 in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def service_dns_name(namespace: str, runtime: str) -> str:
    """The Runtime's Service name as the gateway resolves it: ``<service>.<namespace>.svc``.

    Args:
        namespace: the Run's (and Runtime's) namespace.
        runtime: the Runtime's name.
    """
    return f"{runtime_service_name(runtime)}.{namespace}.svc"


class Resolver(Protocol):
    """Turns the Runtime addressed by an invoke path into an address to dial."""

    async def resolve(self, namespace: str, runtime: str) -> Target:
        """Return the address of the Runtime's Service gRPC port.

        Raises:
            OSError: the name cannot be looked up (the caller answers 503).
        """
        ...


class DnsResolver:
    """``<service>.<namespace>.svc`` on runtimed's gRPC port; the OS resolver does the rest.

    Args:
        port: the gRPC port (default :data:`~krt.api.naming.RUNTIMED_GRPC_PORT`).
    """

    def __init__(self, *, port: int = RUNTIMED_GRPC_PORT) -> None:
        self._port = port

    async def resolve(self, namespace: str, runtime: str) -> Target:
        """Return ``Target(<service>.<namespace>.svc, port)`` (no I/O)."""
        name = service_dns_name(namespace, runtime)
        return Target(name, self._port, server_name=name)


def parse_hosts(text: str) -> dict[str, str]:
    """Parse hosts(5) text into ``name -> address`` (the first mapping of a name wins).

    Args:
        text: lines of ``address name [alias...]``; ``#`` starts a comment.
    """
    table: dict[str, str] = {}
    for line in text.splitlines():
        fields = line.split("#", 1)[0].split()
        if len(fields) < 2:
            continue
        address, *names = fields
        for name in names:
            table.setdefault(name.lower(), address)
    return table


class HostsFileResolver:
    """Resolve Service names through a hosts(5) file (localkube's ``$KRT_HOSTS_FILE``).

    The file is read on every resolve, which happens only when a connection to a Runtime is
    (re)opened, so a Service that appears or changes its ClusterIP is picked up.

    Args:
        path: the hosts file.
        port: the gRPC port.
    """

    def __init__(self, path: str, *, port: int = RUNTIMED_GRPC_PORT) -> None:
        self._path = trio.Path(path)
        self._port = port

    async def resolve(self, namespace: str, runtime: str) -> Target:
        """Return the mapped address, or the DNS name when the file has no entry.

        Raises:
            OSError: the hosts file cannot be read.
        """
        name = service_dns_name(namespace, runtime)
        table = parse_hosts(await self._path.read_text(encoding="utf-8"))
        address = table.get(name) or table.get(f"{name}.cluster.local")
        return Target(address or name, self._port, server_name=name)


def parse_target_override(text: str) -> tuple[str, Target]:
    """Parse one ``--target`` value: ``<service>.<namespace>.svc=HOST:PORT``.

    Returns:
        ``(name, target)``.

    Raises:
        ValueError: no ``=``, no port, or a port outside 1..65535 (message names the value).
    """
    name, sep, address = text.partition("=")
    host, colon, port_text = address.rpartition(":")
    if not sep or not name or not colon or not host:
        raise ValueError(f"target {text!r} is not NAME=HOST:PORT")
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"target {text!r}: port must be 1..65535")
    return name.strip().lower(), Target(host.strip("[]"), int(port_text))


class StaticResolver:
    """Fixed overrides by Service DNS name, then another resolver.

    Args:
        overrides: ``<service>.<namespace>.svc`` -> address.
        fallback: resolver for names without an override (``None``: DNS).
    """

    def __init__(self, overrides: Mapping[str, Target], fallback: Resolver | None = None) -> None:
        self._overrides = {name.lower(): target for name, target in overrides.items()}
        self._fallback = fallback or DnsResolver()

    async def resolve(self, namespace: str, runtime: str) -> Target:
        """Return the override for the Service name, else ask the fallback."""
        name = service_dns_name(namespace, runtime)
        target = self._overrides.get(name)
        if target is not None:
            return Target(target.host, target.port, server_name=target.server_name or name)
        return await self._fallback.resolve(namespace, runtime)
