"""The load of a chaos scenario: invokes of several function Runs and a stream of task Runs.

Function Runs run :data:`FUNCTION_SOURCE`: the handler answers with the Pod that executed
it (from its working directory, ``<pod-root>/workspace/runs/<run-uid>/work``, where the Pod
root is ``<namespace>_<pod>_<pod-uid>``) and an id of its worker process's import of the
module, so every answer says which owner served it. One worker per function Run invokes it
sequentially (one in flight per Run, seed 000's v0.x concurrency), each answer recorded as an
:class:`InvokeRecord` with trio-clock send and answer times.

Task Runs run :data:`TASK_SOURCE`: each execution appends one JSON line to
``<ledger>/<run>.jsonl`` (O_APPEND, one small write: atomic) before it sleeps and exits 0,
so the ledger counts executions per Run, including ones whose result was lost.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import trio

from krt.kube.client import Kube
from krt.kube.resources import RUNS

from .cluster import NS, ChaosCluster

#: The invocation timeout every request asks for (``X-Kruntime-Timeout``, milliseconds).
INVOKE_TIMEOUT_MS = 5000
#: Seconds the client waits for an answer: the gateway answers 504 after the invocation
#: timeout plus its deadline grace, so a longer wait is an unanswered request.
INVOKE_DEADLINE = INVOKE_TIMEOUT_MS / 1000 + 3.0
#: Seconds a worker pauses after a failed invoke (a client's back-off; keeps the log small).
FAILURE_PAUSE = 0.2

FUNCTION_SOURCE = """\
import os
import uuid

INSTANCE = uuid.uuid4().hex


def invoke(event):
    parts = os.getcwd().split(os.sep)
    pod_root = parts[parts.index("workspace") - 1]
    _namespace, pod, pod_uid = pod_root.split("_", 2)
    return {"pod": pod, "podUID": pod_uid, "instance": INSTANCE, "seq": event.get("seq")}
"""

TASK_SOURCE = """\
import json
import os
import time

with open({ledger!r}, "a") as ledger:
    ledger.write(json.dumps({{"run": {name!r}, "cwd": os.getcwd(), "t": time.time()}}) + "\\n")
