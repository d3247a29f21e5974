"""The faults a scenario injects, one class each (issue 10's list).

A fault's :meth:`Fault.inject` returns once the fault is fully applied (a SIGSTOP fault
returns after its SIGCONT), naming what it hit; :meth:`Fault.restore` puts back what the
fault changed for good (a scaled Deployment) before the next scenario; :meth:`Fault.checks`
adds promises specific to the fault. Process faults signal the process group the node
records for a container run (``run/<container>.pid`` in the Pod root): the container's
processes, as a crash or the kernel's OOM killer would.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import trio

from krt.kube.client import Kube
from krt.kube.errors import NotFound
from krt.kube.resources import PODS

from . import cluster as c
from .promises import Loss
from .timeline import RunTimeline
from .workload import InvokeRecord, TokenSource

#: runtimed's heartbeat Lease duration (seconds; renewed every 10 s, docs/architecture.md).
HEARTBEAT_BOUND = 40.0
#: Seconds an authorization decision may be cached (seed 000, Authentication).
AUTH_CACHE_BOUND = 30.0


@dataclass
class FaultContext:
    """What a fault may touch.

    Attributes:
        cluster: the cluster. kube: an admin client. timeline: the Runs as watched.
        tokens: the invoke load's token source.
    """

    cluster: c.ChaosCluster
    kube: Kube
    timeline: RunTimeline
    tokens: TokenSource


class Fault:
    """A fault; subclasses set ``name`` and override :meth:`inject`.

    Attributes:
        name: the scenario id. recovery_bound: seconds after the fault within which every
            Ready function must answer again (the scenario fails beyond it).
        min_duration: seconds the load keeps running after the fault at least.
        kills_gateway: the fault SIGKILLs the gateway (see the proxy bug in
            test_chaos_findings.py).
        short: part of the short suite (``make test``).
    """

    name = "fault"
    recovery_bound = 30.0
    min_duration = 0.0
    short = False
    kills_gateway = False

    def __init__(self) -> None:
        #: Pods on which the fault destroyed running executions (see promises.Loss).
        self.losses: list[Loss] = []

    async def prepare(self, ctx: FaultContext) -> None:
        """Called before the load starts (default: nothing)."""

    async def inject(self, ctx: FaultContext) -> str:
        """Apply the fault; return what was hit."""
        raise NotImplementedError

    async def restore(self, ctx: FaultContext) -> None:
        """Undo lasting changes (default: nothing)."""

    def checks(self, records: Sequence[InvokeRecord]) -> tuple[list[str], list[str]]:
        """Fault-specific ``(figures, violations)`` (default: none)."""
        return [], []


async def busiest_python_pod(ctx: FaultContext, skip: Sequence[str] = ()) -> dict[str, Any]:
    """The Ready python Pod with the most load on it, so the fault hits the load.

    A task in flight counts twice a function Run: a fault should catch executions too.
    """
    pods = [p for p in await c.python_pods(ctx.kube) if p["metadata"]["name"] not in skip]
    if not pods:
        raise LookupError("no Ready python Runtime Pod")
    load: dict[str, int] = {}
    for kind, weight in (("function", 1), ("task", 2)):
        for obs in (ctx.timeline.last(n) for n in ctx.timeline.names(kind)):
            if obs is not None and obs.phase in ("Scheduled", "Running", "Ready"):
                load[obs.pod_uid] = load.get(obs.pod_uid, 0) + weight
    return max(pods, key=lambda p: load.get(p["metadata"]["uid"], 0))


def _kill_containers(
    ctx: FaultContext, pod: dict[str, Any], containers: Sequence[str], losses: list[Loss]
) -> str:
    root = ctx.cluster.pod_root(pod)
    for container in containers:
        if container == "runtime":
            losses.append(Loss(pod["metadata"]["uid"], time.time()))
        c.signal_container(root, container, signal.SIGKILL)
    return f"SIGKILL {'+'.join(containers)} of Pod {pod['metadata']['name']}"


class KillPodProcesses(Fault):
    """Every process of a Runtime Pod dies (runtimed, Runtime Server, its workers)."""

    name = "kill-pod-processes"
    short = True

    async def inject(self, ctx: FaultContext) -> str:
        pod = await busiest_python_pod(ctx)
        return _kill_containers(ctx, pod, ("runtimed", "runtime"), self.losses)


class DeletePod(Fault):
    """A Runtime Pod is deleted (the Deployment replaces it)."""

    name = "delete-pod"
    short = True

    async def inject(self, ctx: FaultContext) -> str:
        pod = await busiest_python_pod(ctx)
        self.losses.append(Loss(pod["metadata"]["uid"], time.time()))
        await ctx.kube.delete(PODS, pod["metadata"]["name"], c.NS)
        return f"deleted Pod {pod['metadata']['name']}"


class KillRuntimed(Fault):
    """runtimed alone dies; the Runtime Server and its registrations live on."""

    name = "kill-runtimed"
    short = True

    async def inject(self, ctx: FaultContext) -> str:
        return _kill_containers(ctx, await busiest_python_pod(ctx), ("runtimed",), self.losses)


class KillRuntimeServer(Fault):
    """The Runtime Server alone dies (its registrations and executions are lost)."""

    name = "kill-runtime-server"

    async def inject(self, ctx: FaultContext) -> str:
        return _kill_containers(ctx, await busiest_python_pod(ctx), ("runtime",), self.losses)


class RestartControlPlane(Fault):
    """The control plane process dies; the node restarts its container."""

    name = "restart-controlplane"

    async def inject(self, ctx: FaultContext) -> str:
        pod = await c.system_pod(ctx.kube, c.CONTROLPLANE_SELECTOR)
        return _kill_containers(ctx, pod, ("controlplane",), self.losses)


class RestartGateway(Fault):
    """The gateway process dies; the node restarts its container."""

    name = "restart-gateway"
    short = True
    kills_gateway = True

    async def inject(self, ctx: FaultContext) -> str:
        pod = await c.system_pod(ctx.kube, c.GATEWAY_SELECTOR)
        return _kill_containers(ctx, pod, ("gateway",), self.losses)


class RestartApiServer(Fault):
    """The API server stops for 2 s and starts again on its durable state."""

    name = "restart-apiserver"
    short = True

    async def inject(self, ctx: FaultContext) -> str:
        marker = trio.Path(ctx.cluster.state_dir / "apiserver-restarts")
        before = await marker.read_text() if await marker.exists() else "0"
        os.kill(ctx.cluster.runner_pid, signal.SIGUSR1)
        with trio.fail_after(30):
            while True:
                if await marker.exists() and await marker.read_text() != before:
                    break
                await trio.sleep(0.1)
        return "API server restarted (2 s down)"


class TwoControlPlanes(Fault):
    """Two control-plane replicas under load; then the leader dies."""

    name = "two-controlplanes"
    recovery_bound = 60.0
    old_leader = ""
    new_leader = ""
    takeover = 0.0

    async def inject(self, ctx: FaultContext) -> str:
        await c.scale_controlplane(ctx.kube, 2)
        with trio.fail_after(30):
            while True:
                pods, _ = await ctx.kube.list(
                    PODS, c.SYSTEM_NS, label_selector=c.CONTROLPLANE_SELECTOR
                )
                ready = [p for p in pods if c.pod_ready(p)]
                if len(ready) >= 2:
                    break
                await trio.sleep(0.2)
        leader = await c.controlplane_leader(ctx.kube)
        self.old_leader = self.new_leader = leader
        victim = next((p for p in ready if p["metadata"]["name"] in leader), ready[0])
        killed_at = trio.current_time()
        _kill_containers(ctx, victim, ("controlplane",), self.losses)
        holder = leader
        with trio.move_on_after(60):
            while True:
                holder = await c.controlplane_leader(ctx.kube)
                if holder and holder != leader:
                    break
                await trio.sleep(0.2)
        self.takeover = trio.current_time() - killed_at
        self.new_leader = holder
        return f"2 control planes; killed the leader {victim['metadata']['name']} ({leader})"

    def checks(self, records: Sequence[InvokeRecord]) -> tuple[list[str], list[str]]:
        if self.new_leader == self.old_leader:
            return [], [f"no other control plane took the Lease within {self.takeover:.0f} s"]
        return [f"leadership moved to {self.new_leader} {self.takeover:.1f} s after the kill"], []

    async def restore(self, ctx: FaultContext) -> None:
        await c.scale_controlplane(ctx.kube, 1)
        with trio.fail_after(30):
            while True:
                pods, _ = await ctx.kube.list(
                    PODS, c.SYSTEM_NS, label_selector=c.CONTROLPLANE_SELECTOR
                )
                if len(pods) <= 1:
                    return
                await trio.sleep(0.2)


class ExpireTokens(Fault):
    """The caller's token stops being valid mid-load; clients fetch a new one on 401.

    The token is bound to a Secret; deleting the Secret invalidates it at once (TokenRequest
    cannot mint tokens shorter than 600 s). Seed 000: decisions are cached at most 30 s, so
    no request with the old token may succeed later than :data:`AUTH_CACHE_BOUND` after it.
    """

    name = "expire-tokens"
    recovery_bound = AUTH_CACHE_BOUND + 15.0
    min_duration = AUTH_CACHE_BOUND + 5.0

    def __init__(self) -> None:
        super().__init__()
        self.invalidated_at = 0.0
        self.old = ""
        self.secrets: list[str] = []

    async def _new_token(self, ctx: FaultContext) -> None:
        secret = f"chaos-token-{len(self.secrets) + 1}-{os.getpid()}"
        token = await c.caller_token(ctx.kube, bound_secret=secret)
        self.secrets.append(secret)
        ctx.tokens.label, ctx.tokens.token = secret, token

    async def prepare(self, ctx: FaultContext) -> None:
        await self._new_token(ctx)

        async def refresh() -> None:
            await self._new_token(ctx)

        ctx.tokens.refresh = refresh

    async def inject(self, ctx: FaultContext) -> str:
        old = self.secrets[-1]
        self.invalidated_at = trio.current_time()
        await ctx.kube.delete(c.SECRETS, old, c.NS)
        self.old = old
        return f"token bound to Secret {old} invalidated"

    async def restore(self, ctx: FaultContext) -> None:
        ctx.tokens.refresh = None
        for secret in self.secrets:
            try:
                await ctx.kube.delete(c.SECRETS, secret, c.NS)
            except NotFound:
                pass

    def checks(self, records: Sequence[InvokeRecord]) -> tuple[list[str], list[str]]:
        old = [r for r in records if r.token == self.old and r.sent >= self.invalidated_at]
        ok_after = [r.answered - self.invalidated_at for r in old if r.status == 200]
        first_401 = min((r.answered for r in old if r.status == 401), default=None)
        figures = [
            f"old token after invalidation: {len(old)} requests, "
            f"{len(ok_after)} answered 200 (last {max(ok_after, default=0):.1f} s after), "
            + (
                f"first 401 after {first_401 - self.invalidated_at:.1f} s"
                if first_401 is not None
                else "no 401"
            )
        ]
        violations = [
            f"a request with the invalidated token succeeded {late:.1f} s after invalidation "
            f"(bound {AUTH_CACHE_BOUND:g} s)"
            for late in ok_after
            if late > AUTH_CACHE_BOUND + 1.0
        ]
        if old and first_401 is None:
            violations.append("the invalidated token was never refused with 401")
        return figures, violations


class PauseRuntimed(Fault):
    """runtimed is SIGSTOPped past the heartbeat bound, then resumed (SIGCONT).

    Its Runs must be fenced and recovered elsewhere while it sleeps; once resumed it must
    not answer for Runs that moved away (checked by the fenced-owner promise).
    """

    name = "pause-runtimed"
    recovery_bound = HEARTBEAT_BOUND + 45.0

    async def inject(self, ctx: FaultContext) -> str:
        pod = await busiest_python_pod(ctx)
        root = ctx.cluster.pod_root(pod)
        pgid = c.signal_container(root, "runtimed", signal.SIGSTOP)
        try:
            await trio.sleep(HEARTBEAT_BOUND + 5.0)
        finally:
            try:
                os.killpg(pgid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        return f"SIGSTOP runtimed of Pod {pod['metadata']['name']} for {HEARTBEAT_BOUND + 5:g} s"


class Several(Fault):
    """Several at once: Runtime Server of one Pod, another Pod deleted, gateway, control plane."""

    name = "several-together"
    recovery_bound = 45.0
    kills_gateway = True

    async def inject(self, ctx: FaultContext) -> str:
        first = await busiest_python_pod(ctx)
        second = await busiest_python_pod(ctx, skip=[first["metadata"]["name"]])
        gateway = await c.system_pod(ctx.kube, c.GATEWAY_SELECTOR)
        plane = await c.system_pod(ctx.kube, c.CONTROLPLANE_SELECTOR)
        done = [
            _kill_containers(ctx, first, ("runtime",), self.losses),
            _kill_containers(ctx, gateway, ("gateway",), self.losses),
            _kill_containers(ctx, plane, ("controlplane",), self.losses),
        ]
        self.losses.append(Loss(second["metadata"]["uid"], time.time()))
        await ctx.kube.delete(PODS, second["metadata"]["name"], c.NS)
        done.append(f"deleted Pod {second['metadata']['name']}")
        return "; ".join(done)


ALL_FAULTS: tuple[type[Fault], ...] = (
    KillPodProcesses,
    DeletePod,
    KillRuntimed,
    KillRuntimeServer,
    RestartControlPlane,
    RestartGateway,
    RestartApiServer,
    TwoControlPlanes,
    ExpireTokens,
    PauseRuntimed,
)
