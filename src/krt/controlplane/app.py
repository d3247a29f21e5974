"""The control-plane process as one trio nursery tree.

::

    serve_controlplane
      EventRecorder.run         Events, fire and forget
      Caches.run                every shared informer (started = all synced)
      serve_http                /metrics and /healthz (optional)
      LeaderElector.run         (or directly, without leader election)
        leading                 one term of leadership
          RuntimeController.run
          Scheduler.run
          Reaper.run
          CompletedRunGC.run

The informers keep running (and their handlers keep queueing) while this process is not
the leader, so a new leader starts from a warm cache; the loops' workers run only during a
term, and a lost Lease cancels them at once (issue 5: two replicas never act at once).
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field

import trio

from krt.api.naming import LEADER_LEASE_NAME
from krt.controlplane.caches import Caches
from krt.controlplane.gc_loop import CompletedRunGC
from krt.controlplane.metrics import ControlPlaneMetrics
from krt.controlplane.quiet_runs import RunsQuiet
from krt.controlplane.reaper_loop import Reaper
from krt.controlplane.runtime_controller import RuntimeController
from krt.controlplane.runtime_resources import RuntimedWiring
from krt.controlplane.scheduler_loop import Scheduler
from krt.kube.client import Kube
from krt.kube.clock import Clock, SystemClock
from krt.kube.events import EventRecorder
from krt.kube.leaderelection import LeaderElector
from krt.metrics_server import http_address, metrics_app, serve_http

log = logging.getLogger(__name__)

#: ``source.component`` of the control plane's Events.
COMPONENT = "krt-controlplane"
#: Events waiting to be written; more are dropped (counted in ``EventRecorder.dropped``).
#: Held back while Runs are busy (at most ``krt.kube.events.MAX_DELAY_SECONDS``), so room for
#: several seconds of a large burst's Events (a few hundred bytes each).
EVENT_BUFFER = 8192


def default_identity() -> str:
    """A unique candidate identity: ``<hostname>_<pid>_<random hex>``."""
    return (
        f"{os.environ.get('POD_NAME') or socket.gethostname()}_{os.getpid()}_{secrets.token_hex(4)}"
    )


@dataclass(frozen=True)
class ControlPlaneConfig:
    """How to run the control plane.

    Attributes:
        namespaces: namespaces to watch, or ``None`` for all.
        leader_elect: campaign for the leader Lease before acting (always, in production).
        lease_namespace: namespace of the leader Lease.
        lease_name: name of the leader Lease.
        identity: this replica's candidate identity (unique per process).
        lease_duration, renew_deadline, retry_period: leader-election timing, seconds.
        metrics_host, metrics_port: where ``/metrics`` listens; ``metrics_port=None``
            disables it (0 picks a free port).
        resync_seconds: fallback re-check period of every Run and Runtime, seconds.
        runtimed: the gateway URL, gateway CA ConfigMap and peer TLS Secret every Runtime
            Pod's runtimed gets (seed 000, Runtime Gateway); part of the Pods' desired hash.
        clock: the wall clock (heartbeat freshness, timestamps, GC deadlines).
    """

    namespaces: Sequence[str] | None = None
    leader_elect: bool = True
    lease_namespace: str = "default"
    lease_name: str = LEADER_LEASE_NAME
    identity: str = field(default_factory=default_identity)
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    metrics_host: str = "127.0.0.1"
    metrics_port: int | None = None
    resync_seconds: float = 30.0
    runtimed: RuntimedWiring = field(default_factory=RuntimedWiring)
    clock: Clock = field(default_factory=SystemClock)


@dataclass
class ControlPlane:
    """A running control plane (what :func:`serve_controlplane` starts with).

    Attributes:
        caches, runtime_controller, scheduler, reaper, gc, metrics: the parts.
        elector: the leader elector, or ``None`` without leader election.
        metrics_url: ``http://host:port`` of ``/metrics``, or ``None``.
        leading: set when a term of leadership starts its loops; replaced by a fresh
            (unset) Event when the term ends.
    """

    caches: Caches
    runtime_controller: RuntimeController
    scheduler: Scheduler
    reaper: Reaper
    gc: CompletedRunGC
    metrics: ControlPlaneMetrics
    recorder: EventRecorder
    elector: LeaderElector | None = None
    metrics_url: str | None = None
    leading: trio.Event = field(default_factory=trio.Event)


async def serve_controlplane(
    kube: Kube,
    config: ControlPlaneConfig,
    *,
    task_status: trio.TaskStatus[ControlPlane] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run the control plane until cancelled.

    Args:
        kube: the client (owned by the caller).
        config: see :class:`ControlPlaneConfig`.
        task_status: ``started(ControlPlane)`` once the caches are synced, ``/metrics``
            listens and campaigning (or, without leader election, the loops) has started.

    Raises:
        OSError: ``/metrics`` cannot bind. ValueError: invalid leader-election timing.
    """
    metrics = ControlPlaneMetrics()
    caches = Caches(
        kube, config.namespaces, now=config.clock.now, resync_seconds=config.resync_seconds
    )
    quiet = RunsQuiet()
    caches.runs.add_handler(quiet.on_run)
    recorder = EventRecorder(kube, COMPONENT, capacity=EVENT_BUFFER, clock=config.clock, gate=quiet)
    plane = ControlPlane(
        caches=caches,
        runtime_controller=RuntimeController(
            kube, caches, metrics=metrics, recorder=recorder, wiring=config.runtimed
        ),
        scheduler=Scheduler(kube, caches, metrics=metrics, recorder=recorder),
        reaper=Reaper(kube, caches, metrics=metrics, recorder=recorder),
        gc=CompletedRunGC(kube, caches, metrics=metrics),
        metrics=metrics,
        recorder=recorder,
    )

    async def leading() -> None:
        metrics.is_leader.set(1)
        plane.leading.set()
        log.info("control plane %s is acting", config.identity)
        try:
            async with trio.open_nursery() as loops:
                await loops.start(plane.runtime_controller.run)
                await loops.start(plane.scheduler.run)
                await loops.start(plane.reaper.run)
                await loops.start(plane.gc.run)
                await trio.sleep_forever()
        finally:
            metrics.is_leader.set(0)
            plane.leading = trio.Event()

    async with trio.open_nursery() as nursery:
        await nursery.start(recorder.run)
        await nursery.start(caches.run)
        if config.metrics_port is not None:
            port = await nursery.start(
                serve_http, metrics_app(metrics.registry), config.metrics_host, config.metrics_port
            )
            plane.metrics_url = f"http://{http_address(config.metrics_host, port)}"
        if config.leader_elect:
            plane.elector = LeaderElector(
                kube,
                namespace=config.lease_namespace,
                name=config.lease_name,
                identity=config.identity,
                lease_duration=config.lease_duration,
                renew_deadline=config.renew_deadline,
                retry_period=config.retry_period,
                clock=config.clock,
            )
            await nursery.start(plane.elector.run, leading)
        else:
            nursery.start_soon(leading)
        task_status.started(plane)
