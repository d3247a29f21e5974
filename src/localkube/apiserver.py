"""The in-process entry point: build the API server's parts and serve them over HTTPS.

``await nursery.start(serve_apiserver, config)`` returns an :class:`ApiServerHandle` once
the port is bound, the kubeconfig written and the controllers (garbage collector,
namespace lifecycle) are following the store; ``async with running_apiserver(config)``
does the same for tests. Served by :mod:`localkube.http_server` (h11 on trio, one task
per connection) with TLS from :class:`localkube.pki.ClusterPKI`, HTTP/1.1 only (ALPN
``http/1.1``).

On a fresh store the server creates the ``default``, ``kube-system``, ``kube-public`` and
``kube-node-lease`` namespaces and the bootstrap ClusterRoles and bindings
(:mod:`localkube.bootstrap_rbac`); on restart it keeps whatever is stored.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import trio

from localkube import bootstrap_rbac, http_server, storage
from localkube.access import Access
from localkube.admission import Admission
from localkube.app import ApiApp, ServerContext
from localkube.deletion import Deleter
from localkube.errors import ApiError
from localkube.gc import GarbageCollector
from localkube.handlers import Handlers, utc_now
from localkube.kubeconfig import write_kubeconfig
from localkube.namespace_lifecycle import NamespaceLifecycle
from localkube.pki import ClusterPKI
from localkube.resources import ResourceRegistry
from localkube.subresources import Subresources

log = logging.getLogger("localkube.apiserver")

DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


@dataclass(frozen=True)
class ApiServerConfig:
    """How to run the API server.

    Attributes:
        state_dir: where SQLite, the PKI and ``kubeconfig`` live; None for in-memory
            storage and a temporary PKI directory.
        host: listen address. port: listen port (0 picks a free one).
        bookmark_interval: seconds between watch BOOKMARK events.
        history_limit: store events kept for watch replay (older resourceVersions get 410).
        extra_hosts: more names/addresses for the serving certificate.
    """

    state_dir: Path | None = None
    host: str = "127.0.0.1"
    port: int = 0
    bookmark_interval: float = 60.0
    history_limit: int = 10_000
    extra_hosts: tuple[str, ...] = field(default=())


@dataclass(frozen=True)
class ApiServerHandle:
    """A running API server.

    Attributes:
        url: ``https://host:port``. kubeconfig_path: admin kubeconfig for kubectl/kr8s.
        ca_pem: the cluster CA (PEM). admin_token: the admin bearer token.
        state_dir: the configured state directory (None in memory mode).
    """

    url: str
    kubeconfig_path: Path
    ca_pem: bytes
    admin_token: str
    state_dir: Path | None = None


def _bootstrap(handlers: Handlers, registry: ResourceRegistry) -> None:
    ns_type = registry.lookup("", "v1", "namespaces")
    assert ns_type is not None
    for name in DEFAULT_NAMESPACES:
        if handlers.store.get("/namespaces", "", name) is None:
            handlers.create(ns_type, "", {"metadata": {"name": name}})
    rbac = "rbac.authorization.k8s.io"
    for plural, objs in (
        ("clusterroles", bootstrap_rbac.default_cluster_roles()),
        ("clusterrolebindings", bootstrap_rbac.default_cluster_role_bindings()),
    ):
        rt = registry.lookup(rbac, "v1", plural)
        assert rt is not None
        for obj in objs:
            if handlers.store.get(rt.storage_key, "", obj["metadata"]["name"]) is None:
                try:
                    handlers.create(rt, "", obj)
                except ApiError as exc:  # pragma: no cover - bootstrap data is ours
                    log.error("bootstrap %s %s: %s", plural, obj["metadata"]["name"], exc.message)


async def serve_apiserver(
    config: ApiServerConfig,
    *,
    task_status: trio.TaskStatus[ApiServerHandle] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run the API server until cancelled.

    Args:
        config: see :class:`ApiServerConfig`.
        task_status: receives the :class:`ApiServerHandle` once serving.

    Raises:
        localkube.storage.StoreError: the state directory's database cannot be opened.
        OSError: the address cannot be bound or the kubeconfig written.
        localkube.pki.PKIError: the state directory's key material is damaged.
    """
    pki = ClusterPKI.create(config.state_dir, [config.host, *config.extra_hosts])
    store = storage.open_store(config.state_dir, history_limit=config.history_limit)
    clock = utc_now
    try:
        registry = ResourceRegistry()
        admission = Admission(store, registry)
        deleter = Deleter(store, registry, clock=clock)
        deleter.admission = admission
        handlers = Handlers(store, registry, admission, deleter, clock=clock)
        admission.load_crds()
        _bootstrap(handlers, registry)
        access = Access(store, pki.authenticator, wall_time=time.time)
        ctx = ServerContext(
            store=store,
            registry=registry,
            handlers=handlers,
            deleter=deleter,
            access=access,
            subresources=Subresources(handlers, pki.token_authority, state_dir=config.state_dir),
            clock=clock,
            bookmark_interval=config.bookmark_interval,
        )
        gc = GarbageCollector(store, registry, deleter)
        lifecycle = NamespaceLifecycle(store, registry, deleter, ca_pem=pki.ca_pem, clock=clock)
        async with trio.open_nursery() as nursery:
            await nursery.start(gc.run)
            await nursery.start(lifecycle.run)
            port: int = await nursery.start(
                partial(
                    http_server.serve_https,
                    ApiApp(ctx),
                    host=config.host,
                    port=config.port,
                    context=pki.ssl_context(),
                )
            )
            host = f"[{config.host}]" if ":" in config.host else config.host
            url = f"https://{host}:{port}"
            ctx.server_address = url.removeprefix("https://")
            kubeconfig_dir = config.state_dir if config.state_dir is not None else pki.directory
            path = write_kubeconfig(
                kubeconfig_dir / "kubeconfig", server=url, ca_pem=pki.ca_pem, token=pki.admin_token
            )
            log.info("localkube API server on %s (revision %d)", url, store.revision)
            task_status.started(
                ApiServerHandle(
                    url=url,
                    kubeconfig_path=path,
                    ca_pem=pki.ca_pem,
                    admin_token=pki.admin_token,
                    state_dir=config.state_dir,
                )
            )
            await trio.sleep_forever()
    finally:
        store.close()


@asynccontextmanager
async def running_apiserver(
    config: ApiServerConfig | None = None,
) -> AsyncIterator[ApiServerHandle]:
    """Run an API server for the duration of the ``async with`` block.

    Args:
        config: default in-memory on 127.0.0.1, port 0.

    Yields:
        The :class:`ApiServerHandle`.
    """
    async with trio.open_nursery() as nursery:
        handle: ApiServerHandle = await nursery.start(serve_apiserver, config or ApiServerConfig())
        try:
            yield handle
        finally:
            nursery.cancel_scope.cancel()
