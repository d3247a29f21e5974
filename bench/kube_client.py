"""Client-side CPU of one Kubernetes API request: kr8s path, bare httpx, and :class:`Kube`.

Issues 6 and 8: every component talks to the API server through
:class:`krt.kube.client.Kube`, so its per-request CPU is paid by the control plane, runtimed,
the gateway's authorization path and the CLI. This benchmark runs localkube's API server as
a child process (in-memory store: ``localkube apiserver`` on a temporary state directory)
and measures, in this process only (``time.process_time``), the CPU milliseconds per
operation of three clients over the same keep-alive HTTPS connection settings:

* ``kr8s``: the path ``Kube.request`` took before issue 6's work: ``kr8s.asyncio.Api.call_api``
  -> ``httpx.AsyncClient`` -> httpcore, ``response.content`` decoded, errors mapped (a
  faithful copy of that code lives below, so the ratio stays measurable);
* ``httpx``: the floor of plain httpx: ``AsyncClient.request`` with a prebuilt absolute URL and
  headers on kr8s's own session (no error mapping);
* ``kube``: :class:`krt.kube.client.Kube` as it is now.

Operations: ``create`` (POST), ``get`` (GET), ``put_status`` (a conditional PUT of the status
subresource, the controllers' hot write) on a CRD with a status subresource, with objects
shaped like a Run (about 1.5 KiB of JSON), each sequential (one in flight); and
``watch_event``: CPU per event to consume a watch of ``--events`` MODIFIED events, which a
writer child process produces ``--pause`` seconds apart so that each arrives on its own, as
in a running cluster (this process only receives and decodes).

Prints one line per operation and client, and the ratio ``kr8s / kube`` (and ``httpx / kube``)
measured in the same run. Usage: ``python bench/kube_client.py [--ops N] [--events N]
[--rounds R] [--pause S] [--json]``; ``--quick`` is a short run; ``--report-json PATH``
writes the figures for bench/report.py. The API server child is started and stopped by
:mod:`benchkit.apiserver_child` (shared with bench/localkube_api.py).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from pathlib import Path
from typing import Any

import httpx
import trio
import trio.lowlevel
from benchkit.apiserver_child import running_apiserver_child
from kr8s import APITimeoutError

from krt.kube.client import Kube, connect
from krt.kube.errors import ConnectionFailed, error_from_status
from krt.kube.resources import ResourceRef

NAMESPACE = "default"
CRDS = ResourceRef(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", False, "CustomResourceDefinition"
)
WIDGETS = ResourceRef("bench.kruntimes.io", "v1", "widgets", True, "Widget")


def _crd() -> dict[str, Any]:
    return {
        "metadata": {"name": "widgets.bench.kruntimes.io"},
        "spec": {
            "group": "bench.kruntimes.io",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


def _widget(name: str) -> dict[str, Any]:
    """An object about the size and shape of a task Run."""
    return {
        "apiVersion": WIDGETS.api_version,
        "kind": WIDGETS.kind,
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {"kruntimes.io/runtime": "bash", "app": "bench"},
            "annotations": {"bench.kruntimes.io/note": "x" * 64},
        },
        "spec": {
            "runtimeRef": {"name": "bash"},
            "mode": {"task": {"source": {"inline": "echo hello; echo OUT=1 >> $KRUNTIME_OUTPUTS"}}},
            "timeout": "30s",
            "retry": {"maxAttempts": 3, "backoff": "1s", "retryableReasons": ["ExecutionLost"]},
            "env": [{"name": f"VAR{i}", "value": f"value-{i}"} for i in range(6)],
        },
    }


def _status(n: int) -> dict[str, Any]:
    return {
        "phase": "Running",
        "attempt": 1,
        "assignedPod": "bash-0",
        "assignedPodUID": "6f1d1b9c-3c49-4a53-9b0e-b1a4a3c1d2e3",
        "startTime": "2026-11-29T12:00:00Z",
        "observedGeneration": 1,
        "conditions": [
            {
                "type": t,
                "status": "True",
                "reason": "Bench",
                "message": f"round {n}",
                "lastTransitionTime": "2026-11-29T12:00:00Z",
            }
            for t in ("Scheduled", "Prepared", "Started")
        ],
    }


# -- the clients under test --------------------------------------------------------------


class Kr8sPath:
    """``Kube.request``'s code before issue 6's work (kr8s ``call_api``), for the baseline."""

    def __init__(self, kube: Kube) -> None:
        self.api = kube.api

    async def request(
        self,
        method: str,
        ref: ResourceRef,
        *,
        namespace: str | None = None,
        name: str | None = None,
        subresource: str | None = None,
        body: object = None,
    ) -> Any:
        ns, url = ref.url_parts(namespace, name, subresource)
        kwargs: dict[str, Any] = {}
        if body is not None:
            kwargs["content"] = json.dumps(body, separators=(",", ":")).encode()
        try:
            async with self.api.call_api(
                method,
                version=ref.api_version,
                base=ref.base,
                namespace=ns,
                url=url,
                raise_for_status=False,
                **kwargs,
            ) as response:
                status = response.status_code
                content = response.content
                payload = json.loads(content) if content else None
        except (httpx.TransportError, OSError, APITimeoutError) as exc:
            raise ConnectionFailed(repr(exc)) from exc
        if status >= 400:
            raise error_from_status(status, payload)
        return payload

    async def watch(self, ref: ResourceRef, rv: str) -> AsyncIterator[dict[str, Any]]:
        ns, url = ref.url_parts(NAMESPACE, None, None)
        params = {"watch": "1", "resourceVersion": rv, "allowWatchBookmarks": "true"}
        async with self.api.call_api(
            "GET",
            version=ref.api_version,
            base=ref.base,
            namespace=ns,
            url=url,
            raise_for_status=False,
            stream=True,
            params=params,
        ) as response:
            async for line in response.aiter_lines():
                if line.strip():
                    yield json.loads(line)


class HttpxPath:
    """Bare ``httpx.AsyncClient.request`` with prebuilt absolute URLs (kr8s's session)."""

    def __init__(self, kube: Kube) -> None:
        self.session: httpx.AsyncClient = kube.api._session
        self.server = str(kube.api.auth.server).rstrip("/")
        self.headers = {"content-type": "application/json"}

    async def request(
        self,
        method: str,
        ref: ResourceRef,
        *,
        namespace: str | None = None,
        name: str | None = None,
        subresource: str | None = None,
        body: object = None,
    ) -> Any:
        url = self.server + ref.path(namespace, name, subresource)
        content = json.dumps(body, separators=(",", ":")).encode() if body is not None else None
        response = await self.session.request(method, url, content=content, headers=self.headers)
        return json.loads(response.content)

    async def watch(self, ref: ResourceRef, rv: str) -> AsyncIterator[dict[str, Any]]:
        url = self.server + ref.path(NAMESPACE)
        params = {"watch": "1", "resourceVersion": rv, "allowWatchBookmarks": "true"}
        async with self.session.stream("GET", url, params=params) as response:
            async for line in response.aiter_lines():
                if line.strip():
                    yield json.loads(line)


class KubePath:
    """:class:`Kube`'s public verbs."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    async def request(
        self,
        method: str,
        ref: ResourceRef,
        *,
        namespace: str | None = None,
        name: str | None = None,
        subresource: str | None = None,
        body: object = None,
    ) -> Any:
        if method == "POST":
            return await self.kube.create(ref, body)  # type: ignore[arg-type]
        if method == "PUT":
            return await self.kube.replace_status(ref, body)  # type: ignore[arg-type]
        return await self.kube.get(ref, name or "", namespace)

    async def watch(self, ref: ResourceRef, rv: str) -> AsyncIterator[dict[str, Any]]:
        async with aclosing(self.kube.watch(ref, NAMESPACE, rv)) as events:
            async for kind, obj in events:
                yield {"type": kind, "object": obj}


# -- measurement -------------------------------------------------------------------------


async def _cpu_ms_per_op(ops: int, one: Callable[[int], Awaitable[object]]) -> float:
    start = time.process_time()
    for i in range(ops):
        await one(i)
    return (time.process_time() - start) * 1000 / ops


async def measure(
    client: Any, tag: str, ops: int, events: int, writer: Kube, writer_process: WriterProcess
) -> dict[str, float]:
    """CPU ms per create, get, put_status and watch event for one client."""
    stored: list[dict[str, Any]] = []

    async def create(i: int) -> None:
        stored.append(
            await client.request("POST", WIDGETS, namespace=NAMESPACE, body=_widget(f"{tag}-{i}"))
        )

    async def get(i: int) -> None:
        await client.request("GET", WIDGETS, namespace=NAMESPACE, name=f"{tag}-{i}")

    async def put_status(i: int) -> None:
        obj = stored[i]
        obj["status"] = _status(i)
        stored[i] = await client.request(
            "PUT",
            WIDGETS,
            namespace=NAMESPACE,
            name=obj["metadata"]["name"],
            subresource="status",
            body=obj,
        )

    result = {
        "create": await _cpu_ms_per_op(ops, create),
        "get": await _cpu_ms_per_op(ops, get),
        "put_status": await _cpu_ms_per_op(ops, put_status),
    }
    # watch: another process writes `events` status updates, paced so that each event
    # arrives on its own (as in a running cluster); this process only decodes the stream
    _, rv = await writer.list(WIDGETS, NAMESPACE, label_selector="none=none")
    seen = 0
    start = 0.0
    async with aclosing(client.watch(WIDGETS, rv)) as stream:
        await writer_process.send(f"{stored[0]['metadata']['name']} {events + 1}\n".encode())
        async for event in stream:
            if event["type"] == "MODIFIED":
                seen += 1
                if seen == 1:
                    start = time.process_time()  # the first event pays the stream's start
                if seen == events + 1:
                    break
    result["watch_event"] = (time.process_time() - start) * 1000 / events
    await writer_process.wait_done()
    return result


class WriterProcess:
    """A child process that writes paced status updates on request (its CPU is not ours)."""

    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self.buffer = b""

    async def send(self, line: bytes) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send_all(line)

    async def wait_done(self) -> None:
        assert self.process.stdout is not None
        while b"done\n" not in self.buffer:
            chunk = await self.process.stdout.receive_some()
            if not chunk:
                raise RuntimeError("the writer process exited")
            self.buffer += chunk
        self.buffer = self.buffer.split(b"done\n", 1)[1]


async def writer_main(kubeconfig: str, pause: float) -> None:
    """``--writer``: for each ``NAME COUNT`` line on stdin, PUT COUNT status updates."""
    kube = await connect(kubeconfig=Path(kubeconfig))
    stdin = trio.lowlevel.FdStream(os.dup(0))
    buffer = b""
    serial = 0  # every write differs (an update that changes nothing sends no event)
    while True:
        chunk = await stdin.receive_some()
        if not chunk:
            return
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            name, count = line.decode().split()
            obj = await kube.get(WIDGETS, name, NAMESPACE)
            for _ in range(int(count)):
                serial += 1
                obj["status"] = _status(-serial)
                obj = await kube.replace_status(WIDGETS, obj)
                await trio.sleep(pause)
            sys.stdout.write("done\n")
            sys.stdout.flush()


async def run(ops: int, events: int, rounds: int, pause: float) -> dict[str, Any]:
    """Start localkube, measure every client ``rounds`` times (interleaved), keep the minimum."""
    with tempfile.TemporaryDirectory(prefix="kube-client-bench-") as tmp:
        async with running_apiserver_child(Path(tmp)) as server:
            kubeconfig = server.kubeconfig
            kube = await connect(kubeconfig=kubeconfig)
            writer = await connect(kubeconfig=kubeconfig)
            child = await trio.lowlevel.open_process(
                [sys.executable, __file__, "--writer", str(kubeconfig), "--pause", str(pause)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
            writer_process = WriterProcess(child)
            try:
                await kube.create(CRDS, _crd())
                with trio.fail_after(10):
                    while True:
                        try:
                            await kube.list(WIDGETS, NAMESPACE)
                            break
                        except Exception:  # noqa: BLE001 - not served yet
                            await trio.sleep(0.02)
                # kr8s opens its httpx session on first use (Kube itself does not use it)
                async with kube.api.call_api("GET", version="", base="/version"):
                    pass
                clients = {"kr8s": Kr8sPath(kube), "httpx": HttpxPath(kube), "kube": KubePath(kube)}
                for name, client in clients.items():  # warm-up: connections, code paths
                    await measure(client, f"warm-{name}", 20, 20, writer, writer_process)
                best: dict[str, dict[str, float]] = {}
                for r in range(rounds):
                    for name, client in clients.items():
                        figures = await measure(
                            client, f"{name}-{r}", ops, events, writer, writer_process
                        )
                        mine = best.setdefault(name, figures)
                        for op, value in figures.items():
                            mine[op] = min(mine[op], value)
            finally:
                child.kill()
                await kube.aclose()
                await writer.aclose()
    ratios = {
        f"{other}_over_kube": {
            op: round(best[other][op] / best["kube"][op], 2) for op in best["kube"]
        }
        for other in ("kr8s", "httpx")
    }
    return {
        "cpu_ms_per_op": {n: {op: round(v, 4) for op, v in f.items()} for n, f in best.items()},
        "ratios": ratios,
        "ops": ops,
        "events": events,
        "rounds": rounds,
        "pause_seconds": pause,
        "load_average": round(os.getloadavg()[0], 2),
    }


def report_figures(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The figures for bench/report.py (its ``--report-json`` record format).

    Target (issues 6 and 8): at most half the client CPU of the kr8s path per request.
    """
    figures = []
    for op, what in (
        ("create", "create (POST)"),
        ("get", "GET"),
        ("put_status", "status PUT"),
        ("watch_event", "watch event received"),
    ):
        figure: dict[str, Any] = {
            "figure": f"Kube client CPU per {what}",
            "value": result["cpu_ms_per_op"]["kube"][op],
            "unit": "ms",
            "baseline": "kr8s call_api + httpx path",
            "baseline_value": result["cpu_ms_per_op"]["kr8s"][op],
        }
        if op != "watch_event":  # a watch event's CPU is mostly TLS decryption and JSON
            figure.update(target=0.5, target_op="<=", target_of="ratio")
        figures.append(figure)
    return figures


def main() -> None:
    """Parse arguments, run the benchmark once and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=300, help="sequential requests per operation")
    parser.add_argument("--events", type=int, default=500, help="watch events to consume")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per client (min is kept)")
    parser.add_argument("--quick", action="store_true", help="a short run")
    parser.add_argument("--json", action="store_true", help="print JSON only")
    parser.add_argument("--report-json", metavar="PATH", help="write figures for bench/report.py")
    parser.add_argument("--writer", metavar="KUBECONFIG", help=argparse.SUPPRESS)
    parser.add_argument("--pause", type=float, default=0.002, help="seconds between watched writes")
    args = parser.parse_args()
    if args.writer:
        trio.run(writer_main, args.writer, args.pause)
        return
    if args.quick:
        args.ops, args.events, args.rounds = 80, 100, 2
    result = trio.run(run, args.ops, args.events, args.rounds, args.pause)
    if args.report_json:
        Path(args.report_json).write_text(json.dumps(report_figures(result), indent=2))
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"client CPU ms per operation (min of {args.rounds} rounds; this process only)")
    ops = list(result["cpu_ms_per_op"]["kube"])
    print(f"{'client':8}" + "".join(f"{op:>14}" for op in ops))
    for name, figures in result["cpu_ms_per_op"].items():
        print(f"{name:8}" + "".join(f"{figures[op]:14.3f}" for op in ops))
    for name, ratio in result["ratios"].items():
        print(f"{name:16}" + "".join(f"{ratio[op]:10.2f}x" for op in ops))
    print(f"load average {result['load_average']}")


if __name__ == "__main__":
    main()
