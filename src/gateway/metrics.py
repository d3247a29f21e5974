"""Prometheus metrics of the gateway.

Issue 8, Observability: invocations by HTTP status code, a latency histogram and the number
of invocations in flight; plus upstream connection attempts and open connections. Metrics
live in their own :class:`~prometheus_client.CollectorRegistry` (one per gateway), so tests
and several gateways in one process never collide. ``/metrics`` and ``/healthz`` are served
on a separate plain-HTTP port (``--metrics-addr``) by :func:`krt.metrics_server.metrics_app`:
they carry no caller data and no tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

#: Latency buckets (seconds): sub-millisecond resolution where the target p50/p99 live.
LATENCY_BUCKETS: Final = (
    0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0, 60.0,
)  # fmt: skip
#: Status code recorded when the client went away before the response (nginx's convention).
CLIENT_CLOSED_CODE: Final = "499"


class GatewayMetrics:
    """The gateway's metrics in their own registry.

    Attributes:
        registry: the registry to expose.
        invocations: ``krt_gateway_invocations_total{code}``: finished invoke requests by
            HTTP status (``499``: the client disconnected first).
        latency: ``krt_gateway_invocation_duration_seconds``: request start to response
            (seconds).
        in_flight: ``krt_gateway_invocations_in_flight``: invoke requests being handled.
        connects: ``krt_gateway_upstream_connects_total{result}``: connection attempts to
            Runtime Services (``ok``/``error``).
        upstream_connections: ``krt_gateway_upstream_connections``: open connections.
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.invocations = Counter(
            "krt_gateway_invocations",
            "Invoke requests answered, by HTTP status code.",
            ["code"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "krt_gateway_invocation_duration_seconds",
            "Time from an invoke request's arrival to its response, in seconds.",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "krt_gateway_invocations_in_flight",
            "Invoke requests currently being handled.",
            registry=self.registry,
        )
        self.connects = Counter(
            "krt_gateway_upstream_connects",
            "Connection attempts to Runtime Services, by result.",
            ["result"],
            registry=self.registry,
        )
        self.upstream_connections = Gauge(
            "krt_gateway_upstream_connections",
            "Open gRPC connections to Runtime Services.",
            registry=self.registry,
        )
        self._by_code: dict[int | str, Any] = {}

    def watch_connections(self, open_connections: Callable[[], int]) -> None:
        """Report ``open_connections()`` as the upstream connections gauge at scrape time."""
        self.upstream_connections.set_function(open_connections)

    def record(self, code: int | str, seconds: float) -> None:
        """Count one finished invoke request with HTTP status ``code`` taking ``seconds``."""
        counter = self._by_code.get(code)
        if counter is None:  # labels() locks and builds a key on every call: keep the child
            counter = self._by_code[code] = self.invocations.labels(code=str(code))
        counter.inc()
        self.latency.observe(seconds)
