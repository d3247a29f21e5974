"""``krt-bash-runtime`` as a real process: console script, gRPC, JSON logs, SIGTERM."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import purerpc
import trio

from krt.proto.executor.v1 import runtime_grpc
from krt.proto.executor.v1 import runtime_pb2 as pb

SCRIPT = Path(sys.executable).parent / "krt-bash-runtime"
EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "bash" / "greet.sh"


class _Lines:
    """JSON log lines from the server's stderr."""

    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self._stream = stream
        self._buffer = b""
        self.seen: list[dict[str, Any]] = []

    async def next(self) -> dict[str, Any] | None:
        while b"\n" not in self._buffer:
            chunk = await self._stream.receive_some()
            if not chunk:
                return None
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        try:
            entry: dict[str, Any] = json.loads(line)
        except ValueError:  # not ours (e.g. a library writing to stderr): keep it visible
            entry = {"msg": "", "raw": line.decode(errors="replace")}
        self.seen.append(entry)
        return entry


def test_help_works() -> None:
    result = subprocess.run([SCRIPT, "--help"], capture_output=True, text=True, check=True)
    assert "Usage: krt-bash-runtime" in result.stdout
    assert "--listen HOST:PORT" in result.stdout
    assert "--work-dir" in result.stdout


async def test_console_script_serves_invocations_and_logs_stderr_as_json(tmp_path: Path) -> None:
    work = tmp_path / "srv"
    fn_dir = work / "greet"
    fn_dir.mkdir(parents=True)
    shutil.copy(EXAMPLE, fn_dir / "greet.sh")
    process = await trio.lowlevel.open_process(
        [str(SCRIPT), "--listen", "127.0.0.1:0", "--work-dir", str(work)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert process.stderr is not None
    lines = _Lines(process.stderr)
    try:
        with trio.fail_after(20):
            while (entry := await lines.next()) is not None and entry["msg"] != "listening":
                pass
            assert entry is not None, lines.seen
            async with purerpc.insecure_channel("127.0.0.1", entry["port"]) as channel:
                functions = runtime_grpc.FunctionRuntimeStub(channel)
                registered = await functions.RegisterFunction(
                    pb.RegisterFunctionRequest(
                        run_uid="run-cli",
                        registration_attempt=1,
                        working_dir=str(fn_dir),
                        handler="greet.hello",
                        registration_digest="sha256:" + "d" * 64,
                    )
                )
                reply = await functions.InvokeFunction(
                    pb.InvokeFunctionRequest(
                        registration=registered.registration,
                        invocation_id="inv-42",
                        input=b'{"name": "Ada"}',
                        content_type="application/json",
                    )
                )
            assert json.loads(reply.output)["message"] == "Hello, Ada!"
            process.send_signal(signal.SIGTERM)
            while await lines.next() is not None:
                pass
            assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    stderr_lines = [e for e in lines.seen if e.get("stream") == "stderr"]
    assert {
        "logger": "servers.bash",
        "msg": "greeting Ada",
        "run_uid": "run-cli",
        "invocation_id": "inv-42",
        "stream": "stderr",
    }.items() <= stderr_lines[0].items()
    # the function's stdout never reaches the log
    assert not any("Hello, Ada" in e["msg"] for e in lines.seen)
