"""The ``krt-controlplane`` process: options, /metrics, leader Lease, clean SIGTERM (issue 5 item 6)."""

from __future__ import annotations

import functools
import io
import json
import logging
import signal
import socket
import subprocess
import sys
from pathlib import Path

import click
import httpx
import pytest
import trio
from click.testing import CliRunner

from krt.controlplane.__main__ import configure_logging, main, parse_listen_address
from krt.kube.client import Kube
from krt.kube.errors import NotFound
from krt.kube.resources import LEASES
from localkube.cluster import ClusterHandle

from .harness import NS, running_controlplane, wait_for

SCRIPT = Path(sys.executable).parent / "krt-controlplane"


def test_listen_address_forms() -> None:
    assert parse_listen_address(":8080") == ("0.0.0.0", 8080)
    assert parse_listen_address("127.0.0.1:9") == ("127.0.0.1", 9)
    assert parse_listen_address("[::1]:9") == ("::1", 9)
    assert parse_listen_address("0") is None
    assert parse_listen_address("") is None
    for bad in ("8080", "host:", "host:99999", "host:x"):
        with pytest.raises(click.BadParameter, match="is not host:port"):
            parse_listen_address(bad)


def test_bad_metrics_addr_is_a_usage_error() -> None:
    result = CliRunner().invoke(main, ["--metrics-addr", "nope"])
    assert result.exit_code == 2
    assert "--metrics-addr" in result.output


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_metrics_endpoint_serves_control_plane_metrics(kube: Kube) -> None:
    async with running_controlplane(kube, metrics_port=0) as plane:
        assert plane.metrics_url is not None
        async with httpx.AsyncClient() as client:
            answer = await client.get(f"{plane.metrics_url}/metrics")
    assert answer.status_code == 200
    text = answer.text
    for name in (
        'krt_controlplane_queue_depth{queue="scheduler"}',
        "krt_controlplane_bind_latency_seconds_bucket",
        "krt_controlplane_bind_conflicts_total",
        "krt_controlplane_binds_total",
        "krt_controlplane_is_leader 1.0",
    ):
        assert name in text


@pytest.mark.skipif(not SCRIPT.exists(), reason="krt-controlplane is not installed")
async def test_process_leads_serves_metrics_and_releases_lease_on_sigterm(
    kube: Kube, cluster: ClusterHandle
) -> None:
    port = _free_port()
    argv = [
        str(SCRIPT),
        "--kubeconfig",
        str(cluster.apiserver.kubeconfig_path),
        "--namespace",
        NS,
        "--lease-namespace",
        NS,
        "--identity",
        "cp-test",
        "--metrics-addr",
        f"127.0.0.1:{port}",
        "--log-level",
        "WARNING",
    ]
    async with trio.open_nursery() as nursery:
        process: trio.Process = await nursery.start(
            functools.partial(trio.run_process, argv, check=False, stderr=subprocess.PIPE)
        )
        async with httpx.AsyncClient() as client:

            async def leading() -> bool:
                try:
                    answer = await client.get(f"http://127.0.0.1:{port}/metrics")
                except httpx.TransportError:
                    return False
                return "krt_controlplane_is_leader 1.0" in answer.text

            await wait_for(leading, seconds=15)
        lease = await kube.get(LEASES, "krt-controlplane", NS)
        assert lease["spec"]["holderIdentity"] == "cp-test"
        process.send_signal(signal.SIGTERM)
        with trio.fail_after(10):
            code = await process.wait()
    assert code == 0
    try:
        lease = await kube.get(LEASES, "krt-controlplane", NS)
    except NotFound:  # pragma: no cover - released leases are kept, but absence is fine too
        return
    assert lease["spec"]["holderIdentity"] == ""


def test_logging_is_json_lines_without_a_line_per_api_request() -> None:
    """httpx logs every request at INFO; the control plane keeps it at WARNING (JSON lines)."""
    names = ("", "httpx", "httpcore", "hpack")
    saved = {
        name: (list(logger.handlers), logger.level, logger.propagate)
        for name in names
        for logger in [logging.getLogger(name)]
    }
    stream = io.StringIO()
    try:
        configure_logging("INFO")
        for name in names:  # point the installed handler at our buffer
            for handler in logging.getLogger(name).handlers:
                assert isinstance(handler, logging.StreamHandler)
                handler.setStream(stream)
        logging.getLogger("httpx").info('HTTP Request: GET https://x/api "HTTP/1.1 200 OK"')
        logging.getLogger("krt.controlplane.scheduler_loop").info("bound")
        lines = [json.loads(line) for line in stream.getvalue().splitlines()]
        assert [line["message"] for line in lines] == ["bound"]
        assert logging.getLogger("httpx").getEffectiveLevel() == logging.WARNING
    finally:
        for name, (handlers, level, propagate) in saved.items():
            logger = logging.getLogger(name)
            logger.handlers[:] = handlers
            logger.setLevel(level)
            logger.propagate = propagate
