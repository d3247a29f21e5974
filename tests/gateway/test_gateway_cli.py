"""``krt-gateway``: refuses plaintext, parses its options, runs as a process and stops on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import trio
from click.testing import CliRunner
from conftest import TLSFiles

from gateway.__main__ import build_resolver, main
from gateway.server import ConfigError, GatewayConfig
from gateway.targets import (
    DnsResolver,
    HostsFileResolver,
    StaticResolver,
    Target,
    parse_hosts,
    parse_target_override,
)


@pytest.mark.parametrize(
    "args",
    [[], ["--tls-cert-file", "/x.crt"], ["--tls-key-file", "/x.key"]],
)
def test_plaintext_is_refused(args: list[str]) -> None:
    result = CliRunner().invoke(main, args, env={})
    assert result.exit_code == 2
    assert "--tls-cert-file and --tls-key-file are required" in result.output
    assert "plaintext is refused" in result.output


def test_unreadable_certificate_is_a_usage_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main,
        ["--tls-cert-file", str(tmp_path / "no.crt"), "--tls-key-file", str(tmp_path / "no.key")],
    )
    assert result.exit_code == 2
    assert "does not exist or is not readable" in result.output


def test_config_rejects_plaintext_and_bad_numbers(tls_files: TLSFiles, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--tls-cert-file is required"):
        GatewayConfig(tls_cert_file="", tls_key_file=tls_files.key_file)
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate")
    with pytest.raises(ConfigError, match="usable certificate"):
        GatewayConfig(tls_cert_file=str(garbage), tls_key_file=str(garbage))
    files = {"tls_cert_file": tls_files.cert_file, "tls_key_file": tls_files.key_file}
    with pytest.raises(ConfigError, match="--default-timeout"):
        GatewayConfig(**files, default_timeout_seconds=60, max_timeout_seconds=30)
    with pytest.raises(ConfigError, match="--retry-after"):
        GatewayConfig(**files, retry_after_seconds=0)
    with pytest.raises(ConfigError, match="--connect-timeout"):
        GatewayConfig(**files, connect_timeout_seconds=0)


def test_target_overrides_parse_and_reject_garbage() -> None:
    assert parse_target_override("runtime-py.ns.svc=127.0.0.5:9090") == (
        "runtime-py.ns.svc",
        Target("127.0.0.5", 9090),
    )
    assert parse_target_override("a.b.svc=[::1]:80")[1] == Target("::1", 80)
    for bad in ["nope", "a=b", "a=host:0", "a=host:99999", "=h:1", "a=:5"]:
        with pytest.raises(ValueError, match="target"):
            parse_target_override(bad)


async def test_resolvers(tmp_path: Path) -> None:
    assert await DnsResolver().resolve("demo", "python") == Target("runtime-python.demo.svc", 9090)
    hosts = tmp_path / "hosts"
    hosts.write_text(
        "# localkube\n127.0.200.7 runtime-python.demo.svc runtime-python.demo.svc.cluster.local\n"
    )
    resolver = HostsFileResolver(str(hosts), port=9090)
    found = await resolver.resolve("demo", "python")
    assert found == Target("127.0.200.7", 9090)
    assert found.server_name == "runtime-python.demo.svc"  # TLS verifies the Service name
    assert await resolver.resolve("demo", "bash") == Target("runtime-bash.demo.svc", 9090)
    hosts.write_text("127.0.200.9 runtime-python.demo.svc\n")  # re-read on every resolve
    assert await resolver.resolve("demo", "python") == Target("127.0.200.9", 9090)
    static = StaticResolver({"runtime-python.demo.svc": Target("10.0.0.1", 1)}, resolver)
    assert await static.resolve("demo", "python") == Target("10.0.0.1", 1)
    assert (await static.resolve("demo", "python")).server_name == "runtime-python.demo.svc"
    assert await static.resolve("demo", "bash") == Target("runtime-bash.demo.svc", 9090)
    assert parse_hosts("1.2.3.4 A.b # c\n\n5.6.7.8 a.b\n") == {"a.b": "1.2.3.4"}


async def test_build_resolver_from_options(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.200.1 runtime-python.demo.svc\n")
    assert isinstance(build_resolver(None, (), 9090), DnsResolver)
    resolver = build_resolver(str(hosts), ("runtime-bash.demo.svc=127.0.0.9:5000",), 7000)
    assert await resolver.resolve("demo", "python") == Target("127.0.200.1", 7000)
    assert await resolver.resolve("demo", "bash") == Target("127.0.0.9", 5000)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_gateway_process_serves_and_stops_on_sigterm(tls_files: TLSFiles) -> None:
    https_port, metrics_port = _free_port(), _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KRT_")}
    env["KRT_GATEWAY_TLS_CERT_FILE"] = tls_files.cert_file
    env["KRT_GATEWAY_TLS_KEY_FILE"] = tls_files.key_file
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "gateway", "--bind", f"127.0.0.1:{https_port}",
         "--metrics-addr", f"127.0.0.1:{metrics_port}", "--target",
         "runtime-python.demo.svc=127.0.0.1:1"],
        env=env,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        async with httpx.AsyncClient(verify=tls_files.client_context()) as client:
            with trio.fail_after(10):
                while True:
                    try:
                        health = await client.get(f"http://127.0.0.1:{metrics_port}/healthz")
                        break
                    except httpx.ConnectError:
                        await trio.sleep(0.05)
            assert health.status_code == 200
            response = await client.post(
                f"https://127.0.0.1:{https_port}/v1/namespaces/demo/runtimes/python/functions/u1:invoke",
                content=b"{}",
                headers={"authorization": "Bearer t", "content-type": "application/json"},
            )
            assert response.status_code == 503  # nothing listens on the target port
        process.send_signal(signal.SIGTERM)
        with trio.fail_after(10):
            assert await process.wait() == 0
        assert process.stderr is not None
        output = b""
        while chunk := await process.stderr.receive_some(1 << 16):
            output += chunk
        lines = [json.loads(line) for line in output.splitlines() if line.startswith(b"{")]
        invoke_lines = [line for line in lines if line["logger"] == "gateway.invoke"]
        assert invoke_lines[0]["code"] == 503
        assert invoke_lines[0]["run_uid"] == "u1"
        assert all("Bearer" not in json.dumps(line) for line in lines)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
