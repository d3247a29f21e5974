"""runtimed's HTTP endpoint: ``/healthz`` and ``/metrics`` (:mod:`krt.metrics_server`).

``/healthz`` answers 200 while the daemon's loops run (it is runtimed's own liveness, not the
Runtime Server's health, which the ``RuntimedReady`` condition reports); ``/metrics`` is the
Prometheus exposition of :class:`~runtimed.metrics.RuntimedMetrics`. The app and the server
are the project's shared ones; this module binds them to runtimed's metrics.
"""

from __future__ import annotations

from collections.abc import Callable

from krt.asgi import App
from krt.metrics_server import metrics_app, serve_http
from runtimed.metrics import RuntimedMetrics

__all__ = ["health_app", "serve_http"]


def health_app(metrics: RuntimedMetrics, healthy: Callable[[], bool]) -> App:
    """The ASGI app: ``GET /healthz`` (200 ``ok`` or 503), ``GET /metrics``, else 404.

    Args:
        metrics: served on ``/metrics``.
        healthy: runtimed's own liveness.
    """
    return metrics_app(metrics.registry, healthy=healthy)
