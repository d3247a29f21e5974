"""The Runtime Server command line: argument checks and a real ``krt-python-runtime`` process."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import purerpc
import pytest
import trio
from click.testing import CliRunner

from krt.proto.executor.v1 import runtime_grpc
from krt.proto.executor.v1 import runtime_pb2 as pb
from servers.common.cli import build_command, parse_listen
from servers.python.adapter import PythonAdapter

PROG = "krt-python-runtime"


def _script() -> list[str]:
    installed = Path(sys.executable).parent / PROG
    return [str(installed)] if installed.exists() else [sys.executable, "-m", "servers.python"]


def test_help_shows_the_options_and_an_example() -> None:
    result = CliRunner().invoke(build_command(PythonAdapter, prog=PROG), ["--help"])
    assert result.exit_code == 0
    assert "--listen HOST:PORT" in result.output
    assert "--work-dir" in result.output
    assert f"{PROG} --listen 127.0.0.1:9090 --work-dir" in result.output


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--work-dir", "w"], "Missing option '--listen'"),
        (["--listen", "127.0.0.1:1"], "Missing option '--work-dir'"),
        (["--listen", "nope", "--work-dir", "w"], "must be HOST:PORT"),
        (
            ["--listen", "127.0.0.1:99999", "--work-dir", "w"],
            "port must be a number from 0 to 65535",
        ),
        (["--listen", "127.0.0.1:http", "--work-dir", "w"], "port must be a number"),
        (["--listen", "::1:80", "--work-dir", "w"], "brackets"),
        (["--listen", "[nothex]:80", "--work-dir", "w"], "not an IPv6 address"),
        (["--listen", "127.0.0.1:0", "--work-dir", "afile"], "not a directory"),
    ],
)
def test_bad_arguments_are_usage_errors(
    args: list[str], fragment: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("")
    result = CliRunner().invoke(build_command(PythonAdapter, prog=PROG), args)
    assert result.exit_code == 2, result.output
    assert fragment in result.output


def test_parse_listen_forms() -> None:
    assert parse_listen("127.0.0.1:9090") == ("127.0.0.1", 9090)
    assert parse_listen("[::1]:0") == ("::1", 0)
    assert parse_listen(":9090") == ("", 9090)
    assert parse_listen("localhost:1") == ("localhost", 1)


def test_module_entry_point_has_help() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "servers.python", "--help"],
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert result.returncode == 0
    assert "--listen" in result.stdout


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


async def _read_listening_port(stream: trio.abc.ReceiveStream) -> int:
    buffer = b""
    while True:
        chunk = await stream.receive_some(4096)
        assert chunk, f"server exited early: {buffer.decode()}"
        buffer += chunk
        for line in buffer.splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if record.get("msg") == "listening":
                return int(record["port"])


async def test_real_process_serves_and_stops_on_sigterm(tmp_path: Path) -> None:
    work_dir = tmp_path / "created" / "work"
    process = await trio.lowlevel.open_process(
        [*_script(), "--listen", "127.0.0.1:0", "--work-dir", str(work_dir)],
        stderr=subprocess.PIPE,
    )
    try:
        assert process.stderr is not None
        with trio.fail_after(10):
            port = await _read_listening_port(process.stderr)
        assert work_dir.is_dir()
        (work_dir / "fn").mkdir()
        (work_dir / "fn" / "handler.py").write_text("def handle(event):\n    return event\n")
        async with purerpc.insecure_channel("127.0.0.1", port) as channel:
            health = await runtime_grpc.RuntimeStub(channel).Health(pb.HealthRequest())
            await runtime_grpc.FunctionRuntimeStub(channel).RegisterFunction(
                pb.RegisterFunctionRequest(
                    run_uid="run-1",
                    registration_attempt=1,
                    working_dir="fn",
                    handler="handler.handle",
                    registration_digest="a" * 64,
                )
            )
        assert health.healthy
        (worker,) = _children(process.pid)
        process.send_signal(signal.SIGTERM)
        with trio.fail_after(10):
            assert await process.wait() == 0
        with pytest.raises(ProcessLookupError):
            os.kill(worker, 0)  # the warm worker did not outlive its server
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_port_in_use_is_a_clear_error(tmp_path: Path) -> None:
    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    try:
        result = await trio.run_process(
            [*_script(), "--listen", f"127.0.0.1:{port}", "--work-dir", str(tmp_path)],
            capture_stderr=True,
            check=False,
        )
    finally:
        listener.close()
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr.decode()


def test_console_script_is_installed() -> None:
    assert shutil.which(PROG, path=str(Path(sys.executable).parent)) is not None
