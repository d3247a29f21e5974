"""Prometheus metrics of runtimed's invoke proxy (issue 8, Observability).

Registered into runtimed's own registry (:class:`runtimed.metrics.RuntimedMetrics`), so
``/metrics`` on runtimed's HTTP port serves them beside the lifecycle metrics.
"""

from __future__ import annotations

from typing import Any, Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["LATENCY_BUCKETS", "DataplaneMetrics"]

#: Invocation latency buckets, seconds (from 0.5 ms: the proxy hop itself is sub-millisecond).
LATENCY_BUCKETS: Final = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)


class DataplaneMetrics:
    """The invoke proxy's metrics.

    Args:
        registry: where to register them (a fresh one when ``None``).

    Attributes:
        invocations: ``runtimed_invocations_total{code,route}``: InvokeFunction calls
            answered, by gRPC status name and route (``local``, ``remote``, ``none`` when
            refused before routing).
        latency: ``runtimed_invocation_duration_seconds{route}``: call arrival to answer.
        in_flight: ``runtimed_invocations_in_flight``: calls being handled.
        authz_lookups: ``runtimed_authz_cache_lookups_total{result}`` (``hit``, ``miss``).
        hops: ``runtimed_proxied_hops_total{direction}``: ``out`` (forwarded to an owner),
            ``in`` (accepted from a peer).
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        self.invocations = Counter(
            "runtimed_invocations_total",
            "InvokeFunction calls answered on the Service port, by gRPC code and route",
            ["code", "route"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "runtimed_invocation_duration_seconds",
            "InvokeFunction call arrival to answer, seconds",
            ["route"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "runtimed_invocations_in_flight",
            "InvokeFunction calls being handled on the Service port",
            registry=self.registry,
        )
        self.authz_lookups = Counter(
            "runtimed_authz_cache_lookups_total",
            "Authorization cache lookups, by result (hit, miss)",
            ["result"],
            registry=self.registry,
        )
        self.hops = Counter(
            "runtimed_proxied_hops_total",
            "Peer hops: out (forwarded to the owner), in (accepted from a peer)",
            ["direction"],
            registry=self.registry,
        )
        #: labelled children by label values: ``labels()`` takes a lock and builds a key on
        #: every call, and these few combinations repeat on every invocation
        self._children: dict[tuple[object, ...], Any] = {}

    def _child(self, metric: Any, **labels: str) -> Any:
        key = (id(metric), *labels.values())
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(**labels)
        return child

    def authz_lookup(self, result: str) -> None:
        """Count one authorization cache lookup with ``result`` ``hit`` or ``miss``."""
        self._child(self.authz_lookups, result=result).inc()

    def hop(self, direction: str) -> None:
        """Count one peer hop, ``direction`` ``in`` (accepted) or ``out`` (forwarded)."""
        self._child(self.hops, direction=direction).inc()

    def record(self, *, code: str, route: str, seconds: float) -> None:
        """Count one answered call with gRPC status name ``code`` on ``route``, taking ``seconds``."""
        counter = self._children.get(("invocations", code, route))
        if counter is None:
            counter = self._children[("invocations", code, route)] = self.invocations.labels(
                code=code, route=route
            )
        histogram = self._children.get(("latency", route))
        if histogram is None:
            histogram = self._children[("latency", route)] = self.latency.labels(route=route)
        counter.inc()
        histogram.observe(seconds)
