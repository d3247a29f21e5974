"""Readiness (RuntimedReady follows Health), /healthz and /metrics, JSON logs, the CLI."""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path
from typing import Any

import httpx
import trio
import trio.testing
from click.testing import CliRunner
from runtimed_fakes import FakeRuntimeServer

from krt.kube.clock import TrioLinkedClock
from krt.kube.errors import ConnectionFailed
from krt.logs import JsonFormatter
from runtimed.__main__ import main
from runtimed.httpserver import health_app, serve_http
from runtimed.metrics import RuntimedMetrics
from runtimed.readiness import HealthState, ReadinessLoop, readiness_condition


def test_condition_shape() -> None:
    up = readiness_condition(HealthState(True, "RuntimeServerHealthy", "ok"), now="T")
    assert up == {
        "type": "kruntimes.io/RuntimedReady",
        "status": "True",
        "reason": "RuntimeServerHealthy",
        "message": "ok",
        "lastTransitionTime": "T",
    }
    down = readiness_condition(HealthState(False, "RuntimeServerUnreachable", "x" * 5000), now="T")
    assert down["status"] == "False"
    assert len(down["message"]) == 1024


async def test_readiness_writes_only_on_change(autojump_clock: trio.testing.MockClock) -> None:
    writes: list[dict[str, Any]] = []
    async with trio.open_nursery() as nursery:
        server = FakeRuntimeServer(nursery)

        async def patch(condition: dict[str, Any]) -> None:
            writes.append(condition)

        loop = ReadinessLoop(server, patch, clock=TrioLinkedClock(), period=1.0)
        await nursery.start(loop.run)
        assert [w["status"] for w in writes] == ["True"]  # written once at start-up
        await trio.sleep(10)
        assert len(writes) == 1  # steady: nothing written
        server.healthy = False
        await trio.sleep(1.5)
        assert [(w["status"], w["reason"]) for w in writes][-1] == (
            "False",
            "RuntimeServerUnhealthy",
        )
        server.healthy = True
        server.down = True
        await trio.sleep(1.5)
        assert writes[-1]["reason"] == "RuntimeServerUnreachable"
        server.down = False
        await trio.sleep(1.5)
        assert writes[-1]["status"] == "True"
        assert len(writes) == 4
        nursery.cancel_scope.cancel()


async def test_readiness_retries_a_failed_write(autojump_clock: trio.testing.MockClock) -> None:
    writes: list[str] = []
    fail = [True]
    async with trio.open_nursery() as nursery:
        server = FakeRuntimeServer(nursery)

        async def patch(condition: dict[str, Any]) -> None:
            if fail[0]:
                raise ConnectionFailed("apiserver down")
            writes.append(condition["status"])

        loop = ReadinessLoop(server, patch, clock=TrioLinkedClock(), period=1.0)
        await nursery.start(loop.run)
        assert loop.written is None
        fail[0] = False
        await trio.sleep(1.5)
        assert writes == ["True"]
        nursery.cancel_scope.cancel()


async def test_healthz_and_metrics_over_http() -> None:
    metrics = RuntimedMetrics()
    metrics.task_runs.labels(outcome="Succeeded").inc()
    alive = [True]
    async with trio.open_nursery() as nursery:
        port = await nursery.start(
            serve_http, health_app(metrics, lambda: alive[0]), "127.0.0.1", 0
        )
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            assert (await http.get("/healthz")).status_code == 200
            body = (await http.get("/metrics")).text
            assert 'runtimed_task_runs_total{outcome="Succeeded"} 1.0' in body
            assert (await http.get("/nope")).status_code == 404
            alive[0] = False
            assert (await http.get("/healthz")).status_code == 503
        nursery.cancel_scope.cancel()


def test_json_log_lines_carry_run_uid_and_attempt() -> None:
    record = logging.LogRecord("runtimed.task", logging.INFO, "", 0, "hello %s", ("x",), None)
    record.run_uid = "u1"
    record.attempt = 2
    record.stream = "stdout"
    data = json.loads(JsonFormatter().format(record))
    assert data["message"] == "hello x"
    assert (data["run_uid"], data["attempt"], data["stream"], data["level"]) == (
        "u1",
        2,
        "stdout",
        "info",
    )


def test_cli_requires_identity_and_names_the_variable() -> None:
    result = CliRunner().invoke(main, [], env={"POD_NAME": "", "POD_NAMESPACE": "", "POD_UID": ""})
    assert result.exit_code == 2
    assert "--pod-name" in result.output


def test_cli_rejects_a_bad_server_address(tmp_path: Path) -> None:
    env = {
        "POD_NAME": "p",
        "POD_NAMESPACE": "ns",
        "POD_UID": "u",
        "RUNTIME_SERVER_ADDRESS": "nope",
        "WORKSPACE_DIR": str(tmp_path),
    }
    result = CliRunner().invoke(main, [], env=env)
    assert result.exit_code == 2
    assert "--runtime-server" in result.output
    assert "HOST:PORT" in result.output


def test_cli_help_lists_env_fallbacks() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    for flag in ("--pod-uid", "--runtime-server", "--workspace-dir", "--path-root", "--http-port"):
        assert flag in result.output


def test_runtimed_logs_everything_but_keeps_hpack_quiet() -> None:
    """hpack logs raw headers (bearer tokens) at DEBUG: runtimed's setup keeps it at WARNING."""
    from krt import logs
    from runtimed.__main__ import QUIET_LIBRARIES

    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    stream = io.StringIO()
    try:
        logs.configure(
            level="debug", floors=dict.fromkeys(QUIET_LIBRARIES, logging.WARNING), stream=stream
        )
        logging.getLogger("hpack.hpack").debug("authorization: Bearer secret")
        logging.getLogger("runtimed.tasks").debug("claimed", extra={"run_uid": "u1"})
    finally:
        root.handlers[:], root.level = saved
        for name in QUIET_LIBRARIES:
            logger = logging.getLogger(name)
            logger.handlers.clear()
            logger.propagate = True
            logger.setLevel(logging.NOTSET)
    (line,) = stream.getvalue().splitlines()
    data = json.loads(line)
    assert (data["logger"], data["message"], data["run_uid"]) == ("runtimed.tasks", "claimed", "u1")
    assert data["time"].endswith("Z")
