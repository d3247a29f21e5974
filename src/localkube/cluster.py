"""The whole local cluster as one trio process tree: API server, controllers, node, proxy.

Nursery tree (start order = dependency order; each child reports ``started`` once ready)::

    serve_cluster
      serve_apiserver          HTTPS API (localkube.apiserver), SQLite under the state dir
      serve_hosts_file         <state-dir>/hosts (Service names, see localkube.names)
      serve_controllers        Deployment, ReplicaSet, Endpoints/EndpointSlice, ClusterIP
      serve_proxy              TCP listeners on clusterIP:port
      serve_node               Node "localkube", Pods as process groups

Everything after the API server talks to it through the Kubernetes API with the admin
kubeconfig. Cancelling the tree stops every Pod process (SIGTERM, then SIGKILL after
``ClusterConfig.shutdown_grace`` seconds) and keeps every object, so the next start on the
same state directory resumes them (see :mod:`localkube.node.podworker`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import trio

from krt.kube.kr8s_auth import private_api
from localkube.apiserver import ApiServerConfig, ApiServerHandle, serve_apiserver
from localkube.controllers import serve_controllers
from localkube.controllers.kubeapi import Kube
from localkube.images import ImageTable
from localkube.names import serve_hosts_file
from localkube.node.config import NodeConfig
from localkube.node.kubelet import Kubelet, serve_node
from localkube.node.logrotate import LogLimits
from localkube.proxy import ServiceProxy, serve_proxy

#: Written once the cluster serves; removed when it stops.
READY_FILE = "cluster.json"


@dataclass(frozen=True)
class ClusterConfig:
    """How to run a local cluster.

    Attributes:
        state_dir: SQLite store, PKI, kubeconfig, hosts file and Pod roots (created).
        host, port: API server listen address (port 0: any free port).
        images_file: YAML/JSON image table overlay (see localkube.images), or None.
        backoff_initial, backoff_cap: container crash back-off in seconds.
        shutdown_grace: seconds Pods get between SIGTERM and SIGKILL at shutdown.
        log_limits: container log rotation (default 10 MiB per file, 5 files per run).
        volume_sync_period: seconds between re-projections of changed Secret/ConfigMap
            volumes of running Pods (:class:`localkube.node.config.NodeConfig`).
    """

    state_dir: Path
    host: str = "127.0.0.1"
    port: int = 0
    images_file: Path | None = None
    backoff_initial: float = 10.0
    backoff_cap: float = 300.0
    shutdown_grace: float = 5.0
    log_limits: LogLimits = field(default_factory=LogLimits)
    volume_sync_period: float = 10.0


@dataclass(frozen=True)
class ClusterHandle:
    """A running cluster.

    Attributes:
        apiserver: the API server handle (url, kubeconfig_path, ca_pem, admin_token).
        kube: the admin API client the in-process components share.
        kubelet: the node. proxy: the Service proxy. hosts_file: the Service name map.
    """

    apiserver: ApiServerHandle
    kube: Kube
    kubelet: Kubelet
    proxy: ServiceProxy
    hosts_file: Path
    state_dir: Path


@dataclass(frozen=True)
class _Services:
    """What the node and the handle need from the parts that outlive the node."""

    api: ApiServerHandle
    kube: Kube
    proxy: ServiceProxy
    hosts_file: Path


async def _serve_services(
    config: ClusterConfig,
    state_dir: Path,
    stop: trio.Event,
    *,
    task_status: trio.TaskStatus[_Services] = trio.TASK_STATUS_IGNORED,
) -> None:
    """The API server, the hosts file, the controllers and the Service proxy, until ``stop``.

    Shielded from the cluster's cancellation: at shutdown the node stops its Pods first,
    and those Pods still reach the API server and each other for their last writes (a
    control plane releases its Lease, so the next start need not wait for it to expire),
    as on a real node draining before its control plane goes away. The cluster sets
    ``stop`` once the node is gone (or failed to start).
    """
    with trio.CancelScope(shield=True):
        async with trio.open_nursery() as nursery:
            api: ApiServerHandle = await nursery.start(
                serve_apiserver,
                ApiServerConfig(state_dir=state_dir, host=config.host, port=config.port),
            )
            # (kr8s's own loader leaves the kubeconfig's CA in a temp file per start)
            kube = Kube(await private_api(kubeconfig=str(api.kubeconfig_path)))
            hosts_file = state_dir / "hosts"
            await nursery.start(serve_hosts_file, kube, hosts_file)
            await nursery.start(serve_controllers, kube)
            proxy: ServiceProxy = await nursery.start(serve_proxy, kube)
            task_status.started(_Services(api, kube, proxy, hosts_file))
            await stop.wait()
            nursery.cancel_scope.cancel()


async def serve_cluster(
    config: ClusterConfig,
    *,
    task_status: trio.TaskStatus[ClusterHandle] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run the cluster until cancelled.

    Args:
        config: see :class:`ClusterConfig`.
        task_status: started with a :class:`ClusterHandle` once every part is serving.

    Raises:
        localkube.images.ImageTableError: a bad image table file (before anything starts).
        OSError: the API server cannot bind. Any start-up error of a part.
    """
    images = ImageTable.load(config.images_file)
    state_dir = config.state_dir.resolve()
    await trio.Path(state_dir).mkdir(parents=True, exist_ok=True)
    ready_file = trio.Path(state_dir / READY_FILE)
    stop_services = trio.Event()
    try:
        async with trio.open_nursery() as nursery:
            services: _Services = await nursery.start(
                _serve_services, config, state_dir, stop_services
            )
            api, kube = services.api, services.kube
            try:
                url = urlsplit(api.url)
                ca = api.ca_pem.decode() if isinstance(api.ca_pem, bytes) else str(api.ca_pem)
                node_config = NodeConfig(
                    state_dir=state_dir,
                    apiserver_host=url.hostname or config.host,
                    apiserver_port=url.port or 443,
                    ca_pem=ca,
                    images=images,
                    hosts_file=services.hosts_file,
                    backoff_initial=config.backoff_initial,
                    backoff_cap=config.backoff_cap,
                    shutdown_grace=config.shutdown_grace,
                    log_limits=config.log_limits,
                    volume_sync_period=config.volume_sync_period,
                )
                async with trio.open_nursery() as node:
                    kubelet: Kubelet = await node.start(serve_node, kube, node_config)
                    await ready_file.write_text(
                        json.dumps(
                            {
                                "pid": os.getpid(),
                                "url": api.url,
                                "kubeconfig": str(api.kubeconfig_path),
                            }
                        )
                    )
                    task_status.started(
                        ClusterHandle(
                            api, kube, kubelet, services.proxy, services.hosts_file, state_dir
                        )
                    )
            finally:
                # the node has stopped its Pods (gracefully, while the API server, the
                # Service proxy and the controllers still served their last writes)
                stop_services.set()
    finally:
        with trio.CancelScope(shield=True):
            await ready_file.unlink(missing_ok=True)
