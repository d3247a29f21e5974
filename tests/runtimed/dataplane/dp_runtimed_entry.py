"""Test-only runtimed entrypoint: the real ``runtimed`` command plus the function lifecycle,
sharing the daemon's function registry with the invoke proxy (``DaemonHandle.registry``).

Used as the ``kruntimes/runtimed`` image (localkube images overlay) until
``runtimed.daemon.serve_daemon`` starts the function lifecycle itself. Usage, as localkube
runs it: ``python dp_runtimed_entry.py [--test-peer-tls-dir=DIR] [runtimed options]``; the
optional first argument is a host directory of peer TLS material (tests have no Secret
volumes), used instead of ``--peer-tls-dir``.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from pathlib import Path
from typing import Any

import trio

import runtimed.__main__ as cli
from krt.kube.client import Kube, connect
from krt.kube.clock import Clock, SystemClock
from runtimed import daemon
from runtimed.functions.client import FunctionRuntimeClient
from runtimed.functions.finalizers import KubeFinalizers
from runtimed.functions.lifecycle import FunctionLifecycle
from runtimed.tasks import KubeStatusWriter

_serve_daemon = daemon.serve_daemon
_PEER_FLAG = "--test-peer-tls-dir="
_peer_tls_dir: Path | None = None


async def serve_with_functions(
    config: daemon.DaemonConfig,
    *,
    kube: Kube | None = None,
    clock: Clock | None = None,
    task_status: Any = trio.TASK_STATUS_IGNORED,
) -> None:
    """``serve_daemon`` plus the function lifecycle on the daemon's registry."""
    clock = clock or SystemClock()
    if _peer_tls_dir is not None and config.dataplane is not None:
        config = dataclasses.replace(
            config, dataplane=dataclasses.replace(config.dataplane, peer_tls_dir=_peer_tls_dir)
        )
    own_kube = kube is None
    if kube is None:
        kube = await connect(
            kubeconfig=config.kubeconfig,
            namespace=config.pod.namespace,
            serviceaccount_dir=config.serviceaccount_dir,
        )
    try:
        async with trio.open_nursery() as nursery:
            handle = await nursery.start(
                functools.partial(_serve_daemon, config, kube=kube, clock=clock)
            )
            client = FunctionRuntimeClient(config.server_host, config.server_port)
            await nursery.start(client.run)
            functions = FunctionLifecycle(
                pod=config.pod,
                cache=handle.informer,
                writer=KubeStatusWriter(kube),
                finalizers=KubeFinalizers(kube),
                server=client,
                workspace=config.workspace,
                clock=clock,
                registry=handle.registry,
                git=config.git,
            )
            # FunctionLifecycle does ``registry or FunctionRegistry()``, and an empty registry is
            # falsy (it has __len__): share the daemon's instance explicitly
            functions.registry = handle.registry
            handle.informer.add_handler(functions.on_run_event)
            functions.adopt(handle.informer.by_index(daemon.ASSIGNED_POD_INDEX, config.pod.uid))
            await nursery.start(functions.run)
            task_status.started(handle)
    finally:
        if own_kube:
            with trio.CancelScope(shield=True):
                await kube.aclose()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1].startswith(_PEER_FLAG):
        _peer_tls_dir = Path(sys.argv.pop(1).removeprefix(_PEER_FLAG))
    cli.serve_daemon = serve_with_functions  # type: ignore[assignment]
    cli.main()
