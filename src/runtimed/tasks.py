"""The task-Run lifecycle of runtimed: the trio adapter around :mod:`runtimed.task_decisions`.

Seed 003 (Task Execution Lifecycle). Shape:

* the Run informer's handler enqueues the key of every Run assigned to this Pod (and of
  every Run this Pod still holds local state for) into a :class:`~krt.kube.workqueue.WorkQueue`;
* :meth:`TaskLifecycle.reconcile` reads the *cached* Run, asks :func:`decide_task` and
  performs its action, calling ``Status`` only when the decision asks for it. It is the
  only writer of ``Run.status``; each write is a conditional update, ends the
  reconciliation, and the next one waits until the cache holds the written version (a
  stale read is never acted on);
* the start worker (one per Run UID at most, in the lifecycle's nursery) calls Execute,
  records the result locally and enqueues the Run; it never writes status. If the Run is no
  longer locally active when Execute succeeds, the worker cancels and forgets what it
  created;
* the Run Lifecycle Event Generator (RLEG) polls ``List`` while executions are observed and
  enqueues a Run when its execution changes state;
* the sweeper cancels and forgets executions the Runtime Server holds for Runs that are gone,
  terminal or not ours (after a runtimed restart included), and removes their directories.

Under a burst (issue 6) Runs are served first come, first served: at most
``start_window`` Runs are between their claim and their start
(:class:`~runtimed.start_window.StartWindow`), a claim's follow-up reconciliation runs at
once, the watch's echo of our own write enqueues nothing, and a reconciliation that learns
nothing new reuses the last Status answer (see :meth:`TaskLifecycle.reconcile`).

Restart safety: all local state is rebuilt from the Run objects (cache) and the Runtime
Server (Status/List); the decision never starts an execution the server still knows, nor an
attempt whose Execute was already sent (its durable marker, :mod:`runtimed.execute_markers`,
written by the start worker before Execute: a NOT_FOUND then is ``ExecutionLost``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

import trio

from krt.api import Failure, FailureReason, Reentry, Retry, Run, Terminal, decide
from krt.api.conditions import find_condition
from krt.api.constants import RunConditionType
from krt.api.errors import ApiError, OutputsError
from krt.api.patches import StatusPatch
from krt.api.phases import is_active, is_terminal
from krt.api.retry import Stale
from krt.api.run import TaskMode
from krt.kube.client import Obj
from krt.kube.clock import Clock
from krt.kube.errors import Conflict, NotFound
from krt.kube.events import EventSink, NullEventSink
from krt.kube.informer import EventType, InformerEvent
from krt.kube.resources import RUNS
from krt.kube.status import merged_status, write_status
from krt.kube.workqueue import Requeue, WorkQueue
from runtimed.execute_markers import ExecuteMarkerError, ExecuteMarkers
from runtimed.identity import PodIdentity
from runtimed.metrics import RuntimedMetrics
from runtimed.output_log import STREAMS, AttemptLog, LivePause, take_final, take_live
from runtimed.run_fields import assigned_pod_uid, queue_key, resource_version, run_uid
from runtimed.runtime_client import (
    ExecuteSpec,
    ExecutionStillRunning,
    RpcRejected,
    RuntimeServer,
    ServerUnavailable,
    listed_state,
)
from runtimed.sources import (
    ATTEMPT_ENV,
    OUTPUTS_ENV,
    RUN_NAME_ENV,
    RUN_NAMESPACE_ENV,
    RUN_UID_ENV,
    PreparationError,
    RunFiles,
    Workspace,
    prepare_source,
    read_outputs,
    remove_run_files,
)
from runtimed.spare_dirs import SpareDirs
from runtimed.start_window import StartWindow
from runtimed.task_decisions import (
    UNREACHABLE_RETRY_SECONDS,
    CancelExecution,
    Claim,
    End,
    ExecState,
    Fail,
    ForgetExecution,
    Ignore,
    LocalRun,
    LocalView,
    NeedStatus,
    Observe,
    Release,
    Resume,
    ServerView,
    StartExecution,
    StartState,
    Succeed,
    TaskAction,
    Wait,
    decide_release,
    decide_task,
)
from runtimed.trash import Trash

__all__ = [
    "KubeStatusWriter",
    "RunCache",
    "StatusWriter",
    "TaskLifecycle",
    "TaskTimings",
    "rleg_delay",
]

log = logging.getLogger(__name__)
task_log = logging.getLogger("runtimed.task")

#: A claim's answer: run the next reconciliation of the Run at once (see ``reconcile``).
_NEXT_NOW: Final = Requeue(0.0)
#: Upper bound on actions in one reconciliation (a safety net; real chains are 3-4 long).
MAX_STEPS: Final = 8
#: Quiet RLEG polls at the fastest pace before it starts slowing down.
RLEG_FAST_POLLS: Final = 5
#: After each List the RLEG stays quiet for at least this many times the List's duration,
#: so it polls at most ~1/(1 + factor) of the time: a List's duration grows with the load on
#: runtimed and the server, and under a burst every List costs both processes CPU the burst
#: needs (issue 6: at factor 1 a 50-Run burst made 1-3 Lists per Run).
RLEG_LOAD_FACTOR: Final = 3.0
#: Lines of one stream of task output logged per attempt (the rest is summarised).
MAX_LOGGED_LINES: Final = 10_000
#: UTF-8 bytes of an attempt's output (both streams, whole lines) logged while it runs;
#: when the next line does not fit the follower stops asking (each Status carries the whole
#: output) and the rest is logged when the execution finishes. It must stay well inside the
#: Runtime Server's kept head (256 KiB per stream), the only part of a running execution's
#: output that no later answer changes (:mod:`runtimed.output_log`).
FOLLOW_MAX_BYTES: Final = 64 * 1024
#: A task that prints nothing is read ever less often: the interval doubles up to this many
#: ``follow_period``\ s, and drops back to one period as soon as new output appears.
FOLLOW_MAX_DELAY_PERIODS: Final = 8


def rleg_delay(quiet: int, *, fastest: float, slowest: float) -> float:
    """Seconds until the next RLEG poll after ``quiet`` polls without a change.

    ``fastest`` for the first :data:`RLEG_FAST_POLLS` quiet polls, then doubling up to
    ``slowest``. The exponent is capped: a silent task polled for minutes makes ``quiet``
    large, and ``2 ** quiet`` past ~1000 no longer converts to a float.
    """
    doublings = min(max(0, quiet - RLEG_FAST_POLLS), 64)
    return float(min(slowest, fastest * 2.0**doublings))


class RunCache(Protocol):
    """Read access to the watch-backed Run cache (an :class:`~krt.kube.informer.Informer`)."""

    def get(self, namespace: str | None, name: str) -> Obj | None:
        """The cached Run, or ``None``."""
        ...

    def by_uid(self, uid: str) -> Obj | None:
        """The cached Run with this UID, or ``None``."""
        ...


class StatusWriter(Protocol):
    """The conditional status write (``krt.kube.status.write_status`` on Runs)."""

    async def write_status(self, obj: Obj, status: Mapping[str, Any]) -> Obj:
        """Replace ``obj``'s status, conditional on its resourceVersion.

        Raises:
            Conflict: ``obj`` is stale. NotFound: it is gone.
        """
        ...


@dataclass(frozen=True, slots=True)
class TaskTimings:
    """Deadlines and periods of the task lifecycle, seconds.

    Attributes:
        rpc: one Status/Cancel/Forget/List call.
        execute: one Execute call (the start worker).
        prepare: one source preparation (git checkout included).
        rleg_period: longest RLEG ``List`` period while executions are observed.
        rleg_min_period: shortest RLEG period (right after a start or a change); a trivial
            task (bash ``exit 0``: ~2 ms from Execute to its exit on an idle Pod) is seen
            finished by the first List or the next (issue 6: at 10 ms this wait was half
            of an idle Run's latency).
        sweep_period: period of the orphan sweep.
        forget_wait: how long a worker waits for an execution it must forget to stop.
        follow_period: how often the output of running executions is read and its new
            complete lines logged (``krt logs -f`` while a task runs).
        server_timeout_slack: added to the remaining ``spec.timeout`` as the server's own
            ``timeout_seconds`` (a backstop; runtimed enforces the timeout itself).
    """

    rpc: float = 5.0
    execute: float = 30.0
    prepare: float = 300.0
    rleg_period: float = 0.2
    rleg_min_period: float = 0.004
    sweep_period: float = 10.0
    forget_wait: float = 30.0
    follow_period: float = 1.0
    server_timeout_slack: float = 5.0


class TaskLifecycle:
    """Runs the task Runs assigned to one Runtime Pod (see the module docstring).

    Args:
        pod: this Pod.
        cache: the Run cache (the informer of the Pod's namespace).
        writer: conditional status writes.
        server: the local Runtime Server.
        workspace: the shared workspace.
        clock: wall clock (``startTime``, timeout and backoff decisions).
        metrics: where to count; a private registry when omitted.
        events: Event sink for start failures.
        timings: deadlines and periods.
        git: the git executable for repository sources.
        workers: parallel reconcile workers (different Runs; one Run is never reconciled
            twice at once).
        start_window: most Runs between their claim and their start's answer; further
            claims wait, oldest first (:class:`~runtimed.start_window.StartWindow`). Runs
            with a repository source do not count (their checkout is I/O, not CPU).
    """

    def __init__(
        self,
        *,
        pod: PodIdentity,
        cache: RunCache,
        writer: StatusWriter,
        server: RuntimeServer,
        workspace: Workspace,
        clock: Clock,
        metrics: RuntimedMetrics | None = None,
        events: EventSink | None = None,
        timings: TaskTimings | None = None,
        git: str = "git",
        workers: int = 32,
        start_window: int = 8,
    ) -> None:
        self.pod = pod
        self._cache = cache
        self._writer = writer
        self._server = server
        self.workspace = workspace
        self.spares = SpareDirs(workspace.spare_dir())
        self.trash = Trash(workspace.trash_dir(), spares=self.spares)
        self.markers = ExecuteMarkers.in_workspace(workspace.root)
        self._clock = clock
        self.metrics = metrics or RuntimedMetrics()
        self._events = events or NullEventSink()
        self.timings = timings or TaskTimings()
        self._git = git
        self._workers = workers
        self.queue: WorkQueue[str] = WorkQueue("runtimed-tasks", base_delay=0.1, max_delay=30.0)
        self.window = StartWindow(start_window, self.queue.add)
        self._local: dict[str, LocalRun] = {}
        #: Run UID -> (resourceVersions we wrote from, the object our last write returned).
        self._written: dict[str, tuple[set[str], Obj]] = {}
        #: Run UID -> (resourceVersion, the parsed Run) of its last reconciliation.
        self._parsed: dict[str, tuple[str, Run]] = {}
        #: Run UID -> its paths (built once per Run, not per step; dropped with its files).
        self._files: dict[str, RunFiles] = {}
        #: Run UID -> epoch seconds the informer first delivered it Scheduled to this Pod
        #: (moved to the Run's timeline when its local state is created).
        self._seen_at: dict[str, float] = {}
        self._rleg_wakeup = trio.Event()
        self._nursery: trio.Nursery | None = None
        self.metrics.track_local_runs(lambda: len(self._local))
        self._calls = {
            method: self.metrics.server_calls.labels(method=method)
            for method in ("Execute", "Status", "List", "Cancel", "Forget")
        }

    # -- wiring ------------------------------------------------------------------------------

    def local(self, uid: str) -> LocalRun | None:
        """The local state of Run ``uid`` (tests, diagnostics)."""
        return self._local.get(uid)

    def on_run_event(self, event: InformerEvent) -> None:
        """Informer handler: enqueue Runs assigned to this Pod or holding local state here.

        The watch echoing one of our own status writes (same resourceVersion as the object
        the write returned) enqueues nothing: the reconciliation that wrote it already
        scheduled what follows (issue 6: two reconciliations per Run fewer).
        """
        obj = event.obj
        uid = run_uid(obj)
        mine = self.pod.uid
        written = self._written.get(uid)
        if (
            event.type is EventType.MODIFIED
            and written is not None
            and resource_version(obj) == resource_version(written[1])
        ):
            del self._written[uid]  # the cache holds our write now
            return
        assigned_here = assigned_pod_uid(obj) == mine
        if event.type is EventType.DELETED:
            # (also a Run that left the assigned-Runs watch: reassigned; see run_informers)
            self._written.pop(uid, None)
            self._seen_at.pop(uid, None)
            self._parsed.pop(uid, None)
            self._files.pop(uid, None)
        elif (
            assigned_here
            and (obj.get("status") or {}).get("phase") == "Scheduled"
            and uid not in self._local
        ):
            self._seen_at.setdefault(uid, self._now())
        if assigned_here or assigned_pod_uid(event.old) == mine or uid in self._local:
            self.queue.add(queue_key(obj))
        elif event.type is EventType.DELETED and any(
            local.key == queue_key(obj) for local in self._local.values()
        ):
            self.queue.add(queue_key(obj))

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the reconcile workers, the RLEG and the sweeper; never returns unless cancelled.

        Call after the Run cache has synced; ``started()`` once the workers run and the
        first sweep is done.
        """
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                await nursery.start(self.trash.run)
                await trio.to_thread.run_sync(self.spares.fill)
                await self.markers.load()  # before any reconciliation reads them
                await nursery.start(self._run_queue)
                await self.sweep()
                nursery.start_soon(self._rleg_loop)
                nursery.start_soon(self._sweep_loop)
                nursery.start_soon(self._follow_loop)
                task_status.started()
        finally:
            self.markers.close()

    async def _run_queue(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        await self.queue.run(self.reconcile, workers=self._workers, task_status=task_status)

    def _now(self) -> float:
        """The wall clock as epoch seconds (timeline marks)."""
        return self._clock.now().timestamp()

    def _mark(self, uid: str, stage: str) -> None:
        local = self._local.get(uid)
        if local is not None:
            local.timeline.mark(stage, self._now())

    def _run_files(self, uid: str) -> RunFiles:
        """``workspace.files(uid)``, kept until the Run's files are removed.

        Raises:
            ValueError: ``uid`` is not usable as a directory name.
        """
        files = self._files.get(uid)
        if files is None:
            files = self._files[uid] = self.workspace.files(uid)
        return files

    def _terminal_fields(self, run: Run) -> dict[str, Any]:
        """Log fields of a Run's terminal line: its keys plus its stage timeline.

        Marks ``completed`` (the terminal write returned) and adds ``stages_ms`` (see
        :mod:`runtimed.timeline`) and ``seen_at`` (epoch seconds the informer delivered the
        Run here), so the timeline costs no log line of its own.
        """
        fields = self._fields(run)
        local = self._local.get(run.metadata.uid)
        if local is None:
            return fields
        local.timeline.mark("completed", self._now())
        fields["stages_ms"] = local.timeline.stages_ms()
        seen = local.timeline.marks.get("seen")
        if seen is not None:
            fields["seen_at"] = round(seen, 6)
        return fields

    # -- Runtime Server calls, bounded ------------------------------------------------------

    async def _status(self, uid: str) -> ServerView:
        self._calls["Status"].inc()
        with trio.move_on_after(self.timings.rpc):
            try:
                return await self._server.status(uid)
            except (ServerUnavailable, RpcRejected) as exc:
                log.info("Status %s: %s", uid, exc, extra={"run_uid": uid})
                return ServerView(ExecState.UNREACHABLE)
        return ServerView(ExecState.UNREACHABLE)

    def _forget_running_view(self, uid: str) -> None:
        local = self._local.get(uid)
        if local is not None:
            local.seen_running = None

    async def _cancel(self, uid: str) -> None:
        self._forget_running_view(uid)
        self._calls["Cancel"].inc()
        with trio.move_on_after(self.timings.rpc):
            try:
                await self._server.cancel(uid)
            except (ServerUnavailable, RpcRejected) as exc:
                log.info("Cancel %s: %s", uid, exc, extra={"run_uid": uid})

    async def _forget(self, uid: str) -> bool:
        """Forget ``uid``; True when the server no longer holds it."""
        self._forget_running_view(uid)
        self._calls["Forget"].inc()
        with trio.move_on_after(self.timings.rpc):
            try:
                await self._server.forget(uid)
                return True
            except ExecutionStillRunning:
                return False
            except (ServerUnavailable, RpcRejected) as exc:
                log.info("Forget %s: %s", uid, exc, extra={"run_uid": uid})
        return False

    # -- reconcile ----------------------------------------------------------------------------

    async def reconcile(self, key: str) -> Requeue | None:
        """Reconcile one Run key (``namespace/name``); the work queue calls this.

        A claim ends its reconciliation (seed 003: a *later* reconciliation calls Status);
        that next reconciliation runs at once in the same worker turn rather than behind
        every key queued meanwhile, so under a burst an early Run reaches its start early
        instead of every Run advancing one stage at a time (issue 6).

        Returns:
            ``Requeue(after)`` to be called again, or ``None`` to wait for an event.
        """
        try:
            result = await self._reconcile_once(key)
            if result is _NEXT_NOW:
                result = await self._reconcile_once(key)
        finally:
            self.window.settle(key)
        return Requeue(0.0) if result is _NEXT_NOW else result

    async def _reconcile_once(self, key: str) -> Requeue | None:
        namespace, _, name = key.partition("/")
        obj = self._current(self._cache.get(namespace, name))
        current_uid = run_uid(obj) if obj is not None else ""
        wake: list[float] = []
        owned = (
            obj is not None
            and assigned_pod_uid(obj) == self.pod.uid
            and not (obj.get("metadata") or {}).get("deletionTimestamp")
        )
        for local in [lr for lr in self._local.values() if lr.key == key]:
            if local.uid != current_uid or not owned:
                after = await self._release(local)
                if after is not None:
                    wake.append(after)
        if obj is None or not owned:
            self._parsed.pop(current_uid, None)
            return Requeue(min(wake)) if wake else None
        try:
            run = self._parse(obj)
        except ApiError as exc:
            log.warning("Run %s cannot be read: %s", key, exc)
            return None
        if is_terminal(run.status.phase):
            if current_uid not in self._local:
                self._parsed.pop(current_uid, None)  # nothing more to do for this Run here
            else:
                after = await self._release(self._local[current_uid])
                return Requeue(after) if after is not None else None
        return await self._drive(obj, run)

    def _parse(self, obj: Obj) -> Run:
        """``Run.from_dict(obj)``, reusing the last parse of the same UID and resourceVersion.

        A Run is reconciled several times per version (worker results, RLEG changes), and
        the parsed :class:`Run` is immutable. One entry per Run with local state or pending
        parse; dropped with the Run.

        Raises:
            ApiError: the object is not a valid Run.
        """
        uid, version = run_uid(obj), resource_version(obj)
        cached = self._parsed.get(uid)
        if cached is not None and cached[0] == version and version:
            return cached[1]
        run = Run.from_dict(obj)
        self._parsed[uid] = (version, run)
        return run

    def _current(self, cached: Obj | None) -> Obj | None:
        """The cached Run, or the object our own last write returned when the cache lags it.

        Every status write ends a reconciliation; the next one must not act on the version
        the write replaced (it would claim twice, or restart a finished Run). Until the watch
        delivers our write, the object the API server returned for it stands in for the
        cache: it is exactly what the cache will hold, so the next reconciliation need not
        wait for the watch. Once the cache shows any other version (ours, or a newer one
        from another writer), the cache is used again.
        """
        if cached is None:
            return None
        written = self._written.get(run_uid(cached))
        if written is None:
            return cached
        stale, latest = written
        if resource_version(cached) in stale:
            return latest
        del self._written[run_uid(cached)]
        return cached

    async def _drive(self, obj: Obj, run: Run) -> Requeue | None:
        uid = run.metadata.uid
        server: ServerView | None = None
        for _ in range(MAX_STEPS):
            local = self._local.get(uid)
            action = decide_task(
                run,
                pod_uid=self.pod.uid,
                local=local.view if local is not None else None,
                server=server,
                now=self._clock.now(),
                execute_sent=self.markers.attempt(uid),
            )
            if isinstance(action, NeedStatus):
                server = self._still_running(uid, obj) or await self._observe(run)
                continue
            if isinstance(action, ForgetExecution):
                await self._forget(uid)
                server = None
                continue
            return await self._perform(obj, run, action, server)
        log.warning("Run %s: no stable decision after %d steps", run.key, MAX_STEPS)
        return Requeue(1.0)

    def _still_running(self, uid: str, obj: Obj) -> ServerView | None:
        """The last PENDING/RUNNING answer for this version of the Run, if nothing since.

        A Run is reconciled again without news about its execution (the watch delivering
        our own write, a duplicate wake-up, the start worker's report); the RLEG reports
        every change of an observed execution that reconciliation acts on, so until it
        does (or runtimed cancels, forgets or starts one), the last answer stands and no
        Status call is needed. An accepted Execute counts as a PENDING answer (the server
        has just created the execution): the reconciliation the start worker enqueues
        records it as observed without asking Status again (issue 6: 2 Status calls per
        Run, the one before Execute and the one that reads the finished execution).
        """
        local = self._local.get(uid)
        if local is None or local.seen_running is None:
            return None
        if not (local.view.observed or local.view.start is StartState.SUCCEEDED):
            return None
        version, view = local.seen_running
        return view if version == resource_version(obj) else None

    def _local_for(self, run: Run) -> LocalRun:
        uid = run.metadata.uid
        local = self._local.get(uid)
        attempt = max(1, run.status.attempt)
        if local is None:
            local = self._local[uid] = LocalRun(
                uid=uid, key=run.key, view=LocalView(attempt=attempt)
            )
            seen = self._seen_at.pop(uid, None)
            if seen is not None:
                local.timeline.mark("seen", seen)
        else:
            local.view = local.view.for_attempt(attempt)
        return local

    async def _observe(self, run: Run) -> ServerView:
        """Status of the Run's execution; on success also its outputs; logs finished output."""
        server = await self._status(run.metadata.uid)
        if server.state.finished and run.status.retry_after is None:
            # (in backoff the server holds the previous attempt's execution, logged already)
            self._mark(run.metadata.uid, "finished")
            self._log_output(run, server)
        if server.state is ExecState.SUCCEEDED:
            files = self._run_files(run.metadata.uid)
            try:
                outputs = await read_outputs(files)
            except OutputsError as exc:
                return ServerView(
                    server.state,
                    exit_code=server.exit_code,
                    stderr=server.stderr,
                    outputs_error=str(exc),
                )
            return ServerView(
                server.state, exit_code=server.exit_code, stderr=server.stderr, outputs=outputs
            )
        return server

    async def _perform(
        self, obj: Obj, run: Run, action: TaskAction, server: ServerView | None
    ) -> Requeue | None:
        uid = run.metadata.uid
        if isinstance(action, Ignore):
            return None
        if isinstance(action, Wait):
            return Requeue(action.after) if action.after is not None else None
        if isinstance(action, Claim):
            if not self._checks_out(run) and not self.window.try_enter(run.key, uid):
                return None  # parked: woken when a place in the start window frees
            return await self._claim(obj, run, action.patch)
        if isinstance(action, StartExecution):
            return await self._start(obj, run, prepare=action.prepare)
        if isinstance(action, Observe):
            local = self._local_for(run)
            local.update(observed=True, start=StartState.NONE)
            local.last_server_state = server.state if server is not None else None
            if server is not None and server.state.active:
                local.seen_running = (resource_version(obj), server)
            self._wake_rleg()
            return Requeue(action.after) if action.after is not None else None
        if isinstance(action, CancelExecution):
            await self._cancel(uid)
            return Requeue(action.after)
        if isinstance(action, Succeed):
            if await self._write(obj, action.patch) is None:
                return None
            self.metrics.task_runs.labels(outcome="Succeeded").inc()
            task_log.info("task succeeded", extra=self._terminal_fields(run))
            await self._forget(uid)
            await self._drop(uid)
            return None
        if isinstance(action, Fail):
            return await self._apply_failure(obj, run, action.decision, forget=action.forget)
        if isinstance(action, End):
            if await self._write(obj, action.patch) is None:
                return None
            outcome = str(action.patch.get("phase"))
            self.metrics.task_runs.labels(outcome=outcome).inc()
            task_log.info("task ended %s", outcome, extra=self._terminal_fields(run))
            await self._drop(uid)
            return None
        if isinstance(action, Resume):
            local = self._local_for(run)
            local.view = LocalView(attempt=max(1, run.status.attempt))
            local.last_server_state = None
            local.seen_running = None
            local.timeline.restart_attempt()
            if await self._write(obj, action.patch) is None:
                return None
            return Requeue(0.0)
        if isinstance(action, Release):  # pragma: no cover - decide_task never returns it
            await self._drop(uid)
            return None
        raise AssertionError(f"unhandled action {action!r}")  # pragma: no cover

    # -- steps ----------------------------------------------------------------------------

    async def _write(self, obj: Obj, patch: StatusPatch) -> Obj | None:
        """Conditional status write; ``None`` when the cache was stale or the Run is gone."""
        status = merged_status(obj.get("status"), patch)
        try:
            written = await self._writer.write_status(obj, status)
        except Conflict:
            log.debug("Run %s changed since read; waiting for the cache", queue_key(obj))
            return None
        except NotFound:
            return None
        uid = run_uid(obj)
        stale = self._written[uid][0] if uid in self._written else set()
        stale.add(resource_version(obj))
        self._written[uid] = (stale, written)
        return written

    @staticmethod
    def _checks_out(run: Run) -> bool:
        source = run.spec.source
        return source is not None and source.repo_url is not None

    async def _claim(self, obj: Obj, run: Run, patch: StatusPatch) -> Requeue | None:
        written: Obj | None = None
        try:
            written = await self._write(obj, patch)
        finally:
            if written is None:  # not claimed (stale, gone, or an error): give the place back
                self.window.leave(run.metadata.uid)
        if written is None:
            return None
        claimed = self._parse(written)
        self._local_for(claimed)
        self._mark(claimed.metadata.uid, "claimed")
        bound = find_condition(run.status.conditions, RunConditionType.SCHEDULED)
        if bound is not None:
            lag = (self._clock.now() - bound.last_transition_time).total_seconds()
            self.metrics.claim_lag_seconds.observe(max(0.0, lag))
        # progress lines are DEBUG: the terminal line carries every stage's time, and each
        # INFO line costs a log write here and at the node (issue 6: 3 lines per Run -> 1)
        task_log.debug("claimed", extra=self._fields(claimed))
        outcome = await self._prepare_or_fail(written, claimed)
        # the next reconciliation (on the written object, see _current) calls Status
        return _NEXT_NOW if outcome is None else outcome

    async def _prepare_or_fail(self, obj: Obj, run: Run) -> Requeue | None:
        """Prepare the source; a failure is applied now (``PreparationFailed``)."""
        local = self._local_for(run)
        files = self._run_files(run.metadata.uid)
        started = trio.current_time()
        try:
            with trio.fail_after(self.timings.prepare):
                await prepare_source(run.spec.source, files, git=self._git, spares=self.spares)
        except (PreparationError, trio.TooSlowError) as exc:
            message = str(exc) or f"source preparation took longer than {self.timings.prepare:g}s"
            task_log.warning("source preparation failed: %s", message, extra=self._fields(run))
            decision = decide(
                run,
                Failure(
                    FailureReason.PREPARATION_FAILED, message, attempt=max(1, run.status.attempt)
                ),
                now=self._clock.now(),
                reentry=Reentry.IN_PLACE,
            )
            self.window.leave(run.metadata.uid)
            if isinstance(decision, Stale):
                return None
            return await self._apply_failure(obj, run, decision, forget=False)
        self.metrics.preparation_seconds.observe(trio.current_time() - started)
        local.update(prepared=True)
        local.timeline.mark("prepared", self._now())
        return None

    async def _start(self, obj: Obj, run: Run, *, prepare: bool) -> Requeue | None:
        local = self._local_for(run)
        if prepare:
            outcome = await self._prepare_or_fail(obj, run)
            if not local.view.prepared:
                return outcome
        assert self._nursery is not None, "TaskLifecycle.run() is not running"
        local.update(start=StartState.IN_FLIGHT, start_error="", start_rejected="")
        local.timeline.mark("start", self._now())
        spec = self._execute_spec(run)
        self._nursery.start_soon(self._start_worker, local, spec, local.view.attempt, obj)
        return None

    def _execute_spec(self, run: Run) -> ExecuteSpec:
        files = self._run_files(run.metadata.uid)
        mode = run.spec.mode
        assert isinstance(mode, TaskMode)
        entrypoint = mode.entrypoint or ""
        source = run.spec.source
        if not entrypoint and source is not None and source.inline is not None:
            entrypoint = source.effective_inline_path
        env = {e.name: e.value for e in run.spec.env}
        env[OUTPUTS_ENV] = self.workspace.for_server(files.outputs)
        env[RUN_NAME_ENV] = run.metadata.name
        env[RUN_NAMESPACE_ENV] = run.metadata.namespace
        env[RUN_UID_ENV] = run.metadata.uid
        env[ATTEMPT_ENV] = str(max(1, run.status.attempt))
        timeout = 0
        seconds = run.spec.timeout_seconds
        if seconds is not None:
            timeout = math.ceil(seconds + self.timings.server_timeout_slack)
        return ExecuteSpec(
            id=run.metadata.uid,
            working_dir=self.workspace.for_server(files.work),
            entrypoint=entrypoint,
            args=mode.args,
            env=env,
            timeout_seconds=timeout,
        )

    async def _start_worker(
        self, local: LocalRun, spec: ExecuteSpec, attempt: int, obj: Obj
    ) -> None:
        """Execute asynchronously; record the result locally and enqueue (never writes status)."""
        fields = {"run_uid": spec.id, "attempt": attempt, "run": local.key}
        error = rejected = ""
        try:
            # durable before Execute is sent (see runtimed.execute_markers)
            self.markers.record(spec.id, attempt)
            self._calls["Execute"].inc()
            with trio.fail_after(self.timings.execute):
                await self._server.execute(spec)
        except ExecuteMarkerError as exc:
            error = f"Execute not sent: {exc}"
        except (RpcRejected, ServerUnavailable) as exc:
            error = f"Execute failed: {exc}"
            if isinstance(exc, RpcRejected) and exc.code == "INVALID_ARGUMENT":
                rejected = exc.detail or "(no message)"
        except trio.TooSlowError:
            error = f"Execute did not answer within {self.timings.execute:g}s"
        finally:
            self.window.leave(spec.id)
            local.seen_running = None
        if not local.active or self._local.get(local.uid) is not local:
            if not error:
                log.info("Run no longer active: forgetting its new execution", extra=fields)
                await self._forget_created(spec.id)
            return
        if error:
            local.update(start=StartState.FAILED, start_error=error, start_rejected=rejected)
            self.metrics.start_failures.inc()
            task_log.warning("execution start failed: %s", error, extra=fields)
            self._events.emit(obj, type_="Warning", reason="StartFailed", message=error)
        else:
            local.update(start=StartState.SUCCEEDED)
            # the server reported the execution by accepting it: it exists (seed 003 step
            # 5); the RLEG watches it from now on and reports when it ends (see
            # _still_running), so the reconciliation enqueued here asks no Status
            local.last_server_state = ExecState.PENDING
            local.seen_running = (resource_version(obj), ServerView(ExecState.PENDING))
            local.timeline.mark("executed", self._now())
            self.metrics.executions_started.inc()
            task_log.debug("execution started", extra=fields)
            self._wake_rleg()
        self.queue.add(local.key)

    async def _forget_created(self, uid: str) -> None:
        """Cancel an execution nobody wants, wait for it to stop, forget it."""
        with trio.move_on_after(self.timings.forget_wait):
            while True:
                server = await self._status(uid)
                if server.state is ExecState.NOT_FOUND:
                    return
                if server.state.active:
                    await self._cancel(uid)
                elif server.state.finished and await self._forget(uid):
                    return
                await trio.sleep(0.1)

    async def _apply_failure(
        self, obj: Obj, run: Run, decision: Retry | Terminal, *, forget: bool
    ) -> Requeue | None:
        """Persist the retry decision first; then forget the finished execution (seed 003)."""
        if await self._write(obj, decision.patch) is None:
            return None
        uid = run.metadata.uid
        fields = self._fields(run)
        if isinstance(decision, Retry):
            self.metrics.task_runs.labels(outcome="Retry").inc()
            task_log.info(
                "attempt failed (%s); attempt %d after %.3gs",
                decision.patch.get("reason"),
                decision.attempt,
                decision.delay_seconds,
                extra=fields,
            )
            if forget:
                await self._forget(uid)
            local = self._local.get(uid)
            if local is not None:
                local.last_server_state = None
                local.seen_running = None
            return Requeue(max(0.0, decision.delay_seconds))
        self.metrics.task_runs.labels(outcome="Failed").inc()
        task_log.info(
            "task failed: %s", decision.patch.get("message"), extra=self._terminal_fields(run)
        )
        if forget:
            await self._forget(uid)
        await self._drop(uid)
        return None

    async def _drop(self, uid: str) -> None:
        """Forget local state and the Run's files (the server holds nothing for it)."""
        self._seen_at.pop(uid, None)
        self._parsed.pop(uid, None)
        self.window.leave(uid)
        local = self._local.pop(uid, None)
        if local is not None:
            local.active = False
        self.markers.clear(uid)
        await self._remove_files(uid)

    async def _remove_files(self, uid: str) -> None:
        """Move the Run's directory to the trash (emptied when quiet), else remove it now."""
        files = self._files.pop(uid, None) or self.workspace.files(uid)
        if not self.trash.discard(files.root):
            await remove_run_files(files)

    async def _release(self, local: LocalRun) -> float | None:
        """Let go of a Run that is gone, terminal or not ours; seconds to look again or None."""
        server: ServerView | None = None
        for _ in range(MAX_STEPS):
            action = decide_release(
                start_in_flight=local.view.start is StartState.IN_FLIGHT, server=server
            )
            if isinstance(action, NeedStatus):
                server = await self._status(local.uid)
            elif isinstance(action, CancelExecution):
                await self._cancel(local.uid)
                return action.after
            elif isinstance(action, ForgetExecution):
                await self._forget(local.uid)
                server = None
            elif isinstance(action, Wait):
                return action.after if action.after is not None else UNREACHABLE_RETRY_SECONDS
            else:
                log.info("released Run", extra={"run_uid": local.uid, "run": local.key})
                await self._drop(local.uid)
                return None
        return UNREACHABLE_RETRY_SECONDS

    # -- RLEG and sweep ------------------------------------------------------------------------

    def _wake_rleg(self) -> None:
        self._rleg_wakeup.set()

    async def _rleg_loop(self) -> None:
        """Poll List while executions are observed; enqueue Runs whose execution changed.

        The pace adapts: after an observation or a change it polls every
        ``rleg_min_period`` seconds for :data:`RLEG_FAST_POLLS` polls (a short task's end is
        seen within milliseconds), then each quiet poll doubles the period up to
        ``rleg_period`` (long tasks cost little). A wake-up (an execution seen PENDING or
        RUNNING) ends the quiet wait at once but never the *floor*: two polls are at least
        ``rleg_min_period`` apart, and after each List the RLEG stays quiet for
        :data:`RLEG_LOAD_FACTOR` times the List's duration (up to ``rleg_period``), so a
        burst of observations does not turn into a List per observation and a loaded server
        or runtimed is polled at most about a quarter of the time (issue 6: under a burst,
        List calls competed with the claims and status writes for the same two cores). The
        cap keeps one slow answer from delaying the next poll past the slowest pace.

        The first poll after an idle spell (nothing observed, then an execution accepted)
        waits ``rleg_min_period``: polled at once, the new execution is always still
        running (the server is still starting its process, which also makes that List
        slow and its load floor long), so a short task cost two Lists and its end was seen
        only after the floor (issue 6: 12-45 ms from Execute to the end of ``exit 0`` on a
        loaded machine, and two Lists; now ``rleg_min_period`` and one List). That first
        List is also exempt from the load floor: a Runtime Server's loop stands still while
        it starts a process (``Popen`` returns once the child has exec'd and the server has
        a CPU again: 2-8 ms on a busy 2-core machine), so a List sent then answers slowly
        without the server being loaded, and its 3x floor kept a trivial task's end unseen
        for another 15-25 ms.
        """
        fastest, slowest = self.timings.rleg_min_period, self.timings.rleg_period
        quiet = 0
        first_of_spell = False
        while True:
            self._rleg_wakeup = trio.Event()
            watched = [
                local
                for local in self._local.values()
                if local.active
                and (local.view.observed or local.view.start is StartState.SUCCEEDED)
            ]
            if not watched:
                await self._rleg_wakeup.wait()
                quiet = 0
                first_of_spell = True
                await trio.sleep(fastest)
                continue
            entries: Mapping[str, ServerView] | None = None
            began = trio.current_time()
            with trio.move_on_after(self.timings.rpc):
                try:
                    self.metrics.rleg_polls.inc()
                    self._calls["List"].inc()
                    entries = await self._server.list()
                except (ServerUnavailable, RpcRejected) as exc:
                    log.info("RLEG List failed: %s", exc)
            if entries is None:
                await trio.sleep(UNREACHABLE_RETRY_SECONDS)
                continue
            done = trio.current_time()
            floor = min(max(fastest, slowest), max(fastest, RLEG_LOAD_FACTOR * (done - began)))
            if first_of_spell:  # slow because it waited for the new process's start
                floor, first_of_spell = fastest, False
            quiet += 1
            for local in watched:
                state = listed_state(entries, local.uid)
                if state is local.last_server_state:
                    continue
                previous, local.last_server_state = local.last_server_state, state
                quiet = 0
                if state.active and previous is not None and previous.active:
                    # PENDING <-> RUNNING: reconciliation observes either the same way
                    view = entries.get(local.uid)
                    if view is not None and local.seen_running is not None:
                        local.seen_running = (local.seen_running[0], view)
                    continue
                local.seen_running = None
                if state.finished:
                    local.timeline.mark("finished", self._now())
                self.queue.add(local.key)
            delay = max(floor, rleg_delay(quiet, fastest=fastest, slowest=slowest))
            with trio.move_on_after(delay):
                await self._rleg_wakeup.wait()
            if self._rleg_wakeup.is_set():
                quiet = 0
                await trio.sleep_until(done + floor)

    def _is_live_here(self, uid: str) -> bool:
        local = self._local.get(uid)
        if local is not None and local.active:
            return True
        obj = self._cache.by_uid(uid)
        if obj is None or assigned_pod_uid(obj) != self.pod.uid:
            return False
        if (obj.get("metadata") or {}).get("deletionTimestamp"):
            return False
        try:
            phase = Run.from_dict(obj).status.phase
        except ApiError:
            return False
        if is_active(phase):
            self.queue.add(queue_key(obj))  # restart: let its reconcile rebuild the local view
            return True
        return False

    async def sweep(self) -> None:
        """Cancel/Forget executions of Runs that are gone, terminal or not ours; remove stray dirs."""
        entries: Mapping[str, ServerView] | None = None
        with trio.move_on_after(self.timings.rpc):
            try:
                self._calls["List"].inc()
                entries = await self._server.list()
            except (ServerUnavailable, RpcRejected) as exc:
                log.info("sweep: List failed: %s", exc)
        for uid, view in (entries or {}).items():
            if self._is_live_here(uid):
                continue
            if view.state.active:
                log.info("sweep: cancelling orphaned execution", extra={"run_uid": uid})
                await self._cancel(uid)
            elif view.state.finished:
                log.info("sweep: forgetting orphaned execution", extra={"run_uid": uid})
                await self._forget(uid)
        self.markers.prune(self._is_live_here)  # Runs deleted or moved while runtimed was down
        if entries is None:
            return
        runs_dir = self.workspace.runs_dir()

        def stray() -> list[str]:
            try:
                return [p.name for p in runs_dir.iterdir() if p.is_dir()]
            except OSError:
                return []

        for name in await trio.to_thread.run_sync(stray):
            if name not in entries and not self._is_live_here(name):
                await self._remove_files(name)

    async def _sweep_loop(self) -> None:
        while True:
            await trio.sleep(self.timings.sweep_period)
            await self.sweep()

    # -- logs ---------------------------------------------------------------------------------

    def _fields(self, run: Run) -> dict[str, Any]:
        return {"run_uid": run.metadata.uid, "attempt": max(1, run.status.attempt), "run": run.key}

    def _log_output(self, run: Run, server: ServerView) -> None:
        """Log the finished attempt's stdout/stderr not yet logged (once per attempt).

        The rest past what the follower logged while the task ran, from the finished
        execution's text (its dropped-bytes marker carries the final count), at most
        :data:`MAX_LOGGED_LINES` per stream and attempt, then ``N more lines not logged``
        (docs/usage.md "Logs", :func:`runtimed.output_log.take_final`). Each line's record
        carries ``offset``, its position in the attempt's stream (:mod:`runtimed.output_log`),
        so a line logged again by a restarted runtimed shows once in ``krt logs``.
        """
        attempt = max(1, run.status.attempt)
        local = self._local.get(run.metadata.uid)
        if local is not None:
            if local.logged_attempt == attempt:
                return
            local.logged_attempt = attempt
        record = local.output_log_of(attempt) if local is not None else AttemptLog(attempt)
        fields = self._fields(run)
        for stream, text in zip(STREAMS, (server.stdout, server.stderr), strict=True):
            taken = take_final(record, stream, text, max_lines=MAX_LOGGED_LINES)
            extra = {**fields, "stream": stream}
            if taken.restarted:
                task_log.info(
                    "the Runtime Server's %s no longer starts with the lines logged while the"
                    " task ran; all of its kept %s follows",
                    stream,
                    stream,
                    extra={**fields, "stream": "stderr"},
                )
            if taken.restarted:  # positions in another text: no offsets (each line shows)
                for line in taken.lines:
                    task_log.info(line, extra=extra)
            else:  # the offset lets krt logs show a line re-logged after a restart once
                for offset, line in zip(taken.offsets, taken.lines, strict=True):
                    task_log.info(line, extra={**extra, "offset": offset})
            if taken.not_logged:
                task_log.info("%d more lines not logged", taken.not_logged, extra=extra)

    def _log_live(self, local: LocalRun, attempt: int, server: ServerView) -> bool:
        """Log the new complete lines of a running attempt within the live bounds.

        At most :data:`FOLLOW_MAX_BYTES` of the attempt's output (both streams) is logged
        live, whole lines only; when the next line does not fit, one stderr line says live
        output paused (docs/usage.md "Logs", :func:`runtimed.output_log.take_live`). Each
        line's record carries ``offset`` (see :meth:`_log_output`).

        Returns:
            Whether any line was logged.
        """
        record = local.output_log_of(attempt)
        fields = {"run_uid": local.uid, "attempt": attempt, "run": local.key}
        logged = False
        for stream, text in zip(STREAMS, (server.stdout, server.stderr), strict=True):
            lines = take_live(
                record, stream, text, budget=FOLLOW_MAX_BYTES, max_lines=MAX_LOGGED_LINES
            )
            for offset, line in lines:
                task_log.info(line, extra={**fields, "stream": stream, "offset": offset})
            logged = logged or bool(lines)
        if record.paused is LivePause.BUDGET:
            # say so in the stream a follower reads, or `krt logs -f` looks stuck
            task_log.info(
                "live output paused after %d KiB; the rest is logged when the task ends",
                FOLLOW_MAX_BYTES // 1024,
                extra={**fields, "stream": "stderr"},
            )
        return logged

    async def _follow_loop(self) -> None:
        """Log new complete output lines of running executions every ``follow_period`` s.

        Only executions the RLEG last saw RUNNING and whose live logging has not paused
        (:meth:`_log_live`); each is read again after its own interval, which doubles while
        nothing new appears (up to :data:`FOLLOW_MAX_DELAY_PERIODS` periods). A result is
        dropped when the attempt changed or its final output was logged meanwhile
        (:meth:`_log_output` then owns the rest).
        """
        period = self.timings.follow_period
        while True:
            await trio.sleep(period)
            for local in list(self._local.values()):
                attempt = local.view.attempt
                if (
                    not local.active
                    or local.last_server_state is not ExecState.RUNNING
                    or local.logged_attempt == attempt
                    or trio.current_time() < local.follow_at
                    or local.output_log_of(attempt).paused is not LivePause.NO
                ):
                    continue
                server = await self._status(local.uid)
                local.follow_delay = min(
                    FOLLOW_MAX_DELAY_PERIODS * period, max(period, 2 * local.follow_delay)
                )
                local.follow_at = trio.current_time() + local.follow_delay - period / 2
                if (
                    not server.state.active
                    or not local.active
                    or local.view.attempt != attempt
                    or local.logged_attempt == attempt
                ):
                    continue
                if self._log_live(local, attempt, server):
                    local.follow_delay = period  # it prints: keep reading at the fast pace
                    local.follow_at = 0.0


#: Run status writes in flight at once per runtimed (see :class:`KubeStatusWriter`).
STATUS_WRITES_IN_FLIGHT = 2


class KubeStatusWriter:
    """:class:`StatusWriter` over the API: ``write_status`` on the Runs resource.

    At most ``concurrency`` writes are in flight; the others wait their turn, first come
    first served (trio's limiter wakes waiters in order). Under a burst (issue 6) the writes
    are then answered in order, so the first Runs claimed go on to execute and complete
    while later claims wait, instead of every claim being answered together near the
    burst's end (with 12 in flight: complete p50 ~15% higher in ``bench/task_runs.py``, and
    ~11 new TLS connections to the API server per runtimed per burst; with 2: none).

    Args:
        kube: the client.
        concurrency: parallel writes (>= 1).

    Raises:
        ValueError: ``concurrency`` < 1.
    """

    def __init__(self, kube: Any, *, concurrency: int = STATUS_WRITES_IN_FLIGHT) -> None:
        if concurrency < 1:
            raise ValueError(f"status write concurrency must be at least 1, got {concurrency}")
        self._kube = kube
        self._limiter = trio.CapacityLimiter(concurrency)

    async def write_status(self, obj: Obj, status: Mapping[str, Any]) -> Obj:
        """PUT ``status`` conditional on ``obj``'s resourceVersion.

        Raises:
            Conflict, NotFound, KubeError: see :func:`krt.kube.status.write_status`.
        """
        async with self._limiter:
            return await write_status(self._kube, RUNS, obj, status)
