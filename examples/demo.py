"""Demo of what exists today: the built-in Runtime Servers, driven over gRPC.

Starts ``krt-python-runtime`` (and ``krt-bash-runtime`` when the Bash server is installed)
as real processes on free ports, registers the example handlers under ``examples/``,
invokes them with example input, runs one task, and prints the results together with the
handler log lines the servers wrote (prints never reach the output). This is what
``make demo`` runs until the quick-start issue replaces it with the full localkube flow.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import purerpc
import trio

from krt.proto.executor.v1 import runtime_grpc
from krt.proto.executor.v1 import runtime_pb2 as pb

EXAMPLES = Path(__file__).resolve().parent
DIGEST = "sha256:" + "0" * 64


def _command(name: str, module: str) -> list[str] | None:
    script = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if script:
        return [script]
    if importlib.util.find_spec(module) is not None:
        return [sys.executable, "-m", module.removesuffix(".__main__")]
    return None


class Server:
    """One Runtime Server process, with its JSON log lines collected."""

    def __init__(self, name: str, argv: list[str], work_dir: Path) -> None:
        self.name = name
        self.argv = [*argv, "--listen", "127.0.0.1:0", "--work-dir", str(work_dir)]
        self.work_dir = work_dir
        self.logs: list[dict[str, Any]] = []
        self.port = 0
        self._listening = trio.Event()

    async def run(
        self, *, task_status: trio.TaskStatus[trio.Process] = trio.TASK_STATUS_IGNORED
    ) -> None:
        process = await trio.lowlevel.open_process(self.argv, stderr=subprocess.PIPE)
        try:
            assert process.stderr is not None
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._read_logs, process.stderr)
                with trio.fail_after(20):
                    await self._listening.wait()
                task_status.started(process)
        finally:
            if process.returncode is None:
                process.terminate()
                with trio.CancelScope(shield=True), trio.move_on_after(5):
                    await process.wait()
                if process.returncode is None:
                    process.kill()

    async def _read_logs(self, stream: trio.abc.ReceiveStream) -> None:
        buffer = b""
        while chunk := await stream.receive_some(65536):
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                try:
                    record = json.loads(line)
                except ValueError:
                    print(f"  [{self.name} stderr] {line.decode(errors='replace')}")
                    continue
                self.logs.append(record)
                if record.get("msg") == "listening":
                    self.port = int(record["port"])
                    self._listening.set()


def _show(title: str, value: Any) -> None:
    print(f"\n== {title}")
    print(json.dumps(value, indent=2, ensure_ascii=False) if not isinstance(value, str) else value)


async def _register_and_invoke(
    server: Server, functions: Any, *, run_uid: str, handler: str, working_dir: Path, payload: Any
) -> None:
    registered = await functions.RegisterFunction(
        pb.RegisterFunctionRequest(
            run_uid=run_uid,
            registration_attempt=1,
            working_dir=str(working_dir),
            handler=handler,
            registration_digest=DIGEST,
            idle_timeout_seconds=300,
        )
    )
    state = pb.FunctionRegistrationState.Name(registered.state)
    print(
        f"\n[{server.name}] registered {handler}: {state}, id {registered.registration.registration_id}"
    )
    response = await functions.InvokeFunction(
        pb.InvokeFunctionRequest(
            registration=registered.registration,
            invocation_id=f"demo-{run_uid}",
            input=json.dumps(payload).encode(),
            content_type="application/json",
            timeout_millis=5000,
        )
    )
    output: Any = response.output.decode()
    if response.content_type.startswith("application/json"):
        output = json.loads(output)
    _show(f"[{server.name}] {handler} output ({response.content_type})", output)
    if response.outputs:
        _show(f"[{server.name}] {handler} outputs", dict(response.outputs))
    await functions.UnregisterFunction(
        pb.UnregisterFunctionRequest(
            registration=registered.registration, drain_timeout_millis=1000
        )
    )


async def _python_demo(server: Server) -> None:
    code_dir = server.work_dir / "python-examples"
    shutil.copytree(EXAMPLES / "python", code_dir)
    resource_list = json.loads((EXAMPLES / "python" / "resource_list.json").read_text())
    async with purerpc.insecure_channel("127.0.0.1", server.port) as channel:
        functions = runtime_grpc.FunctionRuntimeStub(channel)
        runtime = runtime_grpc.RuntimeStub(channel)
        await _register_and_invoke(
            server,
            functions,
            run_uid="echo-1",
            handler="echo.handle",
            working_dir=code_dir,
            payload={"command": "status"},
        )
        await _register_and_invoke(
            server,
            functions,
            run_uid="krm-1",
            handler="krm_labels.set_labels",
            working_dir=code_dir,
            payload=resource_list,
        )
        await runtime.Execute(
            pb.ExecuteRequest(
                id="task-1", args=["-c", "import sys; print('task ran on', sys.version.split()[0])"]
            )
        )
        # the Runtime API is polled (runtimed does the same, at a bounded cadence)
        with trio.fail_after(10):
            status = await runtime.Status(pb.StatusRequest(id="task-1"))
            while status.state < pb.EXECUTION_STATE_SUCCEEDED:
                await trio.sleep(0.05)
                status = await runtime.Status(pb.StatusRequest(id="task-1"))
        print(
            f"\n[{server.name}] task task-1: {pb.ExecutionState.Name(status.state)},"
            f" exit {status.exit_code}, stdout {status.stdout!r}"
        )


async def _bash_demo(server: Server) -> None:
    code_dir = server.work_dir / "bash-examples"
    shutil.copytree(EXAMPLES / "bash", code_dir)
    async with purerpc.insecure_channel("127.0.0.1", server.port) as channel:
        functions = runtime_grpc.FunctionRuntimeStub(channel)
        await _register_and_invoke(
            server,
            functions,
            run_uid="greet-1",
            handler="greet.hello",
            working_dir=code_dir,
            payload={"name": "Ada"},
        )


def _handler_logs(server: Server) -> None:
    lines = [r for r in server.logs if r.get("stream") and r.get("invocation_id")]
    if lines:
        print(f"\n[{server.name}] handler log lines (structured log, not output):")
        for record in lines:
            print(
                f"  run_uid={record.get('run_uid')} invocation_id={record.get('invocation_id')}"
                f" stream={record.get('stream')}: {record.get('msg')}"
            )


async def main() -> None:
    """Run the demo; servers are stopped (SIGTERM) before it returns."""
    python_cmd = _command("krt-python-runtime", "servers.python.__main__")
    bash_cmd = _command("krt-bash-runtime", "servers.bash.__main__")
    if python_cmd is None:
        raise SystemExit("krt-python-runtime is not installed: run `make demo` (installs first)")
    with tempfile.TemporaryDirectory(prefix="krt-demo-") as tmp:
        servers = [Server("python", python_cmd, Path(tmp) / "python")]
        if bash_cmd is not None and shutil.which("bash"):
            servers.append(Server("bash", bash_cmd, Path(tmp) / "bash"))
        else:
            print(
                "note: the Bash Runtime Server is not available yet; skipping its part of the demo"
            )
        async with trio.open_nursery() as nursery:
            for server in servers:
                await nursery.start(server.run)
                print(f"started {server.name} Runtime Server on 127.0.0.1:{server.port}")
            await _python_demo(servers[0])
            if len(servers) > 1:
                await _bash_demo(servers[1])
            for server in servers:
                _handler_logs(server)
            nursery.cancel_scope.cancel()
    print("\ndemo done: servers stopped")


if __name__ == "__main__":
    trio.run(main)
