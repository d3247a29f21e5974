"""Invoke benchmark: the gateway against a bare HTTPS echo server, same machine, same run.

Issue 8 (``bench/invoke.py``). By default the FunctionRuntime behind the gateway is a fake
servicer that echoes its input, served by :class:`krt.grpc.server.CallHandler` (the
connection handler runtimed and the Runtime Servers use), so the numbers are the gateway's
own cost: TLS termination, HTTP/1.1 parsing, validation, one gRPC hop over a pooled HTTP/2
connection, and the response. With ``--full`` the upstream is the production invoke path
behind the gateway: runtimed's :class:`~runtimed.dataplane.proxy.InvokeProxy` (request
checks, ownership cache, authorization cache, slot, registration ID; its caches fed
directly instead of by informers, authorization answered from a table) in front of a real
Python Runtime Server (``python -m servers.python``) with the echo handler registered for
each of the 8 Runs. Requests carry a bearer token shaped like a ServiceAccount JWT (about
1 KiB), as real callers do.

Processes (so no two roles share an event loop; the machine has 2 cores):

* the fake FunctionRuntime, or runtimed's proxy plus the Runtime Server (and its 8 handler
  workers), child processes;
* the gateway (``python -m gateway``), a child process, ``--target`` pointing upstream;
* the baseline: a bare HTTPS echo (hypercorn on trio, a 20-line ASGI app), a child process;
* the client (this process): keep-alive HTTPS, trustme certificates; by default the
  Kubernetes client's lean HTTP/1.1 pool (:mod:`krt.kube.http11`, about a third of httpx's
  CPU per request: the load generator shares the 2 cores with what it measures), or httpx
  with ``--client httpx``.

Prints, for gateway and baseline: sequential latency p50/p99 (ms) and throughput (req/s),
the p50 ratio, invokes/s with 8 function Runs (8 UIDs) invoked in parallel, each over its
own keep-alive connection, and the CPU time each process spent per sequential request (ms,
from /proc). Targets (issue 8): p50 < 3 ms, p99 < 10 ms, >= 500 invokes/s across 8 Runs.

Usage: ``python bench/invoke.py [--full] [--calls N] [--parallel-seconds S] [--client lean|httpx] [--json]``
``--quick`` is a short run; ``--no-baseline`` skips the echo; ``--report-json PATH`` writes
the figures for bench/report.py.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import httpx
import trio
import trustme

from krt.kube.http11 import Http11Pool, check_header, parse_origin

PATH = "/v1/namespaces/bench/runtimes/python/functions/{uid}:invoke"
BODY = b'{"command": "status", "n": 42}'


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


#: A bearer token shaped like a Kubernetes ServiceAccount token: an RS256 JWT of about
#: 1 KiB (its size matters: it crosses the gateway -> runtimed hop on every call).
TOKEN = ".".join((
    _b64(b'{"alg":"RS256","kid":"bench-signing-key-0123456789abcdef0123456789"}'),
    _b64(json.dumps({
        "aud": ["https://kubernetes.default.svc.cluster.local"], "exp": 4102444800,
        "iat": 1764000000, "iss": "https://kubernetes.default.svc.cluster.local",
        "jti": "0c0e4f3e-6a51-4d1b-a4d0-3a8e2b1f5c77",
        "kubernetes.io": {"namespace": "bench", "node": {"name": "bench-node", "uid":
            "4a5e8f2c-9d3b-4e71-8c6a-1f2e3d4c5b6a"}, "pod": {"name": "bench-client-7d9f8b6c5d-x2k4p",
            "uid": "9b8a7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d"}, "serviceaccount": {"name": "bench",
            "uid": "1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d"}, "warnafter": 1764003607},
        "nbf": 1764000000, "sub": "system:serviceaccount:bench:bench",
    }).encode()),
    _b64(bytes(range(256))),  # a 2048-bit RSA signature's size
))  # fmt: skip
HEADERS = {"authorization": f"Bearer {TOKEN}", "content-type": "application/json"}
UIDS = [f"00000000-0000-0000-0000-00000000000{i}" for i in range(8)]


# -- child processes ------------------------------------------------------------------------


async def _serve_fake() -> None:
    import anyio
    import anyio.abc

    from krt.grpc.server import CallHandler
    from krt.proto.executor.v1 import runtime_grpc
    from krt.proto.executor.v1 import runtime_pb2 as pb

    class Echo(runtime_grpc.FunctionRuntimeServicer):  # type: ignore[misc]
        async def InvokeFunction(self, request: Any) -> Any:  # noqa: N802
            return pb.InvokeFunctionResponse(
                registration=request.registration,
                invocation_id=request.invocation_id,
                output=request.input,
                content_type="application/json",
                outputs={"ok": "true"},
            )

    # served by the connection handler runtimed and the Runtime Servers use
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    print(listener.extra(anyio.abc.SocketAttribute.local_port), flush=True)
    async with listener:
        await listener.serve(CallHandler({"executor.v1.FunctionRuntime": Echo().service}))


async def _serve_runtimed(server_port: str, registrations: str) -> None:
    """runtimed's invoke proxy (production code) in front of a real Python Runtime Server.

    The ownership cache and function registry are fed directly (as informer events and
    RegisterFunction results would) and authorization answers from a fixed table, so the
    hot path is exactly the production one: checks, cache, authz cache hit, slot, registration
    ID, one call to the local Runtime Server.
    """
    from krt.kube.informer import EventType, InformerEvent
    from runtimed.dataplane.authz import AuthzCache, Outcome
    from runtimed.dataplane.channels import open_channels
    from runtimed.dataplane.ownership import OwnershipCache
    from runtimed.dataplane.proxy import InvokeProxy, ProxyIdentity
    from runtimed.dataplane.server import serve_grpc
    from runtimed.functions.registry import FunctionRegistry

    class Reviewer:
        async def review(self, token: str, *, namespace: str, name: str) -> Outcome:
            return Outcome.ALLOWED if token == TOKEN else Outcome.UNAUTHENTICATED

    cache = OwnershipCache(runtime="python")
    registry = FunctionRegistry()
    cache.on_pod_event(InformerEvent(EventType.ADDED, {
        "metadata": {"name": "bench-pod", "namespace": "bench", "uid": "bench-pod-uid"},
        "spec": {"containers": [{"name": "runtimed", "ports": [{"name": "grpc", "containerPort": 1}]}]},
        "status": {"podIP": "127.0.0.1", "conditions": [{"type": "Ready", "status": "True"}]},
    }))  # fmt: skip
    for index, (uid, registration_id) in enumerate(json.loads(registrations).items()):
        cache.on_run_event(InformerEvent(EventType.ADDED, {
            "metadata": {"name": f"fn-{index}", "namespace": "bench", "uid": uid,
                         "resourceVersion": "1"},
            "spec": {"runtime": "python", "mode": {"function": {"handler": "handler.handle"}}},
            "status": {"phase": "Ready", "attempt": 1, "assignedPodUID": "bench-pod-uid",
                       "conditions": [{"type": "Ready", "status": "True"}]},
        }))  # fmt: skip
        registry.registering(uid, key=f"bench/fn-{index}", attempt=1, digest="bench")
        registry.ready(uid, attempt=1, registration_id=registration_id)
    cache.mark_synced()
    async with open_channels() as channels, trio.open_nursery() as nursery:
        proxy = InvokeProxy(
            identity=ProxyIdentity(
                pod_uid="bench-pod-uid", namespace="bench", runtime="python",
                server_host="127.0.0.1", server_port=int(server_port),
            ),
            cache=cache, registrations=registry, authz=AuthzCache(Reviewer()),
            server=channels, peers=None,
        )  # fmt: skip
        port = await nursery.start(
            partial(serve_grpc, {"executor.v1.FunctionRuntime": proxy.service},
                    host="127.0.0.1", port=0, tls=None)
        )  # fmt: skip
        print(port, flush=True)


def _start_runtime_server(work_dir: Path) -> tuple[subprocess.Popen[bytes], int, dict[str, str]]:
    """Start the Python Runtime Server and register the echo handler for every UID.

    Returns:
        The process, its port and ``{run_uid: registration_id}``.
    """
    from krt.proto.executor.v1 import runtime_pb2 as pb

    fn_dir = work_dir / "server" / "fn"
    fn_dir.mkdir(parents=True)
    (fn_dir / "handler.py").write_text("def handle(event):\n    return event\n")
    log_file = work_dir / "runtime-server.log"
    with log_file.open("wb") as stderr:  # its JSON log lines; "listening" names the port
        process = subprocess.Popen(
            [sys.executable, "-m", "servers.python", "--listen", "127.0.0.1:0",
             "--work-dir", str(work_dir / "server")],
            stderr=stderr,
        )  # fmt: skip
    port = 0
    deadline = time.monotonic() + 20
    while not port:
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"the Runtime Server did not start: {log_file.read_text()[-2000:]}")
        time.sleep(0.05)
        for line in log_file.read_text().splitlines():
            if line.startswith("{") and json.loads(line).get("msg") == "listening":
                port = int(json.loads(line)["port"])

    async def register() -> dict[str, str]:
        import purerpc

        from krt.proto.executor.v1 import runtime_grpc

        ids = {}
        async with purerpc.insecure_channel("127.0.0.1", port) as channel:
            stub = runtime_grpc.FunctionRuntimeStub(channel)
            for uid in UIDS:
                response = await stub.RegisterFunction(pb.RegisterFunctionRequest(
                    run_uid=uid, registration_attempt=1, working_dir=str(fn_dir),
                    handler="handler.handle", registration_digest="sha256:" + "0" * 64,
                ))  # fmt: skip
                ids[uid] = response.registration.registration_id
        return ids

    try:
        return process, port, trio.run(register)
    except BaseException:
        process.kill()
        process.wait()
        raise


async def _serve_echo(cert: str, key: str) -> None:
    from hypercorn.config import Config
    from hypercorn.trio import serve

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                kind = message["type"].removeprefix("lifespan.")
                await send({"type": f"lifespan.{kind}.complete"})
                if kind == "shutdown":
                    return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())],
            }
        )  # fmt: skip
        await send({"type": "http.response.body", "body": body})

    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.certfile, config.keyfile = cert, key
    config.alpn_protocols = ["http/1.1"]
    config.accesslog = None
    config.errorlog = None
    config.keep_alive_timeout = 75
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(serve, app, config)
        print(binds[0].rsplit(":", 1)[1], flush=True)


def _child(
    args: list[str], env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[bytes], int]:
    process = subprocess.Popen(
        [sys.executable, *args], stdout=subprocess.PIPE, env=env or dict(os.environ)
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line:
        raise RuntimeError(f"child {args} exited with {process.wait()}")
    return process, int(line)


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (seconds), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    """PIDs of the direct children of ``pid`` (the Runtime Server's handler workers)."""
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


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- measurement ----------------------------------------------------------------------------


def _percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class _Client(Protocol):
    """A keep-alive HTTPS client to one origin: ``post(path) -> (status, body)``."""

    async def post(self, path: str) -> tuple[int, bytes]: ...

    async def aclose(self) -> None: ...


class _LeanClient:
    """The Kubernetes client's own keep-alive HTTP/1.1 pool (:mod:`krt.kube.http11`): a
    load generator that costs about a third of httpx's CPU per request, so the client
    (which shares the 2 cores with the servers it measures) distorts the figures less."""

    def __init__(self, base: str, context: ssl.SSLContext) -> None:
        self._pool = Http11Pool(parse_origin(base), ssl_context=context)
        self._headers = [check_header(name, value) for name, value in HEADERS.items()]

    async def post(self, path: str) -> tuple[int, bytes]:
        return await self._pool.request("POST", path, self._headers, BODY)

    async def aclose(self) -> None:
        await self._pool.aclose()


class _HttpxClient:
    """httpx, as most Python callers would invoke a function."""

    def __init__(self, base: str, context: ssl.SSLContext) -> None:
        self._client = httpx.AsyncClient(base_url=base, verify=context, timeout=30)

    async def post(self, path: str) -> tuple[int, bytes]:
        response = await self._client.post(path, content=BODY, headers=HEADERS)
        return response.status_code, response.content

    async def aclose(self) -> None:
        await self._client.aclose()


async def _sequential(client: _Client, path: Callable[[int], str], calls: int) -> dict[str, float]:
    for i in range(50):  # warm-up: TLS handshake, upstream connection, caches
        status, body = await client.post(path(i))
        if status != 200:
            raise RuntimeError(f"status {status}: {body[:200]!r}")
    latencies = []
    start = time.perf_counter()
    for i in range(calls):
        t0 = time.perf_counter()
        status, body = await client.post(path(i))
        latencies.append(time.perf_counter() - t0)
        if status != 200:
            raise RuntimeError(f"status {status}: {body[:200]!r}")
    elapsed = time.perf_counter() - start
    return {
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": _percentile(latencies, 0.99) * 1000,
        "per_second": calls / elapsed,
    }


async def _parallel(
    make_client: Callable[[], _Client], path: Callable[[int], str], seconds: float
) -> float:
    counts = [0] * len(UIDS)

    async def worker(index: int) -> None:
        client = make_client()
        try:
            for _ in range(10):
                await client.post(path(index))
            with trio.move_on_after(seconds):
                while True:
                    status, _ = await client.post(path(index))
                    if status != 200:
                        raise RuntimeError(f"status {status}")
                    counts[index] += 1
        finally:
            await client.aclose()

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for index in range(len(UIDS)):
            nursery.start_soon(worker, index)
    return sum(counts) / (time.perf_counter() - start)


async def _measure(
    ca: trustme.CA,
    base: str,
    calls: int,
    seconds: float,
    path: Callable[[int], str],
    pids: dict[str, Callable[[], list[int]]],
    client_kind: str = "lean",
) -> dict[str, float]:
    context = ssl.create_default_context()
    ca.configure_trust(context)

    def make_client() -> _Client:
        if client_kind == "httpx":
            return _HttpxClient(base, context)
        return _LeanClient(base, context)

    client = make_client()
    try:
        before = {name: sum(map(_cpu_seconds, find())) for name, find in pids.items()}
        result = await _sequential(client, path, calls)
        for name, find in pids.items():
            result[f"{name}_cpu_ms_per_request"] = (
                (sum(map(_cpu_seconds, find())) - before[name]) * 1000 / (calls + 50)
            )
    finally:
        await client.aclose()
    result["parallel8_per_second"] = await _parallel(make_client, path, seconds)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000, help="sequential requests per server")
    parser.add_argument("--parallel-seconds", type=float, default=3.0)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--full",
        action="store_true",
        help="upstream is runtimed's invoke proxy in front of a real Python Runtime Server "
        "(instead of the fake FunctionRuntime)",
    )
    parser.add_argument("--no-baseline", action="store_true", help="skip the bare HTTPS echo")
    parser.add_argument("--serve-fake", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--serve-runtimed", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--serve-echo", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="short run: 200 calls, 0.5 s parallel")
    parser.add_argument("--report-json", metavar="PATH", help="write figures for bench/report.py")
    parser.add_argument(
        "--client",
        choices=("lean", "httpx"),
        default="lean",
        help="the load generator: krt.kube.http11's keep-alive pool (default) or httpx",
    )
    args = parser.parse_args()
    if args.quick:  # quick defaults; explicit arguments still win
        parser.set_defaults(calls=200, parallel_seconds=0.5)
        args = parser.parse_args()
    if args.serve_fake:
        trio.run(_serve_fake)
        return
    if args.serve_echo:
        trio.run(_serve_echo, *args.serve_echo)
        return
    if args.serve_runtimed:
        trio.run(_serve_runtimed, *args.serve_runtimed)
        return

    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    children: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory() as tmp:
        cert_file, key_file = str(Path(tmp, "tls.crt")), str(Path(tmp, "tls.key"))
        cert.private_key_and_cert_chain_pem.write_to_path(cert_file)
        cert.private_key_pem.write_to_path(key_file)
        try:
            upstream: dict[str, Callable[[], list[int]]] = {}
            if args.full:
                server, server_port, ids = _start_runtime_server(Path(tmp))
                children.append(server)
                upstream["runtime_server"] = lambda: [server.pid]
                upstream["workers"] = lambda: _children(server.pid)
                fake, fake_port = _child(
                    [__file__, "--serve-runtimed", str(server_port), json.dumps(ids)]
                )
                upstream["runtimed"] = lambda: [fake.pid]
            else:
                fake, fake_port = _child([__file__, "--serve-fake"])
                upstream["fake_runtime"] = lambda: [fake.pid]
            children.append(fake)
            echo, echo_port = _child([__file__, "--serve-echo", cert_file, key_file])
            children.append(echo)
            gateway_port = _free_port()
            gateway = subprocess.Popen(
                [sys.executable, "-m", "gateway", "--bind", f"127.0.0.1:{gateway_port}",
                 "--metrics-addr", "", "--log-level", "warning",
                 "--tls-cert-file", cert_file, "--tls-key-file", key_file,
                 "--target", f"runtime-python.bench.svc=127.0.0.1:{fake_port}"],
                env={k: v for k, v in os.environ.items() if not k.startswith("KRT_")},
            )  # fmt: skip
            children.append(gateway)
            _wait_for_port(gateway_port)
            gateway_result = trio.run(
                _measure, ca, f"https://127.0.0.1:{gateway_port}", args.calls,
                args.parallel_seconds, lambda i: PATH.format(uid=UIDS[i % len(UIDS)]),
                {"client": lambda: [os.getpid()], "gateway": lambda: [gateway.pid], **upstream},
                args.client,
            )  # fmt: skip
            baseline_result = trio.run(
                _measure, ca, f"https://127.0.0.1:{echo_port}",
                10 if args.no_baseline else args.calls, 0.1 if args.no_baseline else
                args.parallel_seconds, lambda i: "/echo",
                {"client": lambda: [os.getpid()], "echo": lambda: [echo.pid]},
                args.client,
            )  # fmt: skip
        finally:
            for child in children:
                child.terminate()
            for child in children:
                child.wait(10)
    report = {
        "gateway": gateway_result,
        "baseline_https_echo": baseline_result,
        "p50_ratio": gateway_result["p50_ms"] / baseline_result["p50_ms"],
        "targets": {"p50_ms": 3.0, "p99_ms": 10.0, "parallel8_per_second": 500},
    }
    if args.report_json:
        Path(args.report_json).write_text(json.dumps(_figures(gateway_result, baseline_result)))
    if args.json:
        print(json.dumps(report, indent=2))
        return
    for name, result in (("gateway", gateway_result), ("bare HTTPS echo", baseline_result)):
        print(
            f"{name:>16}: p50 {result['p50_ms']:.2f} ms  p99 {result['p99_ms']:.2f} ms  "
            f"{result['per_second']:.0f} req/s sequential  "
            f"{result['parallel8_per_second']:.0f} req/s with 8 Runs in parallel"
        )
        cpu = ", ".join(
            f"{key.removesuffix('_cpu_ms_per_request')} {value:.2f}"
            for key, value in result.items()
            if key.endswith("_cpu_ms_per_request")
        )
        print(f"{'':>16}  CPU ms per request: {cpu}")
    print(f"p50 ratio gateway / bare HTTPS echo: {report['p50_ratio']:.2f}x")
    print("targets (issue 8): p50 < 3 ms, p99 < 10 ms, >= 500 invokes/s across 8 Runs")


