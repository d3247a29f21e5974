"""The runtimed daemon: one trio nursery tree per Runtime Pod (DESIGN.md, Concurrency shape).

Start-up order, each child started with ``nursery.start`` so it is explicit:

1. the Runtime Server channel (:class:`~runtimed.runtime_client.RuntimeServerClient`,
   reconnecting; long-lived, outermost);
2. the Event sender;
3. the Run informers (:mod:`runtimed.run_informers`), synced: the Runs assigned to this
   Pod (the task lifecycle's cache) and the function Runs of the namespace (function
   lifecycle, ownership cache), each a watch filtered by the API server on the Run CRD's
   selectable fields; one namespace-wide watch for both where the API server cannot filter.
   The handlers also filter on ``status.assignedPodUID`` (or local state here), and an index
   on that field lists this Pod's Runs without scanning;
4. the task lifecycle (reconcile workers, start workers, RLEG, sweeper), after a first sweep
   of the Runtime Server's executions (restart safety), then the function lifecycle
   (registration, idle and lifetime pollers, cleanup), which adopts this Pod's Runs;
5. the invoke dataplane (:func:`runtimed.dataplane.app.serve_dataplane`: ownership cache on
   the Run informer plus a Pod informer, the FunctionRuntime proxy on ``RUNTIMED_PORT``),
   when configured;
6. readiness (``RuntimedReady`` follows Health) and the heartbeat Lease;
7. ``/healthz`` and ``/metrics``.

Cancelling the root nursery stops everything; per-Run work lives in the lifecycle's nursery.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from krt.kube.client import Kube, connect
from krt.kube.clock import Clock, SystemClock
from krt.kube.events import EventRecorder
from krt.kube.heartbeat import (
    HEARTBEAT_LEASE_DURATION_SECONDS,
    HEARTBEAT_PERIOD_SECONDS,
    run_heartbeat,
)
from krt.kube.informer import Informer
from krt.kube.status import patch_pod_condition
from runtimed.dataplane.app import DataplaneSettings, serve_dataplane
from runtimed.dataplane.proxy import InvokeProxy
from runtimed.functions.client import FunctionRuntimeClient
from runtimed.functions.finalizers import KubeFinalizers
from runtimed.functions.lifecycle import FunctionLifecycle
from runtimed.functions.metrics import FunctionMetrics
from runtimed.functions.registry import FunctionRegistry
from runtimed.functions.settings import FunctionSettings
from runtimed.httpserver import health_app, serve_http
from runtimed.identity import PodIdentity
from runtimed.metrics import RuntimedMetrics
from runtimed.readiness import HealthState, ReadinessLoop
from runtimed.run_fields import queue_key
from runtimed.run_informers import (
    ASSIGNED_POD_INDEX,
    assigned_pod_uids,
    field_selectors_supported,
    run_informers,
)
from runtimed.runtime_client import RuntimeServerClient
from runtimed.sources import Workspace
from runtimed.tasks import KubeStatusWriter, TaskLifecycle, TaskTimings

__all__ = [
    "ASSIGNED_POD_INDEX",
    "DaemonConfig",
    "DaemonHandle",
    "assigned_pod_uids",
    "serve_daemon",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DaemonConfig:
    """Everything runtimed needs to run (built by the CLI from flags and environment).

    Attributes:
        pod: this Pod's identity.
        server_host, server_port: the local Runtime Server.
        workspace: the shared workspace.
        http_host, http_port: where ``/healthz`` and ``/metrics`` listen (port 0: any).
        kubeconfig: a kubeconfig path, or ``None`` for ``$KUBECONFIG`` / in-cluster.
        serviceaccount_dir: in-cluster credentials directory.
        git: the git executable.
        timings: task lifecycle deadlines and periods.
        heartbeat_period: Lease renewal period, seconds.
        lease_duration: ``leaseDurationSeconds`` of the heartbeat Lease.
        health_period: seconds between Health probes.
        dataplane: the invoke proxy's Service port, or ``None`` to serve none.
        functions: the function lifecycle's published endpoint (gateway URL, CA bundle),
            defaults and deadlines; ``None`` runs no function lifecycle (for tests that drive
            function Runs' status themselves).
    """

    pod: PodIdentity
    server_host: str
    server_port: int
    workspace: Workspace
    http_host: str = "0.0.0.0"
    http_port: int = 8081
    kubeconfig: Path | None = None
    serviceaccount_dir: Path = Path("/var/run/secrets/kubernetes.io/serviceaccount")
    git: str = "git"
    timings: TaskTimings = field(default_factory=TaskTimings)
    heartbeat_period: float = HEARTBEAT_PERIOD_SECONDS
    lease_duration: int = HEARTBEAT_LEASE_DURATION_SECONDS
    health_period: float = 1.0
    dataplane: DataplaneSettings | None = None
    functions: FunctionSettings | None = field(default_factory=FunctionSettings)


@dataclass(frozen=True, slots=True)
class DaemonHandle:
    """What :func:`serve_daemon` reports once running (tests and diagnostics).

    Attributes:
        http_port: the bound ``/healthz`` / ``/metrics`` port.
        lifecycle: the task lifecycle.
        informer: the function Runs' informer (the namespace-wide Run informer where the
            API server cannot filter Runs by field).
        assigned: the informer of the Runs assigned to this Pod (the task lifecycle's
            cache; ``informer`` itself where the API server cannot filter).
        server: the Runtime Server client.
        readiness: the readiness loop.
        registry: the function registry (shared by the function lifecycle and the proxy).
        proxy: the invoke proxy (``proxy.port`` is its bound port), or ``None``.
        functions: the function lifecycle.
    """

    http_port: int
    lifecycle: TaskLifecycle
    informer: Informer
    server: RuntimeServerClient
    readiness: ReadinessLoop
    registry: FunctionRegistry | None = None
    proxy: InvokeProxy | None = None
    functions: FunctionLifecycle | None = None
    assigned: Informer | None = None


async def serve_daemon(
    config: DaemonConfig,
    *,
    kube: Kube | None = None,
    clock: Clock | None = None,
    task_status: trio.TaskStatus[DaemonHandle] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run runtimed until cancelled.

    Args:
        config: the configuration.
        kube: a connected client (tests); by default :func:`krt.kube.client.connect` with
            ``config.kubeconfig`` / in-cluster credentials (closed on exit).
        clock: wall clock (default the system clock).
        task_status: ``started(handle)`` once every loop runs and the HTTP port is bound.

    Raises:
        ConfigError, ConnectionFailed: no Kubernetes configuration / API server unreachable
            at start-up (from ``connect``).
        OSError: the HTTP address cannot be bound.
    """
    clock = clock or SystemClock()
    own_kube = kube is None
    if kube is None:
        kube = await connect(
            kubeconfig=config.kubeconfig,
            namespace=config.pod.namespace,
            serviceaccount_dir=config.serviceaccount_dir,
        )
    pod = config.pod
    try:
        async with trio.open_nursery() as nursery:
            metrics = RuntimedMetrics()
            server = RuntimeServerClient(config.server_host, config.server_port)
            await nursery.start(server.run)
            events = EventRecorder(kube, "runtimed", instance=pod.name, clock=clock)
            await nursery.start(events.run)

            informers = run_informers(
                kube,
                namespace=pod.namespace,
                pod_uid=pod.uid,
                split=await field_selectors_supported(kube, pod.namespace, pod.uid),
            )
            informer, assigned = informers.functions, informers.assigned
            lifecycle = TaskLifecycle(
                pod=pod,
                cache=assigned,
                writer=KubeStatusWriter(kube),
                server=server,
                workspace=config.workspace,
                clock=clock,
                metrics=metrics,
                events=events,
                timings=config.timings,
                git=config.git,
            )
            assigned.add_handler(lifecycle.on_run_event)
            for each in informers.all():
                await nursery.start(each.run)
            for obj in assigned.by_index(ASSIGNED_POD_INDEX, pod.uid):
                lifecycle.queue.add(queue_key(obj))
            await nursery.start(lifecycle.run)
            # the function registry: the function lifecycle writes it, the invoke proxy reads it
            registry = FunctionRegistry()
            functions: FunctionLifecycle | None = None
            if config.functions is not None:
                function_server = FunctionRuntimeClient(config.server_host, config.server_port)
                await nursery.start(function_server.run)
                functions = FunctionLifecycle(
                    pod=pod,
                    cache=informer,
                    writer=KubeStatusWriter(kube),
                    finalizers=KubeFinalizers(kube),
                    server=function_server,
                    workspace=config.workspace,
                    clock=clock,
                    settings=config.functions,
                    registry=registry,
                    events=events,
                    git=config.git,
                    metrics=FunctionMetrics(metrics.registry),
                )
                informer.add_handler(functions.on_run_event)
                functions.adopt(informer.by_index(ASSIGNED_POD_INDEX, pod.uid))
                await nursery.start(functions.run)
            proxy: InvokeProxy | None = None
            if config.dataplane is not None:
                proxy = await nursery.start(
                    functools.partial(
                        serve_dataplane,
                        config.dataplane,
                        kube=kube,
                        runs=informer,
                        pod=pod,
                        registrations=registry,
                        server_host=config.server_host,
                        server_port=config.server_port,
                        clock=clock,
                        metrics_registry=metrics.registry,
                    )
                )

            async def patch(condition: dict[str, Any]) -> object:
                return await patch_pod_condition(kube, pod.namespace, pod.name, condition)

            def on_health(state: HealthState) -> None:
                metrics.server_healthy.set(1.0 if state.healthy else 0.0)
                if functions is not None:  # Ready=False Unavailable while unhealthy
                    functions.on_server_health(state)
                if proxy is not None:
                    proxy.server_down = (
                        None if state.healthy else f"{state.reason}: {state.message}"
                    )

            readiness = ReadinessLoop(
                server, patch, clock=clock, period=config.health_period, on_change=on_health
            )
            await nursery.start(readiness.run)
            nursery.start_soon(
                functools.partial(
                    run_heartbeat,
                    kube,
                    namespace=pod.namespace,
                    pod_name=pod.name,
                    pod_uid=pod.uid,
                    clock=clock,
                    period=config.heartbeat_period,
                    lease_duration_seconds=config.lease_duration,
                )
            )
            app = health_app(metrics, healthy=lambda: True)
            port = await nursery.start(serve_http, app, config.http_host, config.http_port)
            log.info(
                "runtimed running",
                extra={"pod": pod.name, "namespace": pod.namespace, "http_port": port},
            )
            task_status.started(
                DaemonHandle(
                    http_port=port,
                    lifecycle=lifecycle,
                    informer=informer,
                    server=server,
                    readiness=readiness,
                    registry=registry,
                    proxy=proxy,
                    functions=functions,
                    assigned=assigned,
                )
            )
    finally:
        if own_kube:
            with trio.CancelScope(shield=True):
                await kube.aclose()
