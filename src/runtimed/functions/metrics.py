"""Prometheus metrics of the function lifecycle (issue 7).

Registered into runtimed's registry (``RuntimedMetrics.registry``) so ``/metrics`` serves
them beside the task lifecycle's and the invoke proxy's. Nothing here counts invocations:
the lifecycle never sees them (the proxy's metrics do).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["FunctionMetrics"]

PREFIX: Final = "runtimed_function_"
#: Buckets of the registration time, seconds (a warm Python import takes ~30-100 ms).
REGISTER_BUCKETS: Final = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class FunctionMetrics:
    """The function lifecycle's metrics.

    Args:
        registry: where to register them (a fresh one when ``None``).

    Attributes:
        registrations: RegisterFunction outcomes by ``outcome`` (``registered``,
            ``adopted``, ``failed``).
        register_seconds: source preparation plus RegisterFunction, seconds.
        ended: function Runs this Pod ended or let go, by ``outcome`` (``Retry``,
            ``Failed``, ``Cancelled``, ``IdleTimeout``, ``LifetimeExceeded``, ``Deleted``,
            ``Released``).
        accepting: registrations accepting invokes now (set by a callback).
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        self.registrations = Counter(
            PREFIX + "registrations_total",
            "RegisterFunction outcomes (registered, adopted after a restart, failed)",
            ["outcome"],
            registry=self.registry,
        )
        self.register_seconds = Histogram(
            PREFIX + "register_seconds",
            "Source preparation plus RegisterFunction, seconds",
            buckets=REGISTER_BUCKETS,
            registry=self.registry,
        )
        self.ended = Counter(
            PREFIX + "runs_ended_total",
            "Function Runs this Pod ended, retried or released, by outcome",
            ["outcome"],
            registry=self.registry,
        )
        self.accepting = Gauge(
            PREFIX + "registrations_accepting",
            "Function registrations on this Pod accepting invokes",
            registry=self.registry,
        )

    def track_accepting(self, count: Callable[[], int]) -> None:
        """Report ``count()`` as ``runtimed_function_registrations_accepting`` at every scrape."""
        self.accepting.set_function(lambda: float(count()))
