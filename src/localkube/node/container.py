"""One container of a Pod: start, capture logs, probe, restart with back-off, stop.

A :class:`ContainerRunner` owns one :class:`~localkube.node.podstatus.ContainerObservation`
and updates it as the container moves through waiting -> running -> terminated; every
change calls ``on_change()`` so the Pod worker writes the Pod status. The process tree:

    run()                          restart loop, per restartPolicy and CrashBackoff
      _run_once()                  one process (one run = one log file)
        pump stdout / stderr       -> logs/<container>/<restartCount>.log (CRI format,
                                      batched: localkube.node.logpump)
        probes                     startup, readiness, liveness
        stop watcher               SIGTERM -> grace -> SIGKILL of the container

Each run is started under a container init (:mod:`localkube.node.container_init`), a child
subreaper that, when the main process ends, kills every process the container started,
those in sessions of their own included (as a container's PID namespace would).

Kubernetes rules implemented: exit code ``128 + signal`` for a signalled process with
``reason`` Error (Completed for 0); a failed liveness probe kills and restarts the
container; a failed startup probe likewise; readiness only flips ``ready``; an image not in
the table stays waiting with ``ErrImagePull``; a configuration error stays waiting with
``CreateContainerConfigError`` and is retried; a program that cannot be executed ends
with terminated reason ``StartError`` (exit code 128) and counts as a crash.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import trio

from localkube.controllers.kubeapi import ApiStatusError
from localkube.images import ImageTable, UnknownImageError
from localkube.node.backoff import CrashBackoff, should_restart
from localkube.node.env import ContainerConfigError, expand
from localkube.node.layout import PodPaths
from localkube.node.logpump import pump_log
from localkube.node.logrotate import LogLimits, RotatingLog, prune_runs
from localkube.node.logs import encode_records
from localkube.node.podstatus import ContainerObservation
from localkube.node.probes import ProbeConfigError, ProbeTiming, ProbeTracker, run_probe
from localkube.node.process import (
    CONTAINER_MARK_ENV,
    ContainerProcess,
    PidRecord,
    kill_marked,
    open_container_process,
    signal_group,
    start_ticks,
)
from localkube.node.volumes import VolumeError, mount_volumes

log = logging.getLogger(__name__)

#: How long a waiting container retries its configuration (seconds).
CONFIG_RETRY = 1.0
#: Seconds the output pipes are still read after the container's processes are killed.
PIPE_DRAIN_SECONDS = 1.0


@dataclass
class StopRequest:
    """Why and how a container stops: ``grace`` seconds between SIGTERM and SIGKILL."""

    grace: float
    reason: str = ""


class ContainerRunner:
    """Runs one container of a Pod until stopped.

    Args:
        spec: the ``spec.containers[]`` entry.
        paths: the Pod root.
        images: the image table.
        restart_policy: the Pod's ``restartPolicy``.
        env_for: ``await env_for(container_spec)`` returns the container's environment or
            raises ContainerConfigError (Secrets are read at each start).
        on_change: called after every observation change.
        observation: the observation to update (pre-filled when resuming after a node
            restart).
        backoff: crash back-off state.
        record: ``record(type, reason, message)`` queues a Pod Event (Normal/Warning).
        log_limits: log rotation sizes (default: the kubelet's 10 MiB x 5 files).
    """

    def __init__(
        self,
        spec: Mapping[str, Any],
        *,
        paths: PodPaths,
        pod: Callable[[], Mapping[str, Any]],
        images: ImageTable,
        restart_policy: str,
        env_for: Callable[[Mapping[str, Any]], Awaitable[dict[str, str]]],
        on_change: Callable[[], None],
        observation: ContainerObservation,
        backoff: CrashBackoff,
        record: Callable[[str, str, str], None] | None = None,
        log_limits: LogLimits | None = None,
    ) -> None:
        self.spec = spec
        self.name = str(spec["name"])
        self.paths = paths
        self.pod = pod
        self.images = images
        self.restart_policy = restart_policy
        self.env_for = env_for
        self.on_change = on_change
        self.record = record or (lambda _type, _reason, _message: None)
        self.obs = observation
        self.backoff = backoff
        self.log_limits = log_limits or LogLimits()
        self.stop_request: StopRequest | None = None
        self._stop_event = trio.Event()
        self._process: ContainerProcess | None = None
        self.finished = trio.Event()

    def request_stop(self, grace: float, reason: str = "") -> None:
        """Ask the container to stop for good: SIGTERM now, SIGKILL after ``grace`` s."""
        if self.stop_request is None:
            self.stop_request = StopRequest(grace, reason)
            self._stop_event.set()

    def _set(self, **fields: Any) -> None:
        for k, v in fields.items():
            setattr(self.obs, k, v)
        self.on_change()

    async def _wait_or_stop(self, seconds: float) -> bool:
        """Sleep ``seconds`` unless stopped; return True if stopped."""
        with trio.move_on_after(seconds):
            await self._stop_event.wait()
        return self._stop_event.is_set()

    async def run(self) -> None:
        """Run (and restart) the container until it is stopped or finished for good."""
        try:
            await self._loop()
        finally:
            self.finished.set()

    async def _loop(self) -> None:
        while self.stop_request is None:
            try:
                entry = self.images.resolve(str(self.spec.get("image", "")))
            except UnknownImageError as exc:
                self._set(state="waiting", reason="ErrImagePull", message=str(exc))
                self.record("Warning", "Failed", f"Failed to pull image: {exc}")
                await self._stop_event.wait()
                return
            try:
                env = await self.env_for(self.spec)
                await trio.to_thread.run_sync(mount_volumes, self.paths, self.pod(), self.spec)
                argv = entry.argv(
                    [expand(a, env) for a in self.spec["command"]]
                    if self.spec.get("command")
                    else None,
                    [expand(a, env) for a in self.spec["args"]] if "args" in self.spec else None,
                )
            except (
                ContainerConfigError,
                VolumeError,
                ValueError,
                OSError,
                ApiStatusError,
                httpx.HTTPError,
            ) as exc:
                self._set(state="waiting", reason="CreateContainerConfigError", message=str(exc))
                self.record("Warning", "Failed", f"Error: {exc}")
                if await self._wait_or_stop(CONFIG_RETRY):
                    return
                continue
            started = time.time()
            exit_code = await self._run_once(argv, env)
            if self.stop_request is not None:
                return
            if not should_restart(self.restart_policy, exit_code):
                return
            # lastState is the run that ended (reason Completed/Error/OOMKilled...), taken
            # before the back-off wait puts CrashLoopBackOff in the current state
            ended = self.obs.terminated_state()
            delay = self.backoff.next_delay(time.time() - started)
            if delay > 0:
                self._set(
                    state="waiting",
                    reason="CrashLoopBackOff",
                    message=f"back-off {delay:g}s restarting failed container={self.name} "
                    f"pod={self.pod().get('metadata', {}).get('name', '')}",
                )
                self.record("Warning", "BackOff", "Back-off restarting failed container")
                if await self._wait_or_stop(delay):
                    return
            self.obs.last_terminated = ended
            self.obs.restart_count += 1

    async def _run_once(self, argv: list[str], env: dict[str, str]) -> int:
        """Start one process and supervise it; return its Kubernetes exit code."""
        log_dir = self.paths.log_dir / self.name
        await trio.Path(log_dir).mkdir(parents=True, exist_ok=True)
        log_path = log_dir / f"{self.obs.restart_count}.log"
        # keep this run and the previous one (kubectl logs --previous), as the kubelet does
        await trio.to_thread.run_sync(
            lambda: prune_runs(log_dir, keep_from=self.obs.restart_count - 1)
        )
        await trio.Path(log_path.with_suffix(".exited")).unlink(missing_ok=True)
        started = time.time()
        self.record(
            "Normal",
            "Pulled",
            f'Container image "{self.spec.get("image", "")}" already present on machine',
        )
        self.record("Normal", "Created", f"Created container {self.name}")
        mark = f"{self.paths.root.name}/{self.name}/{self.obs.restart_count}"
        try:
            container = await open_container_process(
                argv, env={**env, CONTAINER_MARK_ENV: mark}, cwd=self.paths.workspace
            )
        except OSError as exc:
            image = self.spec.get("image", "")
            message = (
                f'failed to start container "{self.name}": image {image} maps to '
                f"{argv[0]}, which cannot be executed: {exc.strerror or exc}"
            )
            await trio.Path(log_path).write_bytes(
                encode_records("stderr", message.encode() + b"\n", now=started)
            )
            await trio.Path(log_path.with_suffix(".exited")).touch()
            self.record("Warning", "Failed", f"Error: {message}")
            self._set(
                state="terminated",
                reason="StartError",
                message=message,
                exit_code=128,
                signal=None,
                started_at=started,
                finished_at=time.time(),
                pid=None,
                ready=False,
                started=False,
            )
            return 128
        proc = container.init
        self._process = container
        main_pid = container.main_pid
        self.record("Normal", "Started", f"Started container {self.name}")
        await trio.to_thread.run_sync(
            PidRecord(main_pid, container.pgid, start_ticks(main_pid), mark).write,
            self.paths.pid_file(self.name),
        )
        has_readiness = "readinessProbe" in self.spec
        has_startup = "startupProbe" in self.spec
        self._set(
            state="running",
            reason="",
            message="",
            started_at=started,
            finished_at=None,
            exit_code=None,
            signal=None,
            pid=main_pid,
            ready=not has_readiness and not has_startup,
            started=not has_startup,
            ever_started=True,
        )
        try:
            return await self._supervise(container, log_path, env, started, mark)
        finally:
            if proc.returncode is None:
                # cancelled (node shutdown after its grace): never leave a process behind;
                # the init, left alive, takes down the descendants in other sessions
                container.kill()
                kill_marked(mark)  # short procfs scan; no await while cancelled

    async def _supervise(
        self,
        container: ContainerProcess,
        log_path: Path,
        env: dict[str, str],
        started: float,
        mark: str,
    ) -> int:
        proc = container.init
        kill_reason: list[str] = []
        exited = trio.Event()
        limits = self.log_limits
        async with RotatingLog(
            log_path, max_bytes=limits.max_bytes, max_files=limits.max_files
        ) as logf:
            async with trio.open_nursery() as nursery:
                if proc.stdout is not None:
                    nursery.start_soon(pump_log, proc.stdout, "stdout", logf)
                if proc.stderr is not None:
                    nursery.start_soon(pump_log, proc.stderr, "stderr", logf)
                async with trio.open_nursery() as watchers:
                    watchers.start_soon(self._probe_loop, env, kill_reason, exited)
                    watchers.start_soon(self._stop_watcher, exited)
                    await proc.wait()
                    exited.set()
                    watchers.cancel_scope.cancel()
                # the container ended: its init killed every descendant before exiting;
                # the group and the mark are backstops (an init killed from outside)
                container.kill()
                await trio.to_thread.run_sync(kill_marked, mark)
                # a descendant that escaped both (clean environment) may still hold the
                # output pipes: read what is there, but never wait for their end forever
                nursery.cancel_scope.deadline = trio.current_time() + PIPE_DRAIN_SECONDS
        rc = proc.returncode if proc.returncode is not None else -9
        code, sig = (rc, None) if rc >= 0 else (128 - rc, -rc)
        await trio.Path(log_path.with_suffix(".exited")).touch()
        await trio.Path(self.paths.pid_file(self.name)).unlink(missing_ok=True)
        self._process = None
        reason = "Completed" if code == 0 else "Error"
        self._set(
            state="terminated",
            reason=reason,
            message="; ".join(kill_reason),
            exit_code=code,
            signal=sig,
            finished_at=time.time(),
            ready=False,
            started=False,
        )
        return code

    async def _terminate(self, grace: float, exited: trio.Event) -> None:
        container = self._process
        if container is None:
            return
        self.record("Normal", "Killing", f"Stopping container {self.name}")
        signal_group(container.pgid, signal.SIGTERM)
        with trio.move_on_after(grace):
            await exited.wait()
        if not exited.is_set():
            container.kill()  # the init takes down the rest, then exits

    async def _stop_watcher(self, exited: trio.Event) -> None:
        await self._stop_event.wait()
        assert self.stop_request is not None
        await self._terminate(self.stop_request.grace, exited)

    async def _probe_loop(
        self, env: dict[str, str], kill_reason: list[str], exited: trio.Event
    ) -> None:
        ip = str(self.pod().get("status", {}).get("podIP", "127.0.0.1"))
        grace = float(self.pod().get("spec", {}).get("terminationGracePeriodSeconds", 30))
        startup = self.spec.get("startupProbe")
        if startup:
            failed = await self._watch_probe(startup, "startup", env, ip)
            if failed:
                kill_reason.append(failed)
                await self._terminate(grace, exited)
                return
            self._set(started=True, ready="readinessProbe" not in self.spec)
        async with trio.open_nursery() as nursery:
            if "readinessProbe" in self.spec:
                nursery.start_soon(
                    self._watch_probe, self.spec["readinessProbe"], "readiness", env, ip
                )
            liveness = self.spec.get("livenessProbe")
            if liveness:
                failed = await self._watch_probe(liveness, "liveness", env, ip)
                if failed:
                    kill_reason.append(failed)
                    nursery.cancel_scope.cancel()
                    await self._terminate(
                        float(liveness.get("terminationGracePeriodSeconds", grace)), exited
                    )

    async def _watch_probe(
        self,
        spec: Mapping[str, Any],
        kind: str,
        env: dict[str, str],
        ip: str,
    ) -> str:
        """Probe periodically. readiness: update ``ready`` forever (returns never);
        liveness/startup: return a message once the probe has failed."""
        timing = ProbeTiming.from_spec(spec)
        # readiness starts failed; liveness/startup count failures from an initial success
        tracker = ProbeTracker(
            timing.success_threshold if kind == "readiness" else 1,
            timing.failure_threshold,
            ok=kind == "liveness",
        )
        failures = 0
        await trio.sleep(timing.initial_delay)
        while True:
            try:
                ok = await run_probe(
                    spec, host=ip, container=self.spec, env=env, cwd=self.paths.workspace
                )
            except ProbeConfigError as exc:
                log.warning("%s: %s probe: %s", self.name, kind, exc)
                ok = False
            failures = 0 if ok else failures + 1
            flipped = tracker.observe(ok)
            if not ok:
                self.record("Warning", "Unhealthy", f"{kind.capitalize()} probe failed")
            if kind == "readiness" and flipped:
                self._set(ready=tracker.ok)
            elif kind == "startup":
                if ok:
                    return ""
                if failures >= timing.failure_threshold:
                    return f"Startup probe failed {failures} times"
            elif kind == "liveness" and flipped and not tracker.ok:
                return f"Liveness probe failed {failures} times"
            await trio.sleep(timing.period)
