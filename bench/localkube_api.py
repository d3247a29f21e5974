"""Benchmark of the localkube API server: write throughput with watchers, watch delay.

Prints, from one run on this machine:

* sustained create+update throughput (writes/s) while ``--watchers`` (default 10) watch
  streams follow the same namespace;
* the delay from sending a write to each watcher receiving its event (p50, p99, ms).
  Targets (issue 3): at least 1,000 writes/s, watch delay p50 under 5 ms;
* the CPU time per write of the server process and of the benchmark client;
* for comparison, the store alone in this process (SQLite commit, fan-out to the same
  number of subscribers, encoded once): writes/s and commit-to-subscriber delay.

The API server runs as its own process (``localkube apiserver`` on a temporary state
directory, so writes go to SQLite); the clients are trio tasks in this process, over HTTPS
with the admin token: ``--writers`` concurrent writers (a minimal keep-alive h11 client),
each creating a ConfigMap and then replacing it, alternately, and watch streams over the
same minimal client (``--httpx-watchers``: httpx streams, as before; more client CPU).
Each write carries a sequence number in its data, which the watchers use to match events
to the time the write was sent.

The writers form a closed loop: each sends its next write when the last one is answered,
so ``--writers`` is the number of writes in flight and the watch delay includes their
queueing at the server. ``--rate R`` paces the writers, staggered, to R writes/s in all
(a writer that falls behind sends at once), to read the delay at a given rate.

``--runs N`` measures Run writes instead (issue 6: the task benchmark's writes): the Run
CRD from the chart is created, then ``--writers`` concurrent clients each take Runs in turn
through the life cycle the control plane and runtimed write (create with the admin token,
then three status updates with a ServiceAccount token: Scheduled, Running, Succeeded, with
the conditions they set) while ``--watchers`` streams watch every Run and one stream per
Pod (``--pods``, default 2) watches the Runs assigned to it by field selector, as runtimed
does; it prints the server's CPU per Run and per write (the schema, CEL rules, RBAC and
status subresource path of every Run write). ``--admin-writes`` writes status as admin.

Usage: ``python bench/localkube_api.py [--seconds S] [--writers N] [--watchers N]
[--rate R] [--runs N [--pods N] [--admin-writes]] [--json]``; ``--quick`` is a short run; ``--report-json PATH`` writes
the figures for bench/report.py. The server child is started and stopped by
:mod:`benchkit.apiserver_child` (shared with bench/kube_client.py).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import ssl
import tempfile
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import h11
import httpx
import trio
import trio.lowlevel
import yaml
from benchkit.apiserver_child import running_apiserver_child

NAMESPACE = "default"
_SEQ = re.compile(rb'"seq":"(\d+)"')
CMS = f"/api/v1/namespaces/{NAMESPACE}/configmaps"
RUNS = f"/apis/kruntimes.io/v1alpha1/namespaces/{NAMESPACE}/runs"
RUN_CRD = Path(__file__).resolve().parents[1] / "charts/kruntimes/crds/runs.kruntimes.io.yaml"


def _cpu_seconds(pid: int) -> float:
    return sum(_cpu_split(pid))


def _cpu_split(pid: int) -> tuple[float, float]:
    """User and system CPU seconds of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Bench:
    def __init__(self, url: str, token: str, ca: bytes) -> None:
        self.url = url
        self.token = token
        self.ssl = ssl.create_default_context(cadata=ca.decode())
        self.sent: dict[int, float] = {}
        self.delays: list[float] = []
        self.writes = 0
        self.seq = 0
        self.chunks = 0

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=self.url,
            verify=self.ssl,
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=30.0,
        )

    def _received(self, lines: list[bytes], now: float) -> None:
        self.chunks += 1
        for line in lines:
            match = _SEQ.search(line)
            sent = self.sent.get(int(match.group(1))) if match else None
            if sent is not None:
                self.delays.append(now - sent)

    async def watcher(self, since: str, *, task_status: trio.TaskStatus[None]) -> None:
        """Follow the namespace's ConfigMaps with the minimal h11 client (as a Go client)."""
        async with RawClient(self.url, self.token, self.ssl) as client:
            started = False
            async for lines in client.stream_lines(f"{CMS}?watch=true&resourceVersion={since}"):
                if not started:
                    task_status.started()
                    started = True
                self._received(lines, time.perf_counter())

    async def httpx_watcher(self, since: str, *, task_status: trio.TaskStatus[None]) -> None:
        """Follow the ConfigMaps with httpx (``--httpx-watchers``: heavier client CPU)."""
        async with self.client() as client:
            params = {"watch": "true", "resourceVersion": since}
            async with client.stream("GET", CMS, params=params) as response:
                task_status.started()
                pending = b""
                async for chunk in response.aiter_raw():
                    now = time.perf_counter()
                    pending += chunk
                    *lines, pending = pending.split(b"\n")
                    self._received(lines, now)

    async def writer(
        self, index: int, deadline: float, interval: float = 0.0, offset: float = 0.0
    ) -> None:
        """Create then replace ConfigMaps until ``deadline`` (perf_counter seconds).

        With ``interval`` > 0 the writes are paced: one every ``interval`` seconds at most,
        the first ``offset`` seconds from now (so paced writers take turns instead of
        sending in bursts); a writer that falls behind sends at once, so the achieved rate
        shows capacity.
        """
        async with RawClient(self.url, self.token, self.ssl) as client:
            n = 0
            due = time.perf_counter() + offset - interval

            async def pace() -> None:
                nonlocal due
                if interval > 0:
                    due += interval
                    wait = due - time.perf_counter()
                    if wait > 0:
                        await trio.sleep(wait)

            while time.perf_counter() < deadline:
                name = f"bench-{index}-{n}"
                n += 1
                self.seq += 1
                seq = self.seq
                await pace()
                self.sent[seq] = time.perf_counter()
                created = await client.request(
                    "POST", CMS, {"metadata": {"name": name}, "data": {"seq": str(seq)}}
                )
                self.writes += 1
                self.seq += 1
                seq = self.seq
                created["data"] = {"seq": str(seq)}
                await pace()
                self.sent[seq] = time.perf_counter()
                await client.request("PUT", f"{CMS}/{name}", created)
                self.writes += 1