time.sleep({seconds!r})
print("done")
"""


def function_manifest(name: str) -> dict[str, Any]:
    """A python function Run serving :data:`FUNCTION_SOURCE` (``main.invoke``)."""
    return {
        "apiVersion": "kruntimes.io/v1alpha1",
        "kind": "Run",
        "metadata": {"name": name, "namespace": NS, "labels": {"chaos": "function"}},
        "spec": {
            "runtime": "python",
            "source": {"inline": FUNCTION_SOURCE, "inlinePath": "main.py"},
            "mode": {"function": {"handler": "main.invoke"}},
            "retryPolicy": {"maxAttempts": 10, "backoff": "0s"},
        },
    }


def task_manifest(name: str, ledger: Path, *, seconds: float, timeout: str) -> dict[str, Any]:
    """A python task Run that logs its execution in ``ledger`` and sleeps ``seconds``."""
    return {
        "apiVersion": "kruntimes.io/v1alpha1",
        "kind": "Run",
        "metadata": {"name": name, "namespace": NS, "labels": {"chaos": "task"}},
        "spec": {
            "runtime": "python",
            "source": {
                "inline": TASK_SOURCE.format(ledger=str(ledger), name=name, seconds=seconds),
                "inlinePath": "main.py",
            },
            "mode": {"task": {"entrypoint": "main.py"}},
            "timeout": timeout,
            "retryPolicy": {"maxAttempts": 5, "backoff": "0s"},
        },
    }


@dataclass(frozen=True)
class InvokeRecord:
    """One invoke as the client saw it (times on the trio clock, seconds).

    Attributes:
        run: the function Run's name. sent, answered: when the request left / the answer
            (or the failure) arrived. status: the HTTP status, or 0 with ``error`` set for
            a transport failure or a client-side timeout. pod_uid, pod, instance: who served
            a 200 (from the handler's answer). token: which token the request carried.
    """

    run: str
    sent: float
    answered: float
    status: int
    pod_uid: str = ""
    pod: str = ""
    instance: str = ""
    error: str = ""
    token: str = ""
    body: str = ""


@dataclass
class TokenSource:
    """The bearer token the invoke workers send; replaced by the expiry fault.

    Attributes:
        label: a name for the current token (recorded with every invoke).
        token: the token itself (never printed).
        refresh: called by a worker after a 401 to obtain a new token; None: keep sending.
    """

    label: str
    token: str
    refresh: Callable[[], Any] | None = None
    refreshing: bool = False


@dataclass
class InvokeLoad:
    """Invokes every function Run in ``endpoints`` in a loop until cancelled.

    Attributes:
        cluster: where the gateway is.
        tokens: the token source.
        endpoints: Run name -> the invoke URL the Run published.
        interval: seconds between the starts of one worker's invokes (0: back to back).
        records: every invoke, in completion order.
    """

    cluster: ChaosCluster
    tokens: TokenSource
    endpoints: dict[str, str]
    interval: float = 0.0
    records: list[InvokeRecord] = field(default_factory=list)

    def client(self) -> httpx.AsyncClient:
        """A keep-alive HTTPS client trusting the gateway CA."""
        context = ssl.create_default_context(cafile=str(self.cluster.gateway_ca))
        return httpx.AsyncClient(verify=context, timeout=None)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """One worker per function Run; never returns unless cancelled."""
        async with trio.open_nursery() as nursery:
            for name, url in sorted(self.endpoints.items()):
                nursery.start_soon(self._worker, name, url)
            task_status.started()

    async def invoke_once(self, client: httpx.AsyncClient, name: str, seq: int) -> InvokeRecord:
        """One invoke of ``name``; a transport failure or timeout is a record, not an error."""
        url = self.cluster.invoke_url(self.endpoints[name])
        label, token = self.tokens.label, self.tokens.token
        sent = trio.current_time()
        headers = {
            "authorization": f"Bearer {token}",
            "content-type": "application/json",
            "x-kruntime-invocation-id": f"{name}-{seq}",
            "x-kruntime-timeout": str(INVOKE_TIMEOUT_MS),
        }
        record: InvokeRecord | None = None
        with trio.move_on_after(INVOKE_DEADLINE):
            try:
                answer = await client.post(url, content=json.dumps({"seq": seq}), headers=headers)
            except httpx.HTTPError as exc:
                record = InvokeRecord(
                    name, sent, trio.current_time(), 0, error=type(exc).__name__, token=label
                )
            else:
                record = _record(name, sent, answer, label)
        if record is None:
            record = InvokeRecord(name, sent, trio.current_time(), 0, error="timeout", token=label)
        self.records.append(record)
        return record

    async def _worker(self, name: str, url: str) -> None:
        seq = 0
        client = self.client()
        next_at = trio.current_time()
        async with client:
            while True:
                seq += 1
                if self.interval:
                    next_at = max(next_at + self.interval, trio.current_time() - self.interval)
                    await trio.sleep_until(next_at)
                record = await self.invoke_once(client, name, seq)
                if record.status == 401 and self.tokens.refresh is not None:
                    await self._refresh()
                if record.status != 200:
                    await trio.sleep(FAILURE_PAUSE)
                else:
                    await trio.lowlevel.checkpoint()

    async def _refresh(self) -> None:
        if self.tokens.refreshing or self.tokens.refresh is None:
            return
        self.tokens.refreshing = True
        try:
            await self.tokens.refresh()
        finally:
            self.tokens.refreshing = False


def _record(name: str, sent: float, answer: httpx.Response, label: str) -> InvokeRecord:
    answered = trio.current_time()
    if answer.status_code != 200:
        return InvokeRecord(
            name, sent, answered, answer.status_code, token=label, body=answer.text[:300]
        )
    try:
        data = answer.json()
        return InvokeRecord(
            name,
            sent,
            answered,
            200,
            pod_uid=str(data["podUID"]),
            pod=str(data["pod"]),
            instance=str(data["instance"]),
            token=label,
        )
    except (ValueError, KeyError, TypeError):
        return InvokeRecord(name, sent, answered, 200, token=label, body=answer.text[:300])


@dataclass
class TaskLoad:
    """Creates task Runs at a steady pace until cancelled.

    Attributes:
        kube: an admin client. ledger_dir: the execution ledger directory.
        prefix: Run name prefix. period: seconds between creations. seconds: how long each
            task sleeps. timeout: each task's ``spec.timeout``. limit: at most this many.
        created: names of the Runs created.
    """

    kube: Kube
    ledger_dir: Path
    prefix: str
    period: float
    seconds: float
    timeout: str = "90s"
    limit: int = 1000
    created: list[str] = field(default_factory=list)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Create one task Run every ``period`` seconds; never returns unless cancelled."""
        task_status.started()
        while len(self.created) < self.limit:
            name = f"{self.prefix}-{len(self.created):03d}"
            try:
                await self.kube.create(
                    RUNS,
                    task_manifest(
                        name,
                        self.ledger_dir / f"{name}.jsonl",
                        seconds=self.seconds,
                        timeout=self.timeout,
                    ),
                )
            except Exception:  # noqa: BLE001 - the API server may be restarting: skip one
                pass
            else:
                self.created.append(name)
            await trio.sleep(self.period)


@dataclass(frozen=True)
class Execution:
    """One task execution from the ledger: the Pod (UID) it ran on and its start (unix s)."""

    pod_uid: str
    started: float


def executions(ledger_dir: Path) -> dict[str, list[Execution]]:
    """Run name -> every execution of its task (from the ledger), in ledger order.

    The Pod UID is read from the execution's working directory, below the Pod root
    ``<namespace>_<pod>_<pod-uid>``.
    """
    found: dict[str, list[Execution]] = {}
    for path in ledger_dir.glob("*.jsonl"):
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            entry = json.loads(line)
            parts = Path(entry["cwd"]).parts
            pod_root = parts[parts.index("workspace") - 1] if "workspace" in parts else ""
            pod_uid = pod_root.rsplit("_", 1)[-1]
            found.setdefault(entry["run"], []).append(Execution(pod_uid, float(entry["t"])))
    return found
