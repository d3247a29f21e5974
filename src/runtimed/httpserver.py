"""runtimed's HTTP endpoint: ``/healthz`` and ``/metrics`` (hypercorn on trio).

``/healthz`` answers 200 while the daemon's loops run (it is runtimed's own liveness, not the
Runtime Server's health, which the ``RuntimedReady`` condition reports); ``/metrics`` is the
Prometheus text format of :class:`~runtimed.metrics.RuntimedMetrics`. The ASGI app answers
``lifespan`` messages, which hypercorn on trio sends.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import trio
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from runtimed.metrics import RuntimedMetrics

__all__ = ["health_app", "serve_http"]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


async def _respond(send: Send, status: int, body: bytes, content_type: str) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", content_type.encode()),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def health_app(metrics: RuntimedMetrics, healthy: Callable[[], bool]) -> App:
    """The ASGI app: ``GET /healthz`` (200 ``ok`` or 503), ``GET /metrics``, else 404.

    Args:
        metrics: served on ``/metrics``.
        healthy: runtimed's own liveness.
    """

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        path = scope.get("path", "")
        if path == "/healthz":
            ok = healthy()
            await _respond(
                send, 200 if ok else 503, b"ok\n" if ok else b"not ready\n", "text/plain"
            )
        elif path == "/metrics":
            await _respond(send, 200, generate_latest(metrics.registry), CONTENT_TYPE_LATEST)
        else:
            await _respond(send, 404, b"not found\n", "text/plain")

    return app


async def serve_http(
    app: App,
    host: str,
    port: int,
    *,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` until cancelled.

    Args:
        app: the ASGI app.
        host: listen address. port: listen port (0 picks a free one).
        task_status: ``started(port)`` with the bound port once listening.

    Raises:
        OSError: the address cannot be bound.
    """
    from hypercorn.config import Config
    from hypercorn.trio import serve

    config = Config()
    config.bind = [f"{host}:{port}"]
    config.accesslog = None
    config.errorlog = None
    binds: list[str] = await _start(serve, app, config, task_status)
    del binds


async def _start(serve: Any, app: App, config: Any, task_status: trio.TaskStatus[int]) -> list[str]:
    async with trio.open_nursery() as nursery:
        binds: list[str] = await nursery.start(
            lambda task_status: serve(app, config, task_status=task_status)
        )
        task_status.started(int(binds[0].rsplit(":", 1)[1]))
    return binds