def _figures(gateway: dict[str, float], echo: dict[str, float]) -> list[dict[str, Any]]:
    """The figures for bench/report.py (its ``--report-json`` record format)."""
    base = "bare HTTPS echo"
    return [
        {"figure": "gateway invoke p50 (sequential)", "value": round(gateway["p50_ms"], 3),
         "unit": "ms", "baseline": f"{base} p50", "baseline_value": round(echo["p50_ms"], 3),
         "target": 3.0, "target_op": "<"},
        {"figure": "gateway invoke p99 (sequential)", "value": round(gateway["p99_ms"], 3),
         "unit": "ms", "baseline": f"{base} p99", "baseline_value": round(echo["p99_ms"], 3),
         "target": 10.0, "target_op": "<"},
        {"figure": "gateway invokes/s (sequential, 1 connection)",
         "value": round(gateway["per_second"], 1), "unit": "req/s",
         "baseline": base, "baseline_value": round(echo["per_second"], 1)},
        {"figure": "gateway invokes/s (8 Runs in parallel)",
         "value": round(gateway["parallel8_per_second"], 1), "unit": "req/s",
         "baseline": base, "baseline_value": round(echo["parallel8_per_second"], 1),
         "target": 500, "target_op": ">="},
        {"figure": "gateway CPU per request", "unit": "ms",
         "value": round(gateway["gateway_cpu_ms_per_request"], 3),
         "baseline": f"{base} CPU", "baseline_value": round(echo["echo_cpu_ms_per_request"], 3)},
    ]  # fmt: skip


def _wait_for_port(port: int, seconds: float = 15.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on port {port} after {seconds} s")


if __name__ == "__main__":
    main()
