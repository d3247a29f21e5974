"""The Service proxy (kube-proxy's job): a TCP listener on every ``clusterIP:port``.

Each accepted connection goes to one ready endpoint of the Service, chosen round-robin per
Service port over the EndpointSlices labelled with the Service's name (endpoints whose
``conditions.ready`` is not False). If connecting to an endpoint fails, the next one is
tried; with none left the client connection is closed. Bytes are copied both ways with
half-close, so gRPC channels and TLS connections work unchanged. Only TCP ports are
proxied; listeners follow Service changes as the informers see them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import trio

from localkube.controllers.endpoints import SERVICE_NAME_LABEL
from localkube.controllers.informer import Informer, ObjectKey
from localkube.controllers.kubeapi import Kube, collection_path

log = logging.getLogger(__name__)

#: Seconds allowed for connecting to one endpoint before trying the next.
CONNECT_SECONDS = 2.0
_BUFFER = 65536

ListenKey = tuple[str, int]


@dataclass(frozen=True)
class Target:
    """What a listener forwards to: a Service (namespace, name) and its port's name."""

    service: ObjectKey
    port_name: str
    port: int


def desired_listeners(services: Sequence[Mapping[str, Any]]) -> dict[ListenKey, Target]:
    """``(clusterIP, port)`` -> target for every TCP port of every Service with a ClusterIP."""
    out: dict[ListenKey, Target] = {}
    for svc in services:
        spec = svc.get("spec", {})
        ip = spec.get("clusterIP")
        if not ip or ip == "None":
            continue
        key = (svc["metadata"].get("namespace", ""), svc["metadata"]["name"])
        for p in spec.get("ports", []) or []:
            if p.get("protocol", "TCP") != "TCP":
                continue
            out[(ip, int(p["port"]))] = Target(key, str(p.get("name", "") or ""), int(p["port"]))
    return out


def ready_backends(target: Target, slices: Sequence[Mapping[str, Any]]) -> list[tuple[str, int]]:
    """``(ip, port)`` of the ready endpoints for ``target``, in a stable order."""
    ns, name = target.service
    out: list[tuple[str, int]] = []
    for s in slices:
        meta = s.get("metadata", {})
        if (
            meta.get("namespace") != ns
            or (meta.get("labels") or {}).get(SERVICE_NAME_LABEL) != name
        ):
            continue
        port = next(
            (
                int(p["port"])
                for p in s.get("ports") or []
                if str(p.get("name", "") or "") == target.port_name and p.get("port") is not None
            ),
            None,
        )
        if port is None:
            continue
        for ep in s.get("endpoints") or []:
            if (ep.get("conditions") or {}).get("ready") is False:
                continue
            for addr in ep.get("addresses") or []:
                out.append((addr, port))
    return sorted(set(out))


async def _copy(src: trio.SocketStream, dst: trio.SocketStream, pair: trio.CancelScope) -> None:
    """Copy ``src`` to ``dst``; a clean EOF is passed on as a half-close.

    A broken side (a reset, as when a backend process is killed) ends the whole connection
    pair through ``pair``, so the other side is closed too and its peer sees the connection
    end instead of waiting for an answer forever.
    """
    try:
        while data := await src.receive_some(_BUFFER):
            await dst.send_all(data)
        await dst.send_eof()
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        pair.cancel()


class ServiceProxy:
    """Listeners for every Service port. Use :meth:`run`."""

    def __init__(self, kube: Kube) -> None:
        self.services = Informer(kube, collection_path("v1", "services"), name="proxy/services")
        self.slices = Informer(
            kube, collection_path("discovery.k8s.io/v1", "endpointslices"), name="proxy/slices"
        )
        self.targets: dict[ListenKey, Target] = {}
        self._scopes: dict[ListenKey, trio.CancelScope] = {}
        self._rr: dict[tuple[ObjectKey, str], int] = {}
        self._changed = trio.Event()

    def pick_order(self, target: Target) -> list[tuple[str, int]]:
        """The ready backends, rotated round-robin for the next connection."""
        backends = ready_backends(target, self.slices.items())
        if not backends:
            return []
        key = (target.service, target.port_name)
        start = self._rr.get(key, 0) % len(backends)
        self._rr[key] = start + 1
        return backends[start:] + backends[:start]

    async def _handle(self, client: trio.SocketStream, listen: ListenKey) -> None:
        async with client:
            target = self.targets.get(listen)
            if target is None:
                return
            for ip, port in self.pick_order(target):
                with trio.move_on_after(CONNECT_SECONDS):
                    try:
                        upstream = await trio.open_tcp_stream(ip, port)
                    except OSError:
                        continue
                    break
            else:
                log.info(
                    "service %s/%s:%s has no reachable ready endpoint", *target.service, target.port
                )
                return
            async with upstream:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(_copy, client, upstream, nursery.cancel_scope)
                    nursery.start_soon(_copy, upstream, client, nursery.cancel_scope)

    async def _listen(
        self, listen: ListenKey, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        ip, port = listen
        while True:
            try:
                listeners = await trio.open_tcp_listeners(port, host=ip)
            except OSError as exc:
                log.warning("proxy: cannot listen on %s:%s: %s (retrying)", ip, port, exc)
                task_status.started()
                task_status = trio.TASK_STATUS_IGNORED
                await trio.sleep(2.0)
                continue
            break
        task_status.started()

        async def handler(stream: trio.SocketStream) -> None:
            await self._handle(stream, listen)

        await trio.serve_listeners(handler, listeners)

    def _on_change(self, _etype: str, _obj: dict[str, Any]) -> None:
        self._changed.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Follow Services and EndpointSlices; never returns unless cancelled.

        ``task_status.started()`` once listeners exist for the Services of the first list.
        """
        async with trio.open_nursery() as nursery:
            await nursery.start(self.slices.run)
            self.services.add_handler(self._on_change)
            await nursery.start(self.services.run)
            started = False
            while True:
                self._changed = trio.Event()
                wanted = desired_listeners(self.services.items())
                self.targets = wanted
                for key in set(self._scopes) - set(wanted):
                    self._scopes.pop(key).cancel()
                for key in set(wanted) - set(self._scopes):
                    scope = trio.CancelScope()
                    self._scopes[key] = scope
                    await nursery.start(self._scoped_listen, key, scope)
                if not started:
                    task_status.started()
                    started = True
                await self._changed.wait()

    async def _scoped_listen(
        self,
        key: ListenKey,
        scope: trio.CancelScope,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        with scope:
            await self._listen(key, task_status=task_status)


async def serve_proxy(
    kube: Kube, *, task_status: trio.TaskStatus[ServiceProxy] = trio.TASK_STATUS_IGNORED
) -> None:
    """Run the Service proxy until cancelled; started with the :class:`ServiceProxy`."""
    proxy = ServiceProxy(kube)
    async with trio.open_nursery() as nursery:
        await nursery.start(proxy.run)
        task_status.started(proxy)
