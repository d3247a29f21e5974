"""The shared /metrics + /healthz endpoint (control plane, runtimed, gateway)."""

from __future__ import annotations

import httpx
import pytest
import trio
from prometheus_client import CollectorRegistry, Counter

from krt.metrics_server import http_address, metrics_app, serve_http


async def test_metrics_healthz_and_everything_else() -> None:
    registry = CollectorRegistry()
    Counter("krt_test_things", "things", registry=registry).inc(3)
    alive = [True]
    async with trio.open_nursery() as nursery:
        app = metrics_app(registry, healthy=lambda: alive[0])
        port = await nursery.start(serve_http, app, "127.0.0.1", 0)
        async with httpx.AsyncClient(base_url=f"http://{http_address('127.0.0.1', port)}") as http:
            metrics = await http.get("/metrics")
            assert metrics.status_code == 200
            assert "krt_test_things_total 3.0" in metrics.text
            assert metrics.headers["content-type"].startswith("text/plain")
            assert (await http.get("/healthz")).text == "ok\n"
            alive[0] = False
            unhealthy = await http.get("/healthz")
            assert (unhealthy.status_code, unhealthy.text) == (503, "not ready\n")
            assert (await http.get("/")).status_code == 404
            assert (await http.post("/metrics")).status_code == 404
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize(
    ("host", "expected"),
    [("127.0.0.1", "127.0.0.1:80"), ("::1", "[::1]:80"), ("[::1]", "[::1]:80"), ("", ":80")],
)
def test_http_address_brackets_ipv6(host: str, expected: str) -> None:
    assert http_address(host, 80) == expected
