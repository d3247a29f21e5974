"""Test-only runtimed entrypoint: the real ``runtimed`` command plus the function lifecycle.

Until ``runtimed.daemon.serve_daemon`` starts :class:`~runtimed.functions.lifecycle.
FunctionLifecycle` itself, the cluster acceptance tests run Runtime Pods whose
``kruntimes/runtimed`` image is this script (a localkube images overlay). It wraps
``serve_daemon``: the daemon runs unchanged, and next to it the function lifecycle is wired
exactly as the daemon is meant to wire it (shared Run informer and function registry, its
own FunctionRuntime channel to the same Runtime Server, adoption of this Pod's Runs).

Usage (as localkube runs it): ``python runtimed_with_functions.py [runtimed options]``.
"""

from __future__ import annotations

import functools
from typing import Any

import trio

import runtimed.__main__ as cli
from krt.kube.client import Kube, connect
from krt.kube.clock import Clock, SystemClock
from runtimed import daemon
from runtimed.functions.client import FunctionRuntimeClient
from runtimed.functions.finalizers import KubeFinalizers
from runtimed.functions.lifecycle import FunctionLifecycle
from runtimed.functions.registry import FunctionRegistry
from runtimed.tasks import KubeStatusWriter

_serve_daemon = daemon.serve_daemon


async def serve_with_functions(
    config: daemon.DaemonConfig,
    *,
    kube: Kube | None = None,
    clock: Clock | None = None,
    task_status: Any = trio.TASK_STATUS_IGNORED,
) -> None:
    """``serve_daemon`` plus the function lifecycle (see the module docstring)."""
    clock = clock or SystemClock()
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
            registry = getattr(handle, "registry", None) or FunctionRegistry()
            functions = FunctionLifecycle(
                pod=config.pod,
                cache=handle.informer,
                writer=KubeStatusWriter(kube),
                finalizers=KubeFinalizers(kube),
                server=client,
                workspace=config.workspace,
                clock=clock,
                registry=registry,
                git=config.git,
            )
            handle.informer.add_handler(functions.on_run_event)
            functions.adopt(handle.informer.by_index(daemon.ASSIGNED_POD_INDEX, config.pod.uid))
            await nursery.start(functions.run)
            task_status.started(handle)
    finally:
        if own_kube:
            with trio.CancelScope(shield=True):
                await kube.aclose()


if __name__ == "__main__":
    cli.serve_daemon = serve_with_functions  # type: ignore[assignment]
    cli.main()
