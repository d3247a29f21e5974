"""Benchmark of the Python Runtime Server against a bare purerpc unary echo (issue 2).

Prints, from one run on this machine:

* sequential InvokeFunction latency (p50, p99) of a trivial handler;
* a bare purerpc unary echo (p50, p99) as the baseline, and the ratio of the p50s
  (target: at most 2x);
* worker RSS per registration in MiB, from /proc (target: under 30 MiB);
* RegisterFunction time of a trivial handler (target: under 150 ms).

Both servers run as their own processes (the Runtime Server through its console script);
the client is one trio task in this process, so neither side shares an event loop.

Usage: ``python bench/runtime_server.py [--calls N] [--registrations N] [--json]``
``--quick`` is a short run; ``--report-json PATH`` writes the figures for bench/report.py.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import purerpc
import trio

from krt.proto.executor.v1 import runtime_grpc
from krt.proto.executor.v1 import runtime_pb2 as pb

TRIVIAL_HANDLER = "def handle(event):\n    return event\n"
ECHO_SERVICE = "bench.Echo"
_ECHO_SIGNATURE = purerpc.RPCSignature(
    purerpc.Cardinality.UNARY_UNARY, pb.InvokeFunctionRequest, pb.InvokeFunctionResponse
)


# -- the baseline server (runs in a child process) ---------------------------------------


async def _echo(request: pb.InvokeFunctionRequest) -> pb.InvokeFunctionResponse:
    return pb.InvokeFunctionResponse(
        registration=request.registration,
        invocation_id=request.invocation_id,
        output=request.input,
        content_type=request.content_type,
    )


async def _serve_echo() -> None:
    service = purerpc.Service(ECHO_SERVICE)
    service.add_method("Echo", _echo, _ECHO_SIGNATURE)
    server = purerpc.Server(port=0)
    server.add_service(service)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(server.serve_async)
        print(port, flush=True)


# -- helpers -------------------------------------------------------------------------------


def _percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


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


async def _start(argv: list[str], *, port_from: str) -> tuple[trio.Process, int]:
    """Start a server process; read its port from stdout (a number) or stderr (JSON log)."""
    stream_kw: dict[str, Any] = (
        {"stdout": subprocess.PIPE} if port_from == "stdout" else {"stderr": subprocess.PIPE}
    )
    process = await trio.lowlevel.open_process(argv, **stream_kw)
    stream = process.stdout if port_from == "stdout" else process.stderr
    assert stream is not None
    buffer = b""
    with trio.fail_after(20):
        while True:
            chunk = await stream.receive_some(4096)
            if not chunk:
                raise RuntimeError(f"{argv[0]} exited: {buffer.decode()}")
            buffer += chunk
            for line in buffer.splitlines():
                if port_from == "stdout" and line.strip().isdigit():
                    return process, int(line)
                if port_from == "stderr" and line.startswith(b"{"):
                    record = json.loads(line)
                    if record.get("msg") == "listening":
                        return process, int(record["port"])


async def _stop(process: trio.Process) -> None:
    process.terminate()
    with trio.move_on_after(5):
        await process.wait()
    if process.returncode is None:
        process.kill()
        await process.wait()


async def _time_calls(call: Any, request: Any, calls: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        await call(request)
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        await call(request)
        samples.append(time.perf_counter() - start)
    return samples


def _runtime_argv(work_dir: Path) -> list[str]:
    script = Path(sys.executable).parent / "krt-python-runtime"
    head = [str(script)] if script.exists() else [sys.executable, "-m", "servers.python"]
    return [*head, "--listen", "127.0.0.1:0", "--work-dir", str(work_dir)]


async def _bench(calls: int, registrations: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="krt-bench-") as tmp:
        work_dir = Path(tmp)
        fn_dir = work_dir / "fn"
        fn_dir.mkdir()
        (fn_dir / "handler.py").write_text(TRIVIAL_HANDLER)
        # the bound port comes from the server's "listening" log line (JSON on stderr)
        runtime, runtime_port = await _start(_runtime_argv(work_dir), port_from="stderr")
        echo, echo_port = await _start(
            [sys.executable, __file__, "--echo-server"], port_from="stdout"
        )
        try:
            # keep draining the server's stderr so logging never blocks it
            async with trio.open_nursery() as nursery:
                assert runtime.stderr is not None
                nursery.start_soon(_drain, runtime.stderr)
                result = await _measure(
                    runtime_port, echo_port, runtime.pid, fn_dir, calls, registrations
                )
                nursery.cancel_scope.cancel()
        finally:
            await _stop(runtime)
            await _stop(echo)
    return result


async def _drain(stream: trio.abc.ReceiveStream) -> None:
    while await stream.receive_some(65536):
        pass


async def _measure(
    runtime_port: int,
    echo_port: int,
    runtime_pid: int,
    fn_dir: Path,
    calls: int,
    registrations: int,
) -> dict[str, Any]:
    warmup = max(50, calls // 10)
    async with purerpc.insecure_channel("127.0.0.1", runtime_port) as channel:
        functions = runtime_grpc.FunctionRuntimeStub(channel)
        register_ms = []
        refs = []
        for i in range(registrations):
            start = time.perf_counter()
            response = await functions.RegisterFunction(
                pb.RegisterFunctionRequest(
                    run_uid=f"bench-{i}",
                    registration_attempt=1,
                    working_dir=str(fn_dir),
                    handler="handler.handle",
                    registration_digest="sha256:" + "0" * 64,
                )
            )
            register_ms.append((time.perf_counter() - start) * 1000)
            refs.append(response.registration)
        workers = _children(runtime_pid)
        rss = [_rss_mib(pid) for pid in workers]
        invoke_request = pb.InvokeFunctionRequest(
            registration=refs[0], input=b'{"ping":1}', content_type="application/json"
        )
        invoke = await _time_calls(functions.InvokeFunction, invoke_request, calls, warmup)
    async with purerpc.insecure_channel("127.0.0.1", echo_port) as channel:
        echo_stub = purerpc.Client(ECHO_SERVICE, channel).get_method_stub("Echo", _ECHO_SIGNATURE)
        echo_request = pb.InvokeFunctionRequest(
            registration=refs[0], input=b'{"ping":1}', content_type="application/json"
        )
        echo = await _time_calls(echo_stub, echo_request, calls, warmup)
    invoke_p50 = _percentile(invoke, 0.5) * 1000
    echo_p50 = _percentile(echo, 0.5) * 1000
    return {
        "calls": calls,
        "invoke_p50_ms": round(invoke_p50, 3),
        "invoke_p99_ms": round(_percentile(invoke, 0.99) * 1000, 3),
        "echo_p50_ms": round(echo_p50, 3),
        "echo_p99_ms": round(_percentile(echo, 0.99) * 1000, 3),
        "ratio_p50": round(invoke_p50 / echo_p50, 2),
        "workers": len(workers),
        "worker_rss_mib_mean": round(statistics.mean(rss), 1) if rss else None,
        "worker_rss_mib_max": round(max(rss), 1) if rss else None,
        "register_ms_median": round(statistics.median(register_ms), 1),
        "register_ms_max": round(max(register_ms), 1),
        "server_rss_mib": round(_rss_mib(runtime_pid), 1),
    }


def _figures(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The figures for bench/report.py (its ``--report-json`` record format)."""
    echo = "bare purerpc unary echo"
    return [
        {"figure": "InvokeFunction p50 (trivial handler)", "value": result["invoke_p50_ms"],
         "unit": "ms", "baseline": f"{echo} p50", "baseline_value": result["echo_p50_ms"],
         "target": 2.0, "target_op": "<=", "target_of": "ratio"},
        {"figure": "InvokeFunction p99", "value": result["invoke_p99_ms"], "unit": "ms",
         "baseline": f"{echo} p99", "baseline_value": result["echo_p99_ms"]},
        {"figure": "worker RSS per registration (max)", "value": result["worker_rss_mib_max"],
         "unit": "MiB", "target": 30, "target_op": "<"},
        {"figure": "RegisterFunction (trivial handler, median)", "value": result["register_ms_median"],
         "unit": "ms", "target": 150, "target_op": "<"},
        {"figure": "Runtime Server RSS", "value": result["server_rss_mib"], "unit": "MiB"},
    ]  # fmt: skip