class RawClient:
    """A minimal keep-alive HTTPS/1.1 JSON client (h11 over a trio SSL stream).

    The writers use it instead of httpx so that the benchmark client, which shares the
    machine's two cores with the server, spends as little CPU per request as a Go client
    such as kubectl would; the watchers use httpx streaming.
    """

    def __init__(self, url: str, token: str, context: ssl.SSLContext) -> None:
        parsed = httpx.URL(url)
        self.host = parsed.host
        self.port = parsed.port or 443
        self.token = token.encode()
        self.context = context
        self.stream: trio.SSLStream[trio.SocketStream] | None = None

    async def __aenter__(self) -> RawClient:
        tcp = await trio.open_tcp_stream(self.host, self.port)
        self.stream = trio.SSLStream(
            tcp, self.context, server_hostname=self.host, https_compatible=True
        )
        await self.stream.do_handshake()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.stream is not None:
            await self.stream.aclose()

    async def request(self, method: str, path: str, body: dict[str, Any] | None) -> dict[str, Any]:
        assert self.stream is not None
        data = b"" if body is None else json.dumps(body, separators=(",", ":")).encode()
        head = (
            (
                f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(data)}\r\n"
            ).encode()
            + b"Authorization: Bearer "
            + self.token
            + b"\r\n\r\n"
        )
        await self.stream.send_all(head + data)
        connection = h11.Connection(h11.CLIENT)
        connection.send(h11.Request(method=method, target=path, headers=[("Host", self.host)]))
        connection.send(h11.EndOfMessage())
        status = 0
        chunks: list[bytes] = []
        while True:
            event = connection.next_event()
            if event is h11.NEED_DATA:
                connection.receive_data(bytes(await self.stream.receive_some(65536)))
                continue
            if isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.Data):
                chunks.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                break
        if status >= 300:
            raise RuntimeError(f"{method} {path}: HTTP {status}: {b''.join(chunks)[:200]!r}")
        result: dict[str, Any] = json.loads(b"".join(chunks))
        return result

    async def stream_lines(self, path: str) -> AsyncIterator[list[bytes]]:
        """GET a chunked response; yield its complete lines as they arrive.

        The first (possibly empty) batch is yielded once the response head is in.
        """
        assert self.stream is not None
        head = (
            (f"GET {path} HTTP/1.1\r\nHost: {self.host}\r\nAccept: application/json\r\n").encode()
            + b"Authorization: Bearer "
            + self.token
            + b"\r\n\r\n"
        )
        await self.stream.send_all(head)
        connection = h11.Connection(h11.CLIENT)
        connection.send(h11.Request(method="GET", target=path, headers=[("Host", self.host)]))
        connection.send(h11.EndOfMessage())
        pending = b""
        while True:
            event = connection.next_event()
            if event is h11.NEED_DATA:
                data = bytes(await self.stream.receive_some(65536))
                if not data:
                    return
                connection.receive_data(data)
            elif isinstance(event, h11.Response):
                if event.status_code != 200:
                    raise RuntimeError(f"GET {path}: HTTP {event.status_code}")
                yield []
            elif isinstance(event, h11.Data):
                pending += bytes(event.data)
                *lines, pending = pending.split(b"\n")
                yield lines
            elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
                return


