"""runtimed's Prometheus metrics (one registry per daemon, served on ``/metrics``)."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["RuntimedMetrics"]

PREFIX = "runtimed_"


class RuntimedMetrics:
    """The metrics of one runtimed.

    Attributes:
        registry: the registry ``/metrics`` serves.
        task_runs: finished task attempts by ``outcome`` (Succeeded, Failed, Retry, Timeout,
            Cancelled).
        executions_started: Execute calls the server accepted.
        start_failures: Execute or staging failures.
        preparation_seconds: source preparation time, seconds.
        claim_lag_seconds: bind (``Scheduled`` transition) to claim, seconds.
        rleg_polls: List calls of the Run Lifecycle Event Generator (RLEG).
        server_calls: calls the task lifecycle made to the Runtime Server, by ``method``
            (Execute, Status, List, Cancel, Forget): issue 6 reads them per Run.
        server_healthy: 1 while the local Runtime Server answers Health as healthy.
        local_runs: Runs with local state (set by a callback).
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.task_runs = Counter(
            PREFIX + "task_runs_total",
            "Task Run attempts that ended, by outcome",
            ["outcome"],
            registry=self.registry,
        )
        self.executions_started = Counter(
            PREFIX + "executions_started_total",
            "Executions the Runtime Server accepted",
            registry=self.registry,
        )
        self.start_failures = Counter(
            PREFIX + "execution_start_failures_total",
            "Execute (or staging) failures before an execution existed",
            registry=self.registry,
        )
        self.preparation_seconds = Histogram(
            PREFIX + "source_preparation_seconds",
            "Time to prepare a task's source, seconds",
            registry=self.registry,
        )
        self.claim_lag_seconds = Histogram(
            PREFIX + "claim_lag_seconds",
            "From the scheduler's bind (Scheduled condition) to runtimed's claim, seconds",
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
            registry=self.registry,
        )
        self.rleg_polls = Counter(
            PREFIX + "rleg_polls_total",
            "List calls the Run Lifecycle Event Generator made to the Runtime Server",
            registry=self.registry,
        )
        self.server_calls = Counter(
            PREFIX + "task_server_calls_total",
            "Runtime Server calls of the task lifecycle, by method",
            ["method"],
            registry=self.registry,
        )
        self.server_healthy = Gauge(
            PREFIX + "runtime_server_healthy",
            "1 while the local Runtime Server answers Health as healthy",
            registry=self.registry,
        )
        self.local_runs = Gauge(
            PREFIX + "local_runs", "Runs with local execution state", registry=self.registry
        )

    def track_local_runs(self, count: Callable[[], int]) -> None:
        """Report ``count()`` as ``runtimed_local_runs`` at every scrape."""
        self.local_runs.set_function(lambda: float(count()))