def main() -> int:
    """Run the benchmark (or, with ``--echo-server``, serve the baseline echo)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000, help="timed calls per series")
    parser.add_argument("--registrations", type=int, default=5, help="registrations to time")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--echo-server", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--quick", action="store_true", help="short run: 200 calls, 2 registrations"
    )
    parser.add_argument("--report-json", metavar="PATH", help="write figures for bench/report.py")
    args = parser.parse_args()
    if args.quick:  # quick defaults; explicit arguments still win
        parser.set_defaults(calls=200, registrations=2)
        args = parser.parse_args()
    if args.echo_server:
        trio.run(_serve_echo)
        return 0
    if args.calls < 10 or args.registrations < 1:
        parser.error("--calls must be >= 10 and --registrations >= 1")
    result = trio.run(_bench, args.calls, args.registrations)
    if args.report_json:
        Path(args.report_json).write_text(json.dumps(_figures(result)))
    if args.json:
        print(json.dumps(result))
        return 0
    print(
        f"Python Runtime Server benchmark ({result['calls']} sequential calls, pid {os.getpid()})"
    )
    print(
        f"  InvokeFunction (trivial handler): p50 {result['invoke_p50_ms']:.3f} ms"
        f"  p99 {result['invoke_p99_ms']:.3f} ms"
    )
    print(
        f"  bare purerpc unary echo:          p50 {result['echo_p50_ms']:.3f} ms"
        f"  p99 {result['echo_p99_ms']:.3f} ms"
    )
    print(f"  ratio InvokeFunction/echo (p50):  {result['ratio_p50']:.2f}x   (target <= 2x)")
    print(
        f"  worker RSS per registration:      mean {result['worker_rss_mib_mean']} MiB,"
        f" max {result['worker_rss_mib_max']} MiB over {result['workers']} workers"
        "   (target < 30 MiB)"
    )
    print(
        f"  RegisterFunction (trivial):       median {result['register_ms_median']} ms,"
        f" max {result['register_ms_max']} ms   (target < 150 ms)"
    )
    print(f"  Runtime Server RSS:               {result['server_rss_mib']} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