async def run(
    seconds: float, writers: int, watchers: int, httpx_watchers: bool = False, rate: float = 0.0
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="localkube-bench-") as tmp:
        async with running_apiserver_child(Path(tmp)) as server:
            process = server.process
            bench = Bench(server.server, server.token, server.ca_pem)
            async with bench.client() as client:
                since = (await client.get(CMS)).json()["metadata"]["resourceVersion"]
            async with trio.open_nursery() as nursery:
                for _ in range(watchers):
                    watch = bench.httpx_watcher if httpx_watchers else bench.watcher
                    await nursery.start(watch, since)
                # warm-up: connections, TLS, first requests
                await bench.writer(9999, time.perf_counter() + 0.5)
                bench.writes = 0
                bench.delays.clear()
                bench.chunks = 0
                start = time.perf_counter()
                server_cpu = _cpu_seconds(process.pid)
                client_cpu = time.process_time()
                async with trio.open_nursery() as writing:
                    for index in range(writers):
                        interval = writers / rate if rate > 0 else 0.0
                        writing.start_soon(
                            bench.writer,
                            index,
                            start + seconds,
                            interval,
                            index / rate if rate > 0 else 0.0,
                        )
                elapsed = time.perf_counter() - start
                server_cpu = _cpu_seconds(process.pid) - server_cpu
                client_cpu = time.process_time() - client_cpu
                await trio.sleep(0.5)  # let watchers drain
                nursery.cancel_scope.cancel()
    delays_ms = [d * 1000 for d in bench.delays]
    return {
        "seconds": round(elapsed, 2),
        "writers": writers,
        "paced_rate": rate,
        "watchers": watchers,
        "writes": bench.writes,
        "writes_per_second": round(bench.writes / elapsed, 1),
        "watch_events": len(delays_ms),
        "watch_chunks": bench.chunks,
        "watch_delay_p50_ms": round(_percentile(delays_ms, 0.50), 2),
        "watch_delay_p99_ms": round(_percentile(delays_ms, 0.99), 2),
        "server_cpu_ms_per_write": round(server_cpu * 1000 / max(bench.writes, 1), 3),
        "client_cpu_ms_per_write": round(client_cpu * 1000 / max(bench.writes, 1), 3),
        "cpu_count": os.cpu_count(),
        # the machine is shared: its 1-minute load average at the end of the run
        "load_average": round(os.getloadavg()[0], 2),
    }


