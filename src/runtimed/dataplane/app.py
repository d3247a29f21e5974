"""``serve_dataplane``: the invoke proxy's nursery subtree inside runtimed.

Start-up order (each step started with ``nursery.start``):

1. the ownership cache hooks onto the daemon's Run informer (handler added and the current
   items loaded in one synchronous step, so no event is missed) and an informer of the
   Runtime's Pods (label ``kruntimes.io/runtime=<runtime>``) is started and synced; the
   cache is then marked synced;
2. the outgoing channels: plaintext to the local Runtime Server, mutual TLS to peers (its
   material reloaded when the mounted Secret's files change: ``watch_peer_tls``);
3. the Service-port listener (``RUNTIMED_PORT``), ``task_status.started(port)``.

Nothing here reads the Kubernetes API on the invoke path: the informers fill the cache in the
background; SelfSubjectAccessReviews are made only on authorization cache misses.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import trio
from prometheus_client import CollectorRegistry

from krt.api.constants import RUNTIME_LABEL
from krt.api.naming import RUNTIMED_GRPC_PORT
from krt.kube.client import Kube
from krt.kube.clock import Clock
from krt.kube.informer import Informer
from krt.kube.resources import PODS
from runtimed.dataplane.authz import AuthzCache, KubeReviewer
from runtimed.dataplane.channels import open_channels
from runtimed.dataplane.metrics import DataplaneMetrics
from runtimed.dataplane.ownership import OwnershipCache
from runtimed.dataplane.peer import await_peer_tls, load_peer_tls, watch_peer_tls
from runtimed.dataplane.proxy import InvokeProxy, ProxyIdentity, Registrations
from runtimed.dataplane.server import serve_grpc
from runtimed.identity import PodIdentity

__all__ = ["DataplaneSettings", "serve_dataplane"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DataplaneSettings:
    """Configuration of the Service port.

    Attributes:
        host: address to bind (the Pod IP, or "" for every interface).
        port: runtimed's gRPC Service port (``RUNTIMED_PORT``; 0 picks one in tests).
        peer_tls_dir: directory with ``tls.crt``, ``tls.key``, ``ca.crt`` (mounted Secret),
            or ``None``: plaintext port and no peer hops.
        awaited_peer_tls_dir: with ``peer_tls_dir`` ``None``, the peer TLS directory that
            was empty at start (the optional Secret did not exist yet): once it holds
            usable material, :class:`~runtimed.dataplane.peer.PeerTLSAppeared` stops
            runtimed so that its container restarts serving TLS.
    """

    host: str = ""
    port: int = RUNTIMED_GRPC_PORT
    peer_tls_dir: Path | None = None
    awaited_peer_tls_dir: Path | None = None


async def serve_dataplane(
    settings: DataplaneSettings,
    *,
    kube: Kube,
    runs: Informer,
    pod: PodIdentity,
    registrations: Registrations,
    server_host: str,
    server_port: int,
    clock: Clock,
    metrics_registry: CollectorRegistry | None = None,
    task_status: trio.TaskStatus[InvokeProxy] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run the invoke proxy until cancelled.

    Args:
        settings: the port and peer TLS material.
        kube: runtimed's API client (Pods informer; SSAR views as the caller).
        runs: the daemon's Run informer of this namespace (shared).
        pod: this Pod (UID, namespace, Runtime name).
        registrations: the function registry (``runtimed.functions.registry``).
        server_host, server_port: the local Runtime Server.
        clock: wall clock (token expiry).
        metrics_registry: runtimed's registry for the proxy's metrics.
        task_status: ``started(proxy)`` once listening (``proxy.port`` is the bound port).

    Raises:
        PeerTLSError: ``settings.peer_tls_dir`` is incomplete or unusable.
        OSError: the port cannot be bound.
    """
    tls = load_peer_tls(settings.peer_tls_dir) if settings.peer_tls_dir is not None else None
    if tls is None:
        log.warning("no --peer-tls-dir: the Service port is plaintext and peer hops are off")
    metrics = DataplaneMetrics(metrics_registry)
    cache = OwnershipCache(runtime=pod.runtime)
    runs.add_handler(cache.on_run_event)
    cache.load_runs(runs.items())
    pods = Informer(
        kube, PODS, namespace=pod.namespace, label_selector=f"{RUNTIME_LABEL}={pod.runtime}"
    )
    pods.add_handler(cache.on_pod_event)
    authz = AuthzCache(
        KubeReviewer(kube),
        clock=clock,
        on_lookup=metrics.authz_lookup,
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(pods.run)
        if tls is not None and settings.peer_tls_dir is not None:
            nursery.start_soon(watch_peer_tls, tls, settings.peer_tls_dir)
        elif settings.awaited_peer_tls_dir is not None:
            nursery.start_soon(await_peer_tls, settings.awaited_peer_tls_dir)
        await runs.wait_synced()
        cache.mark_synced()
        async with (
            open_channels() as local,
            open_channels(ssl_context=tls.client if tls is not None else None) as peers,
        ):
            proxy = InvokeProxy(
                identity=ProxyIdentity(
                    pod_uid=pod.uid,
                    namespace=pod.namespace,
                    runtime=pod.runtime,
                    server_host=server_host,
                    server_port=server_port,
                ),
                cache=cache,
                registrations=registrations,
                authz=authz,
                server=local,
                peers=peers if tls is not None else None,
                metrics=metrics,
                clock=clock,
            )
            port = await nursery.start(
                lambda task_status: serve_grpc(
                    {"executor.v1.FunctionRuntime": proxy.service},
                    host=settings.host,
                    port=settings.port,
                    tls=tls,
                    task_status=task_status,
                )
            )
            proxy.port = port
            task_status.started(proxy)
            await trio.sleep_forever()
