"""The ``localkube apiserver`` command: kubeconfig, export line, signals, restart."""

from __future__ import annotations

import base64
import signal
import ssl
import subprocess
import sys
from pathlib import Path

import httpx
import trio
import yaml


async def _start(state_dir: Path) -> tuple[trio.Process, str]:
    process = await trio.lowlevel.open_process(
        [
            sys.executable,
            "-m",
            "localkube.cli",
            "apiserver",
            "--state-dir",
            str(state_dir),
            "--port",
            "0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert process.stdout is not None
    output = b""
    with trio.fail_after(20):
        while b"\n" not in output:
            chunk = await process.stdout.receive_some()
            assert chunk, "localkube apiserver exited before serving"
            output += chunk
    return process, output.decode().splitlines()[0]


def _client(kubeconfig: Path) -> httpx.AsyncClient:
    config = yaml.safe_load(kubeconfig.read_text())
    cluster = config["clusters"][0]["cluster"]
    context = ssl.create_default_context(
        cadata=base64.b64decode(cluster["certificate-authority-data"]).decode()
    )
    token = config["users"][0]["user"]["token"]
    return httpx.AsyncClient(
        base_url=cluster["server"], verify=context, headers={"Authorization": f"Bearer {token}"}
    )


async def _stop(process: trio.Process) -> int:
    process.send_signal(signal.SIGTERM)
    with trio.fail_after(10):
        return await process.wait()


async def test_apiserver_command_writes_kubeconfig_and_survives_restart(tmp_path: Path) -> None:
    state = tmp_path / "state"
    process, line = await _start(state)
    try:
        assert line == f"export KUBECONFIG={state / 'kubeconfig'}"
        assert (state / "kubeconfig").stat().st_mode & 0o077 == 0, "the admin kubeconfig is private"
        async with _client(state / "kubeconfig") as client:
            r = await client.post(
                "/api/v1/namespaces/default/configmaps",
                json={"metadata": {"name": "kept"}, "data": {"k": "v"}},
            )
            assert r.status_code == 201
            before = int(r.json()["metadata"]["resourceVersion"])
    finally:
        code = await _stop(process)
    assert code == 0, "SIGTERM is a clean stop"
    process, _ = await _start(state)
    try:
        async with _client(state / "kubeconfig") as client:
            kept = (await client.get("/api/v1/namespaces/default/configmaps/kept")).json()
            assert kept["data"] == {"k": "v"}
            again = (
                await client.post(
                    "/api/v1/namespaces/default/configmaps", json={"metadata": {"name": "new"}}
                )
            ).json()
            assert int(again["metadata"]["resourceVersion"]) > before
    finally:
        await _stop(process)


async def test_apiserver_command_rejects_bad_port(tmp_path: Path) -> None:
    result = await trio.run_process(
        [
            sys.executable,
            "-m",
            "localkube.cli",
            "apiserver",
            "--state-dir",
            str(tmp_path),
            "--port",
            "70000",
        ],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    assert result.returncode == 2
    assert b"--port" in result.stderr


async def test_second_server_on_the_same_state_dir_is_refused(tmp_path: Path) -> None:
    process, _ = await _start(tmp_path)
    try:
        result = await trio.run_process(
            [
                sys.executable,
                "-m",
                "localkube.cli",
                "apiserver",
                "--state-dir",
                str(tmp_path),
                "--port",
                "0",
            ],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
        assert result.returncode == 1
        assert b"is in use by another localkube process" in result.stderr
        assert b"Traceback" not in result.stderr
    finally:
        await _stop(process)
