"""``krt invoke`` against localkube (the Run) and a fake gateway (the HTTPS contract)."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from krt.cli.exitcodes import ExitCode
from krt.kube.client import Kube
from krt.kube.resources import RUNS
from localkube.apiserver import ApiServerHandle

from .conftest import NS, CliRun, set_status, task_manifest
from .fake_gateway import GATEWAY_HOST, FakeGateway, running_gateway


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[FakeGateway]:
    async with running_gateway(tmp_path) as gw:
        yield gw


async def ready_function(
    kube: Kube, name: str, *, host: str, port: int, ca_pem: bytes | None, phase: str = "Ready"
) -> str:
    """Create a function Run and make it Ready with an endpoint at host:port; its URL."""
    created = await kube.create(
        RUNS,
        {
            "metadata": {"name": name, "namespace": NS},
            "spec": {
                "runtime": "python",
                "source": {"inline": "def invoke(r): return r", "inlinePath": "main.py"},
                "mode": {"function": {"handler": "main.invoke"}},
            },
        },
    )
    uid = created["metadata"]["uid"]
    url = f"https://{host}:{port}/v1/namespaces/{NS}/runtimes/python/functions/{uid}:invoke"
    endpoint: dict[str, Any] = {"protocol": "HTTPS", "url": url}
    if ca_pem is not None:
        endpoint["caBundle"] = base64.b64encode(ca_pem).decode()
    await set_status(
        kube,
        name,
        {"phase": "Running", "attempt": 1, "assignedPod": "rt-1", "assignedPodUID": "p-1"},
    )
    status: dict[str, Any] = {"phase": phase, "endpoint": endpoint}
    if phase == "Ready":
        status["conditions"] = [
            {
                "type": "Ready",
                "status": "True",
                "reason": "FunctionRegistered",
                "lastTransitionTime": "2026-11-29T08:00:00Z",
                "message": "",
            }
        ]
    await set_status(kube, name, status)
    return url


async def test_invoke_posts_once_with_the_token_and_prints_output_and_metadata(
    kube: Kube, cli: CliRun, gateway: FakeGateway, apiserver: ApiServerHandle
) -> None:
    url = await ready_function(
        kube, "fn", host="127.0.0.1", port=gateway.port, ca_pem=gateway.ca_pem
    )
    result = await cli(
        "invoke", "fn", "-d", '{"x": [1, 2]}', "--invocation-id", "job-42", "--timeout", "10s"
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"echo": {"x": [1, 2]}}
    meta = result.stderr.strip()
    assert meta.startswith("invocation job-42  latency ")
    assert meta.endswith('outputs {"summary":"done"}')
    [request] = gateway.requests
    assert request["path"] == url.split(str(gateway.port), 1)[1]
    assert request["headers"]["authorization"] == f"Bearer {apiserver.admin_token}"
    assert request["headers"]["content-type"] == "application/json"
    assert request["headers"]["x-kruntime-invocation-id"] == "job-42"
    assert request["headers"]["x-kruntime-timeout"] == "10000"
    assert request["body"] == b'{"x": [1, 2]}'


async def test_invoke_reads_stdin_and_files(
    kube: Kube, cli: CliRun, gateway: FakeGateway, tmp_path: Path
) -> None:
    await ready_function(kube, "fn", host="127.0.0.1", port=gateway.port, ca_pem=gateway.ca_pem)
    piped = await cli("invoke", "fn", input='{"from": "stdin"}')
    assert json.loads(piped.stdout) == {"echo": {"from": "stdin"}}
    (tmp_path / "in.json").write_text('{"from": "file"}')
    from_file = await cli("invoke", "fn", "-d", f"@{tmp_path / 'in.json'}")
    assert json.loads(from_file.stdout) == {"echo": {"from": "file"}}
    assert "x-kruntime-invocation-id" not in gateway.requests[0]["headers"]
    assert from_file.stderr.startswith("invocation generated-0001  ")


@pytest.mark.parametrize(
    ("invocation_id", "code", "text"),
    [
        ("status-400", ExitCode.INVALID, "HTTP 400 InvalidJSON: fake InvalidJSON"),
        ("status-401", ExitCode.UNAUTHENTICATED, "the token was rejected"),
        ("status-403", ExitCode.FORBIDDEN, "ask for 'get' on runs.kruntimes.io"),
        ("status-404", ExitCode.NOT_FOUND, "HTTP 404 FunctionNotFound"),
        ("status-413", ExitCode.TOO_LARGE, "exceeds 1 MiB"),
        ("status-415", ExitCode.INVALID, "only accepts application/json"),
        ("status-429", ExitCode.TOO_MANY_REQUESTS, "Retry-After 3s"),
        (
            "status-500-HandlerError",
            ExitCode.HANDLER_ERROR,
            "handler raised; what it printed: krt logs fn",
        ),
        ("status-500", ExitCode.SERVER_ERROR, "HTTP 500 InternalError"),
        ("status-503", ExitCode.UNAVAILABLE, "retry later; Retry-After 3s"),
        ("status-504", ExitCode.TIMED_OUT, "raise --timeout"),
        (
            "status-502-InvocationInterrupted",
            ExitCode.SERVER_ERROR,
            "HTTP 502 InvocationInterrupted: fake InvocationInterrupted (the invocation may "
            "have run; retry only if the handler is idempotent)",
        ),
    ],
)
async def test_gateway_errors_map_to_exit_codes_with_one_line(
    kube: Kube, cli: CliRun, gateway: FakeGateway, invocation_id: str, code: ExitCode, text: str
) -> None:
    await ready_function(kube, "fn", host="127.0.0.1", port=gateway.port, ca_pem=gateway.ca_pem)
    result = await cli("invoke", "fn", "-d", "{}", "--invocation-id", invocation_id)
    assert result.exit_code == code, result.output
    assert result.stdout == ""
    assert len(result.stderr.splitlines()) == 1
    assert result.stderr.startswith("error: HTTP ")
    assert text in result.stderr
    assert result.stderr.rstrip().endswith(f"[invocation {invocation_id}]")
    assert len(gateway.requests) == 1  # never retried


async def test_gateway_url_override_keeps_tls_checked_against_the_endpoint_host(
    kube: Kube, cli: CliRun, gateway: FakeGateway
) -> None:
    # The endpoint names the in-cluster Service, which does not resolve here.
    await ready_function(kube, "fn", host=GATEWAY_HOST, port=443, ca_pem=gateway.ca_pem)
    unreachable = await cli("invoke", "fn", "-d", "{}")
    assert unreachable.exit_code == ExitCode.UNREACHABLE
    assert "use --gateway-url with kubectl port-forward" in unreachable.stderr
    forwarded = await cli(
        "invoke", "fn", "-d", "{}", env={"KRT_GATEWAY_URL": f"https://127.0.0.1:{gateway.port}"}
    )
    assert forwarded.exit_code == 0, forwarded.output
    assert gateway.requests[-1]["path"].startswith("/v1/namespaces/default/runtimes/python/")


async def test_tls_is_verified_against_the_ca_bundle(
    kube: Kube, cli: CliRun, gateway: FakeGateway
) -> None:
    import trustme

    other_ca = trustme.CA().cert_pem.bytes()
    await ready_function(kube, "fn", host="127.0.0.1", port=gateway.port, ca_pem=other_ca)
    result = await cli("invoke", "fn", "-d", "{}")
    assert result.exit_code == ExitCode.UNREACHABLE
    assert "CERTIFICATE_VERIFY_FAILED" in result.stderr
    assert "does not chain to status.endpoint.caBundle" in result.stderr
    assert "port-forward" not in result.stderr
    assert gateway.requests == []


async def test_tls_failure_without_a_ca_bundle_says_the_run_publishes_none(
    kube: Kube, cli: CliRun, gateway: FakeGateway
) -> None:
    """A user test: with no caBundle the message named status.endpoint.caBundle anyway."""
    await ready_function(kube, "fn", host="127.0.0.1", port=gateway.port, ca_pem=None)
    result = await cli("invoke", "fn", "-d", "{}")
    assert result.exit_code == ExitCode.UNREACHABLE
    assert "CERTIFICATE_VERIFY_FAILED" in result.stderr
    assert "the Run publishes no status.endpoint.caBundle" in result.stderr
    assert gateway.requests == []


@pytest.mark.parametrize(
    ("phase", "code", "text"),
    [
        ("Running", ExitCode.UNAVAILABLE, "is not Ready (phase Running"),
        ("Timeout", ExitCode.RUN_UNSUCCESSFUL, "has ended (Timeout"),
    ],
)
async def test_invoke_checks_ready_before_posting(
    kube: Kube, cli: CliRun, gateway: FakeGateway, phase: str, code: ExitCode, text: str
) -> None:
    await ready_function(
        kube, "fn", host="127.0.0.1", port=gateway.port, ca_pem=gateway.ca_pem, phase=phase
    )
    result = await cli("invoke", "fn", "-d", "{}")
    assert result.exit_code == code, result.output
    assert text in result.stderr
    assert gateway.requests == []


async def test_a_task_run_cannot_be_invoked(kube: Kube, cli: CliRun) -> None:
    await kube.create(RUNS, task_manifest("task"))
    result = await cli("invoke", "task", "-d", "{}")
    assert result.exit_code == ExitCode.INVALID
    assert "is a task Run" in result.stderr


@pytest.mark.parametrize("how", ["flag", "env"])
async def test_service_account_name_without_namespace_uses_the_commands_namespace(
    kube: Kube,
    cli: CliRun,
    gateway: FakeGateway,
    apiserver: ApiServerHandle,
    tmp_path: Path,
    how: str,
) -> None:
    """F7: `--service-account NAME` (or KRT_SERVICE_ACCOUNT=NAME) without -n was exit 2;
    F8: with a kubeconfig token the ServiceAccount's token is sent, not the kubeconfig's."""
    from krt.kube.resources import SERVICEACCOUNTS

    from .test_cli_credentials import whoami

    await kube.create(SERVICEACCOUNTS, {"metadata": {"name": "invoker", "namespace": NS}})
    await ready_function(kube, "fn", host="127.0.0.1", port=gateway.port, ca_pem=gateway.ca_pem)
    if how == "flag":
        result = await cli("invoke", "fn", "-d", "{}", "--service-account", "invoker")
    else:
        result = await cli("invoke", "fn", "-d", "{}", env={"KRT_SERVICE_ACCOUNT": "invoker"})
    assert result.exit_code == 0, result.output
    [request] = gateway.requests
    token = request["headers"]["authorization"].removeprefix("Bearer ")
    assert token != apiserver.admin_token
    assert await whoami(apiserver, token, tmp_path) == "system:serviceaccount:default:invoker"