async def run_store_only(seconds: float, watchers: int) -> dict[str, Any]:
    """Measure the store alone (SQLite commit + fan-out + shared encoding), no HTTP.

    One writer task creates and replaces ConfigMaps; ``watchers`` subscriber tasks take
    every event and its encoded line (the bytes an HTTP watcher would get).
    """
    from localkube import storage

    delays: list[float] = []
    with tempfile.TemporaryDirectory(prefix="localkube-bench-store-") as tmp:
        store = storage.open_store(Path(tmp))
        writes = 0
        sent: dict[int, float] = {}

        async def watcher(task_status: trio.TaskStatus[None]) -> None:
            with store.subscribe("/configmaps") as (_, channel):
                task_status.started()
                async for first in channel:
                    # drain what is buffered, as the server's watch loop does
                    batch = [first]
                    while True:
                        try:
                            batch.append(channel.receive_nowait())
                        except (trio.WouldBlock, trio.EndOfChannel):
                            break
                    now = time.perf_counter()
                    for event in batch:
                        event.line()
                        delays.append(now - sent[event.revision])

        async with trio.open_nursery() as nursery:
            for _ in range(watchers):
                await nursery.start(watcher)
            start = time.perf_counter()
            n = 0
            while time.perf_counter() - start < seconds:
                key = ("/configmaps", NAMESPACE, f"o{n}")
                meta = {"name": f"o{n}", "namespace": NAMESPACE}
                sent[store.revision + 1] = time.perf_counter()
                store.create(key, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": dict(meta)})
                sent[store.revision + 1] = time.perf_counter()
                store.update(
                    key,
                    {
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "metadata": dict(meta),
                        "data": {"v": "1"},
                    },
                )
                writes += 2
                n += 1
                await trio.lowlevel.checkpoint()  # let the subscribers take their events
            elapsed = time.perf_counter() - start
            await trio.sleep(0.1)
            nursery.cancel_scope.cancel()
        store.close()
    delays_ms = [d * 1000 for d in delays]
    return {
        "store_writes_per_second": round(writes / elapsed, 1),
        "store_delay_p50_ms": round(_percentile(delays_ms, 0.5), 3),
        "store_delay_p99_ms": round(_percentile(delays_ms, 0.99), 3),
    }


def _run_statuses(pod: str, pod_uid: str) -> list[dict[str, Any]]:
    """The three status writes of a task Run, as the scheduler and runtimed make them.

    Timestamps are the current time (microseconds), so no two Runs write the same status.
    """
    now = datetime.now(UTC)

    def at(ms: int) -> str:
        return (now + timedelta(milliseconds=ms)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    scheduled = {
        "type": "Scheduled",
        "status": "True",
        "reason": "Assigned",
        "lastTransitionTime": at(0),
        "message": f"bound to Pod {pod} (attempt 1)",
    }
    bound = {"assignedPod": pod, "assignedPodUID": pod_uid, "attempt": 1}
    running = {
        "type": "Running",
        "status": "True",
        "reason": "Claimed",
        "lastTransitionTime": at(100),
        "message": f"attempt 1 claimed by Pod {pod}",
    }
    done = {
        "type": "Running",
        "status": "False",
        "reason": "Succeeded",
        "lastTransitionTime": at(200),
        "message": "the execution succeeded",
    }
    start = at(100)
    return [
        {"phase": "Scheduled", **bound, "message": scheduled["message"], "conditions": [scheduled]},
        {
            "phase": "Running",
            **bound,
            "message": scheduled["message"],
            "conditions": [scheduled, running],
            "startTime": start,
        },
        {
            "phase": "Succeeded",
            **bound,
            "conditions": [scheduled, done],
            "startTime": start,
            "reason": "Succeeded",
            "completionTime": at(200),
        },
    ]


#: What the Run writers' ServiceAccount may do (as the control plane's and runtimed's roles).
_WRITER_ROLE = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRole",
    "metadata": {"name": "bench-run-writer"},
    "rules": [
        {
            "apiGroups": ["kruntimes.io"],
            "resources": ["runs", "runs/status"],
            "verbs": ["get", "list", "watch", "create", "update", "patch"],
        }
    ],
}


async def _service_account_token(client: RawClient, name: str) -> str:
    """Create ServiceAccount ``name`` bound to :data:`_WRITER_ROLE`; return a token for it."""
    await client.request(
        "POST",
        f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
    )
    await client.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", _WRITER_ROLE)
    await client.request(
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "bench-run-writer"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "bench-run-writer",
            },
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": NAMESPACE}],
        },
    )
    review = await client.request(
        "POST",
        f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{name}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    token: str = review["status"]["token"]
    return token


async def run_runs(
    runs: int, writers: int, watchers: int, pods: int = 2, admin_writes: bool = False
) -> dict[str, Any]:
    """Measure the server's CPU per Run write (create + three status updates per Run).

    As in the task benchmark: the creates use the admin token, the status updates a
    ServiceAccount token (the control plane's and runtimed's), ``watchers`` streams follow
    every Run (the control plane, the benchmark) and one stream per Pod follows only the
    Runs assigned to it (runtimed's ``status.assignedPodUID`` field selector).
    """
    with tempfile.TemporaryDirectory(prefix="localkube-bench-runs-") as tmp:
        async with running_apiserver_child(Path(tmp)) as server:
            process, url, token = server.process, server.server, server.token
            bench = Bench(url, token, server.ca_pem)
            async with RawClient(url, token, bench.ssl) as client:
                await client.request(
                    "POST",
                    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                    yaml.safe_load(RUN_CRD.read_text()),
                )
                since = (await client.request("GET", RUNS, None))["metadata"]["resourceVersion"]
                sa_token = token if admin_writes else await _service_account_token(client, "bench")
            events = 0
            chunks = 0

            async def watcher(query: str, *, task_status: trio.TaskStatus[None]) -> None:
                nonlocal events, chunks
                async with RawClient(url, sa_token, bench.ssl) as stream:
                    started = False
                    async for lines in stream.stream_lines(
                        f"{RUNS}?watch=true&resourceVersion={since}{query}"
                    ):
                        if not started:
                            task_status.started()
                            started = True
                        events += sum(1 for line in lines if line)
                        chunks += 1

            queue = list(range(runs))

            async def writer(index: int) -> None:
                async with (
                    RawClient(url, token, bench.ssl) as client,
                    RawClient(url, sa_token, bench.ssl) as status_client,
                ):
                    while queue:
                        n = queue.pop()
                        name = f"run-{n:05d}"
                        obj = await client.request(
                            "POST",
                            RUNS,
                            {
                                "apiVersion": "kruntimes.io/v1alpha1",
                                "kind": "Run",
                                "metadata": {"name": name, "namespace": NAMESPACE},
                                "spec": {
                                    "runtime": "bash",
                                    "source": {"inline": "exit 0\n"},
                                    "mode": {"task": {}},
                                },
                            },
                        )
                        pod = index % max(pods, 2)  # Runs go to 2 Pods at least
                        for status in _run_statuses(f"pod-{pod}", f"uid-{pod}"):
                            obj["status"] = status
                            obj = await status_client.request("PUT", f"{RUNS}/{name}/status", obj)

            async with trio.open_nursery() as nursery:
                for _ in range(watchers):
                    await nursery.start(watcher, "")
                for pod in range(pods):
                    await nursery.start(
                        watcher, f"&fieldSelector=status.assignedPodUID%3Duid-{pod}"
                    )
                start = time.perf_counter()
                user_before, system_before = _cpu_split(process.pid)
                async with trio.open_nursery() as writing:
                    for index in range(writers):
                        writing.start_soon(writer, index)
                elapsed = time.perf_counter() - start
                user_after, system_after = _cpu_split(process.pid)
                server_system = system_after - system_before
                server_cpu = user_after - user_before + server_system
                await trio.sleep(0.3)  # let watchers drain
                nursery.cancel_scope.cancel()
    return {
        "runs": runs,
        "writers": writers,
        "watchers": watchers,
        "pod_watchers": pods,
        "status_writer": "admin" if admin_writes else "serviceaccount",
        "seconds": round(elapsed, 2),
        "runs_per_second": round(runs / elapsed, 1),
        "watch_events": events,
        "watch_chunks": chunks,
        "server_cpu_ms_per_run": round(server_cpu * 1000 / runs, 3),
        "server_cpu_ms_per_write": round(server_cpu * 1000 / (4 * runs), 3),
        "server_system_cpu_ms_per_run": round(server_system * 1000 / runs, 3),
        "load_average": round(os.getloadavg()[0], 2),
    }


def _figures(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The figures for bench/report.py (its ``--report-json`` record format)."""
    store = f"store alone without HTTP, {result['watchers']} subscribers"
    watchers = f"{result['writers']} writers, {result['watchers']} watchers"
    return [
        {"figure": f"API server writes/s ({watchers})", "value": result["writes_per_second"],
         "unit": "writes/s", "baseline": store, "baseline_value": result["store_writes_per_second"],
         "target": 1000, "target_op": ">="},
        {"figure": "watch delay p50 (write sent -> event received)",
         "value": result["watch_delay_p50_ms"], "unit": "ms", "baseline": f"{store} p50",
         "baseline_value": result["store_delay_p50_ms"], "target": 5, "target_op": "<"},
        {"figure": "watch delay p99", "value": result["watch_delay_p99_ms"], "unit": "ms",
         "baseline": f"{store} p99", "baseline_value": result["store_delay_p99_ms"]},
        {"figure": "API server CPU per write", "value": result["server_cpu_ms_per_write"],
         "unit": "ms"},
    ]  # fmt: skip


def main() -> None:
    """Parse arguments, run the benchmark once and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="measured write phase (s)")
    parser.add_argument("--writers", type=int, default=8, help="concurrent writer connections")
    parser.add_argument("--watchers", type=int, default=10, help="concurrent watch streams")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--rate",
        type=float,
        default=0.0,
        help="pace the writers to this many writes/s in all (0: as fast as they can)",
    )
    parser.add_argument(
        "--httpx-watchers",
        action="store_true",
        help="watch with httpx instead of the minimal h11 client (more client CPU)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="short run: 1 s, 4 writers, 4 watchers"
    )
    parser.add_argument("--report-json", metavar="PATH", help="write figures for bench/report.py")
    parser.add_argument(
        "--runs", type=int, default=0, help="measure N Runs' writes instead (see above)"
    )
    parser.add_argument(
        "--pods",
        type=int,
        default=2,
        help="with --runs: field-selected watchers, one per Pod the Runs go to (at least 2)",
    )
    parser.add_argument(
        "--admin-writes",
        action="store_true",
        help="with --runs: status updates with the admin token, not a ServiceAccount's",
    )
    args = parser.parse_args()
    if args.quick:  # quick defaults; explicit arguments still win
        parser.set_defaults(seconds=1.0, writers=4, watchers=4)
        args = parser.parse_args()
    if args.runs:
        figures = trio.run(
            run_runs, args.runs, args.writers, args.watchers, args.pods, args.admin_writes
        )
        if args.json:
            print(json.dumps(figures))
            return
        print(
            f"{figures['runs']} Runs (create + 3 status writes each by "
            f"{figures['status_writer']}, {figures['writers']} writers, {figures['watchers']} "
            f"watchers + {figures['pod_watchers']} field-selected, SQLite) in {figures['seconds']} s "
            f"= {figures['runs_per_second']} Runs/s; {figures['watch_events']} watch events in "
            f"{figures['watch_chunks']} chunks"
        )
        print(
            f"server CPU: {figures['server_cpu_ms_per_run']} ms per Run, "
            f"{figures['server_cpu_ms_per_write']} ms per write, of which system "
            f"{figures['server_system_cpu_ms_per_run']} ms per Run (load average {figures['load_average']})"
        )
        return
    result = trio.run(
        run, args.seconds, args.writers, args.watchers, args.httpx_watchers, args.rate
    )
    result.update(trio.run(run_store_only, min(args.seconds, 2.0), args.watchers))
    if args.report_json:
        Path(args.report_json).write_text(json.dumps(_figures(result)))
    if args.json:
        print(json.dumps(result))
        return
    print(
        f"writes: {result['writes']} in {result['seconds']} s = {result['writes_per_second']} writes/s "
        f"({result['writers']} writers, {result['watchers']} watchers, SQLite)"
    )
    print(
        f"watch delay (write sent -> event received, {result['watch_events']} events): "
        f"p50 {result['watch_delay_p50_ms']} ms, p99 {result['watch_delay_p99_ms']} ms"
    )
    print(
        f"CPU per write: server {result['server_cpu_ms_per_write']} ms, "
        f"benchmark client {result['client_cpu_ms_per_write']} ms ({result['cpu_count']} cores shared, "
        f"load average {result['load_average']})"
    )
    print(
        f"store alone (SQLite commit + fan-out to {result['watchers']} subscribers, no HTTP): "
        f"{result['store_writes_per_second']} writes/s, delay p50 {result['store_delay_p50_ms']} ms, "
        f"p99 {result['store_delay_p99_ms']} ms"
    )
    print("targets: >= 1000 writes/s, p50 < 5 ms")


if __name__ == "__main__":
    main()
