"""Prometheus metrics of the control plane (served by :mod:`krt.metrics_server`).

Each :class:`ControlPlaneMetrics` owns its own ``CollectorRegistry`` (not the process-wide
default), so two control planes in one test process never share counters.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

#: Bind latency buckets, seconds: from 1 ms (a wake on capacity release) to 30 s.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class ControlPlaneMetrics:
    """The control plane's metrics (names prefixed ``krt_controlplane_``).

    Attributes:
        registry: the registry the endpoint serves.
        queue_depth: Gauge ``queue_depth{queue}``: keys waiting in each work queue.
        bind_latency: Histogram ``bind_latency_seconds``: from a Run being queued as
            Pending to its successful bind, seconds.
        binds: Counter ``binds_total``: successful binds.
        bind_conflicts: Counter ``bind_conflicts_total``: binds answered 409 Conflict.
        unschedulable: Counter ``unschedulable_total{reason}``: decisions to keep a Run
            Pending, by reason.
        recoveries: Counter ``recoveries_total{fence,outcome}``: stale-Run recoveries.
        gc_deleted: Counter ``gc_deleted_total``: Runs deleted after their TTL.
        is_leader: Gauge ``is_leader``: 1 while this process leads.
    """

    def __init__(self) -> None:
        """Create the metrics in a fresh registry."""
        self.registry = CollectorRegistry(auto_describe=True)
        prefix = "krt_controlplane_"
        self.queue_depth = Gauge(
            prefix + "queue_depth",
            "Keys waiting in a control-plane work queue",
            ["queue"],
            registry=self.registry,
        )
        self.bind_latency = Histogram(
            prefix + "bind_latency_seconds",
            "Seconds from a Run being queued as Pending to its successful bind",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.binds = Counter(prefix + "binds", "Successful binds", registry=self.registry)
        self.bind_conflicts = Counter(
            prefix + "bind_conflicts",
            "Binds rejected with 409 Conflict (stale read; re-read, never double-bind)",
            registry=self.registry,
        )
        self.unschedulable = Counter(
            prefix + "unschedulable",
            "Decisions to keep a Run Pending, by reason",
            ["reason"],
            registry=self.registry,
        )
        self.recoveries = Counter(
            prefix + "recoveries",
            "Stale-Run recoveries after fencing, by fence and outcome",
            ["fence", "outcome"],
            registry=self.registry,
        )
        self.gc_deleted = Counter(
            prefix + "gc_deleted",
            "Runs deleted after ttlSecondsAfterFinished",
            registry=self.registry,
        )
        self._unschedulable_children: dict[str, Counter] = {}
        self.is_leader = Gauge(
            prefix + "is_leader",
            "1 while this process holds the leader Lease",
            registry=self.registry,
        )

    def unschedulable_reason(self, reason: str) -> Counter:
        """The ``unschedulable_total{reason}`` child (looked up once per reason, then kept)."""
        child = self._unschedulable_children.get(reason)
        if child is None:
            child = self._unschedulable_children[reason] = self.unschedulable.labels(reason=reason)
        return child

    def track_queue(self, name: str, depth: Callable[[], int]) -> None:
        """Report ``depth()`` as ``queue_depth{queue=name}`` at every scrape."""
        self.queue_depth.labels(queue=name).set_function(lambda: float(depth()))
