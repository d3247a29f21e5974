"""The plain-HTTP ``/metrics`` and ``/healthz`` endpoint every kruntimes process serves.

The control plane, runtimed and the gateway each expose their own Prometheus registry on a
plain-HTTP port (it carries no tokens) next to a liveness answer. ``/metrics`` is
``prometheus_client.make_asgi_app`` (text or OpenMetrics format as the scraper asks, gzip
when accepted); this module adds ``/healthz``, a 404 for anything else, and the ``lifespan``
answers hypercorn on trio waits for (DESIGN.md, "Dependency notes"). :func:`serve_http`
serves any ASGI app with hypercorn on trio and reports the bound port.
"""

from __future__ import annotations

from collections.abc import Callable

import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from prometheus_client import CollectorRegistry, make_asgi_app

from krt.asgi import App, Receive, Scope, Send, answer_lifespan, send_response

__all__ = ["http_address", "metrics_app", "serve_http"]

_TEXT = [("content-type", "text/plain")]


def http_address(host: str, port: int) -> str:
    """``host:port`` for a URL or a hypercorn bind (an IPv6 ``host`` gets brackets)."""
    bracket = ":" in host and not host.startswith("[")
    return f"[{host}]:{port}" if bracket else f"{host}:{port}"


def _always_healthy() -> bool:
    return True


def metrics_app(
    registry: CollectorRegistry, *, healthy: Callable[[], bool] = _always_healthy
) -> App:
    """The ASGI app: ``GET``/``HEAD`` ``/metrics`` and ``/healthz``, everything else 404.

    Args:
        registry: the Prometheus registry served on ``/metrics``.
        healthy: the process's own liveness: ``/healthz`` answers 200 ``ok`` while it
            returns true, 503 ``not ready`` otherwise.
    """
    prometheus = make_asgi_app(registry=registry)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await answer_lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        if scope.get("method") not in ("GET", "HEAD"):
            await send_response(send, 404, b"not found\n", _TEXT)
        elif scope.get("path") == "/metrics":
            await prometheus(scope, receive, send)  # type: ignore[arg-type]
        elif scope.get("path") == "/healthz":
            ok = healthy()
            await send_response(send, 200 if ok else 503, b"ok\n" if ok else b"not ready\n", _TEXT)
        else:
            await send_response(send, 404, b"not found\n", _TEXT)

    return app


async def serve_http(
    app: App,
    host: str,
    port: int,
    *,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` over plain HTTP until cancelled (no access log).

    Args:
        app: the ASGI app.
        host: listen address (IPv6 without brackets). port: listen port (0 picks a free one).
        task_status: ``started(port)`` with the bound port once listening.

    Raises:
        OSError: the address cannot be bound.
    """
    config = Config()
    config.bind = [http_address(host, port)]
    config.accesslog = None
    config.errorlog = None

    async def hypercorn(*, task_status: trio.TaskStatus[list[str]]) -> None:
        await serve(app, config, task_status=task_status)  # type: ignore[arg-type]

    async with trio.open_nursery() as nursery:
        binds: list[str] = await nursery.start(hypercorn)
        task_status.started(int(binds[0].rsplit(":", 1)[1]))
