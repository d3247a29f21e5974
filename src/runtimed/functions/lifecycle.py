"""The function-Run lifecycle of runtimed: the trio adapter around :mod:`.decisions`.

Seeds 000 (Lifecycle State Machine, Ownership Epoch and Fencing, Cleanup and Finalization,
Capacity) and 002 (Registration Identity, Registration and Status Semantics,
Unregistration); issue 7. Shape, mirroring the task lifecycle:

* the Run informer's handler (:meth:`FunctionLifecycle.on_run_event`) enqueues the key of
  every function Run assigned to this Pod (or holding local state here) into a
  :class:`~krt.kube.workqueue.WorkQueue`; :meth:`FunctionLifecycle.run` runs its workers
  and the pollers' nursery;
* :meth:`FunctionLifecycle.reconcile` reads the *cached* Run, asks
  :func:`~runtimed.functions.decisions.decide_function` and performs the action, repeatedly,
  until an action writes (a status write or a finalizer patch ends the reconciliation; the
  next one acts on the object that write returned until the cache catches up) or waits.
  It is the only writer of ``Run.status`` and of the finalizer; every write is conditional;
* registration (source preparation + RegisterFunction, bounded by ``fail_after``) runs in
  the reconcile; on success the registry (:mod:`.registry`) holds the opaque registration
  ID, never status;
* one idle poller per Ready registration (:mod:`.idle`) in its own cancel scope inside the
  lifecycle's nursery; it only records its verdict and enqueues;
* cleanup (cancel, delete, lifetime, idle; seed 000 "Cleanup and Finalization"): mark the
  registry entry TERMINATING first (no new invokes), stop the poller, UnregisterFunction
  (drain in-flight work within ``timings.drain`` seconds -- a ``move_on_after`` scope --
  then cancel it; Cancel and LifetimeExceeded cancel at once), remove the Run's files,
  drop the registry entry (the capacity unit is released with the terminal phase or the
  finalizer), then write Cancelled/Timeout or remove the finalizer.

Restart safety: everything local is rebuilt from the Run objects. A Ready Run without a
local registration is re-adopted by RegisterFunction with the same attempt and digest (the
server answers with the same registration ID; no status write) -- but only after a
FunctionStatus probe showed the server still holds a registration for the Run UID; if it
holds none (runtimed and the Runtime Server restarted together), the loss is a
``RegistrationLost`` failure through the retry engine, as when the server alone restarts. A cleanup that finds no
local ID learns it the same way before unregistering. A crash between unregister and the
status write repeats cleanup, which is idempotent.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any, Final

import trio

from krt.api import Failure, FailureReason, Retry, Run
from krt.api.errors import ApiError
from krt.api.patches import StatusPatch
from krt.api.run import FunctionMode, Source
from krt.kube.client import Obj
from krt.kube.clock import Clock
from krt.kube.errors import Conflict, NotFound
from krt.kube.events import EventSink, NullEventSink
from krt.kube.informer import EventType, InformerEvent
from krt.kube.status import merged_status
from krt.kube.workqueue import Requeue, WorkQueue
from runtimed.functions.client import FunctionRpcError, FunctionServer, RegisterSpec, RegState
from runtimed.functions.decisions import (
    AddFinalizer,
    Claim,
    Cleanup,
    CleanupKind,
    Confirm,
    Fail,
    FunctionAction,
    Ignore,
    LocalView,
    MarkReady,
    MarkUnavailable,
    Register,
    Release,
    RemoveFinalizer,
    ResumeRetry,
    Serve,
    Wait,
    decide_function,
    failure_from_register_error,
    is_function_run,
)
from runtimed.functions.digest import registration_digest
from runtimed.functions.files import RunFileOps, WorkspaceFiles
from runtimed.functions.finalizers import FinalizerWriter
from runtimed.functions.idle import PollResult, Verdict, judge, poll_registration
from runtimed.functions.metrics import FunctionMetrics
from runtimed.functions.registry import EntryState, FunctionRegistry
from runtimed.functions.settings import FunctionSettings
from runtimed.identity import PodIdentity
from runtimed.readiness import HealthState
from runtimed.run_fields import assigned_pod_uid, queue_key, resource_version, run_uid
from runtimed.server_channel import ServerUnavailable
from runtimed.sources import PreparationError, Workspace
from runtimed.tasks import RunCache, StatusWriter

__all__ = ["FunctionLifecycle", "FunctionStats"]

log = logging.getLogger(__name__)
function_log = logging.getLogger("runtimed.function")

#: Upper bound on actions in one reconciliation (real chains: finalizer, register, ready).
MAX_STEPS: Final = 8
#: Registration attempt cleanup uses to supersede a registration whose ID it cannot learn
#: (the largest int32: higher than any attempt the retry engine gives out).
FENCE_ATTEMPT: Final = 2**31 - 1
#: The registration ID FunctionStatus is asked about before a re-adoption: syntactically
#: valid (seed 002 ID rules) but never one a server hands out, so a server that holds a
#: registration for the Run UID answers FAILED_PRECONDITION and one that holds none NOT_FOUND.
ADOPTION_PROBE_ID: Final = "krt-adoption-probe"
#: ``runtimed_function_runs_ended_total`` outcome of each cleanup kind.
_ENDED: Final = {
    CleanupKind.CANCEL: "Cancelled",
    CleanupKind.DELETE: "Deleted",
    CleanupKind.IDLE: "IdleTimeout",
    CleanupKind.LIFETIME: "LifetimeExceeded",
}


class _Unreachable(Exception):
    """The Runtime Server did not answer; look again later."""


@dataclass
class _Local:
    """Local state of one function Run (see :class:`~.decisions.LocalView`)."""

    uid: str
    key: str
    attempt: int | None = None
    registration_id: str | None = None
    failure: Failure | None = None
    idle_expired: bool = False
    cleaned: bool = False
    unconfirmed: bool = False
    poller: trio.CancelScope | None = None

    def view(self) -> LocalView:
        return LocalView(
            attempt=self.attempt,
            registered=self.registration_id is not None,
            failure=self.failure,
            idle_expired=self.idle_expired,
            cleaned=self.cleaned,
            unconfirmed=self.unconfirmed,
        )

    def stop_poller(self) -> None:
        if self.poller is not None:
            self.poller.cancel()
            self.poller = None


@dataclass
class FunctionStats:
    """Counters for tests, metrics and the bench.

    Attributes:
        registrations: successful RegisterFunction calls (re-adoptions included).
        adoptions: re-adoptions of Ready Runs (no status write).
        registration_failures: failures applied through the retry engine.
        cleanups: completed cleanup sequences.
        status_writes: status writes made (a Ready Run makes none while it serves).
    """

    registrations: int = 0
    adoptions: int = 0
    registration_failures: int = 0
    cleanups: int = 0
    status_writes: int = 0


class FunctionLifecycle:
    """Runs the function Runs assigned to one Runtime Pod (see the module docstring).

    Args:
        pod: this Pod.
        cache: the Run cache (the informer of the Pod's namespace).
        writer: conditional status writes (``runtimed.tasks.KubeStatusWriter``).
        finalizers: conditional finalizer edits (:class:`~.finalizers.KubeFinalizers`).
        server: the local Runtime Server's FunctionRuntime
            (:class:`~.client.FunctionRuntimeClient`, run by the caller).
        workspace: the workspace shared with the Runtime Server.
        clock: wall clock (``startTime``, ``spec.timeout``, idle comparison).
        settings: endpoint, defaults, deadlines.
        registry: the Run UID -> registration map the invoke proxy reads (a new one when
            omitted).
        events: Event sink (registration failures).
        git: the git executable for repository sources.
        workers: parallel reconcile workers (one Run is never reconciled twice at once).
        metrics: where to count (a private registry when omitted; pass
            ``FunctionMetrics(RuntimedMetrics.registry)`` to serve them on ``/metrics``).
        files: the file-system steps (default :class:`~.files.WorkspaceFiles` with ``git``).
    """

    def __init__(
        self,
        *,
        pod: PodIdentity,
        cache: RunCache,
        writer: StatusWriter,
        finalizers: FinalizerWriter,
        server: FunctionServer,
        workspace: Workspace,
        clock: Clock,
        settings: FunctionSettings | None = None,
        registry: FunctionRegistry | None = None,
        events: EventSink | None = None,
        git: str = "git",
        workers: int = 16,
        metrics: FunctionMetrics | None = None,
        files: RunFileOps | None = None,
    ) -> None:
        self.pod = pod
        self._cache = cache
        self._writer = writer
        self._finalizers = finalizers
        self._server = server
        self.workspace = workspace
        self._clock = clock
        self.settings = settings or FunctionSettings()
        self.timings = self.settings.timings
        self.registry = registry if registry is not None else FunctionRegistry()
        self._events = events or NullEventSink()
        self._git = git
        self._workers = workers
        self._files = files or WorkspaceFiles(git=git)
        self.queue: WorkQueue[str] = WorkQueue("runtimed-functions", base_delay=0.1, max_delay=30.0)
        self.stats = FunctionStats()
        self.metrics = metrics or FunctionMetrics()
        self.metrics.track_accepting(lambda: self.registry.count(EntryState.READY))
        self._local: dict[str, _Local] = {}
        #: Run UID -> (resourceVersions we wrote from, the object our last write returned).
        self._written: dict[str, tuple[set[str], Obj]] = {}
        self._nursery: trio.Nursery | None = None
        #: Why the local Runtime Server fails its health checks, or ``None`` while it passes.
        self.server_down: str | None = None

    # -- wiring ------------------------------------------------------------------------------

    def local(self, uid: str) -> LocalView | None:
        """The local view of Run ``uid`` (tests, diagnostics)."""
        local = self._local.get(uid)
        return local.view() if local is not None else None

    def wants(self, obj: Obj | None) -> bool:
        """True for a function Run assigned to this Pod (the dispatch test of the daemon)."""
        return obj is not None and is_function_run(obj) and assigned_pod_uid(obj) == self.pod.uid

    def on_run_event(self, event: InformerEvent) -> None:
        """Informer handler: enqueue function Runs assigned here or holding local state here."""
        obj = event.obj
        if event.type is EventType.DELETED:
            self._written.pop(run_uid(obj), None)
        if not is_function_run(obj):
            return
        mine = self.pod.uid
        if (
            assigned_pod_uid(obj) == mine
            or assigned_pod_uid(event.old) == mine
            or run_uid(obj) in self._local
            or any(local.key == queue_key(obj) for local in self._local.values())
        ):
            self.queue.add(queue_key(obj))

    def on_server_health(self, state: HealthState) -> None:
        """Readiness-loop handler: the local Runtime Server's health changed (synchronous).

        Unhealthy: every function Run held here is to be marked ``Ready=False Unavailable``
        (once; :func:`~.decisions.decide_function`) and its registration is unconfirmed.
        Healthy again: each is reconciled, which confirms its registration with
        FunctionStatus before ``Ready=True`` is written back. Only enqueues: the reconcile
        writes status.

        Args:
            state: the new health (``runtimed.readiness.HealthState``).
        """
        down = None if state.healthy else f"{state.reason}: {state.message}"
        if down == self.server_down:
            return
        was_down = self.server_down is not None
        self.server_down = down
        if down is not None and was_down:
            return  # still down, only the message changed: nothing to write again
        for local in self._local.values():
            if down is not None and not local.cleaned:
                local.unconfirmed = True
            self.queue.add(local.key)

    def adopt(self, objs: Iterable[Obj]) -> int:
        """Enqueue every function Run of ``objs`` assigned to this Pod (start-up re-adoption).

        Returns:
            How many were enqueued.
        """
        count = 0
        for obj in objs:
            if self.wants(obj):
                self.queue.add(queue_key(obj))
                count += 1
        return count

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the reconcile workers and hold the pollers' nursery; never returns unless cancelled.

        Call after the Run cache has synced; ``started()`` once the workers run.
        """
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            await nursery.start(self._run_queue)
            task_status.started()

    async def _run_queue(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        await self.queue.run(self.reconcile_key, workers=self._workers, task_status=task_status)

    # -- reconcile ---------------------------------------------------------------------------

    async def reconcile_key(self, key: str) -> Requeue | None:
        """Reconcile one Run key (``namespace/name``); the work queue calls this.

        Returns:
            ``Requeue(after)`` to be called again, or ``None`` to wait for an event.
        """
        namespace, _, name = key.partition("/")
        obj = self._current(self._cache.get(namespace, name))
        current_uid = run_uid(obj) if obj is not None else ""
        wake: list[float] = []
        for local in [lr for lr in self._local.values() if lr.key == key]:
            if local.uid != current_uid:  # gone, or the name now belongs to a new Run
                after = await self._release(local, "the Run is gone")
                if after is not None:
                    wake.append(after)
        if obj is None:
            return Requeue(min(wake)) if wake else None
        outcome = await self.reconcile(obj)
        if wake:
            first = min(wake)
            if outcome is None or (outcome.after is not None and outcome.after > first):
                return Requeue(first)
        return outcome

    async def reconcile(self, obj: Obj) -> Requeue | None:
        """Drive one function Run (as read from the cache) as far as it goes without waiting.

        Calls for one Run must not overlap (the work queue of :meth:`run` serialises them per
        key); prefer enqueueing (:meth:`on_run_event`, :meth:`adopt`) over calling this.

        Args:
            obj: the Run object (a task Run is ignored).

        Returns:
            ``Requeue(after)`` to look again after ``after`` seconds, or ``None``.
        """
        if not is_function_run(obj):
            return None
        try:
            run = Run.from_dict(obj)
            endpoint = self.settings.endpoint(run)
        except ApiError as exc:
            log.warning("Run %s cannot be read: %s", queue_key(obj), exc)
            return None
        for _ in range(MAX_STEPS):
            local = self._local.get(run.metadata.uid)
            action = decide_function(
                run,
                pod_uid=self.pod.uid,
                local=local.view() if local is not None else None,
                endpoint=endpoint,
                now=self._clock.now(),
                server_down=self.server_down,
            )
            outcome = await self._perform(obj, run, action)
            if isinstance(outcome, _Continue):
                continue
            return outcome
        log.warning("Run %s: no stable decision after %d steps", run.key, MAX_STEPS)
        return Requeue(1.0)

    def _current(self, cached: Obj | None) -> Obj | None:
        """The cached Run, or the object our own last write returned while the cache lags it."""
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

    def _remember(self, before: Obj, after: Obj) -> None:
        uid = run_uid(before)
        stale = self._written[uid][0] if uid in self._written else set()
        stale.add(resource_version(before))
        self._written[uid] = (stale, after)

    def _local_for(self, run: Run) -> _Local:
        uid = run.metadata.uid
        local = self._local.get(uid)
        if local is None:
            local = self._local[uid] = _Local(uid=uid, key=run.key)
        return local

    async def _perform(
        self, obj: Obj, run: Run, action: FunctionAction
    ) -> Requeue | None | _Continue:
        uid = run.metadata.uid
        if isinstance(action, Ignore):
            local = self._local.get(uid)
            if local is not None and local.cleaned:
                del self._local[uid]
            return None
        if isinstance(action, Wait):
            return Requeue(action.after)
        if isinstance(action, Serve):
            return Requeue(action.after) if action.after is not None else None
        if isinstance(action, Release):
            local = self._local[uid]
            after = await self._release(local, action.why)
            return Requeue(after) if after is not None else _CONTINUE
        if isinstance(action, Claim):
            return await self._write(obj, action.patch, "claimed")
        if isinstance(action, AddFinalizer):
            return await self._edit_finalizer(obj, add=True)
        if isinstance(action, RemoveFinalizer):
            outcome = await self._edit_finalizer(obj, add=False)
            local = self._local.get(uid)
            if outcome is not None and local is not None and local.cleaned:
                del self._local[uid]
            return outcome
        if isinstance(action, Register):
            return await self._register(run, action)
        if isinstance(action, MarkReady):
            outcome = await self._write(obj, action.patch, "ready")
            if outcome is not None:
                function_log.info("function ready", extra=self._fields(run))
            return outcome
        if isinstance(action, MarkUnavailable):
            outcome = await self._write(obj, action.patch, "unavailable")
            if outcome is not None:
                function_log.warning(
                    "function unavailable: %s",
                    action.patch.get("message"),
                    extra=self._fields(run),
                )
            return outcome
        if isinstance(action, Confirm):
            return await self._confirm(run)
        if isinstance(action, Fail):
            return await self._fail(obj, run, action)
        if isinstance(action, ResumeRetry):
            local = self._local_for(run)
            local.failure = None
            return await self._write(obj, action.patch, "retry resumed")
        if isinstance(action, Cleanup):
            return await self._cleanup(obj, run, action)
        raise AssertionError(f"unhandled action {action!r}")  # pragma: no cover

    # -- writes ------------------------------------------------------------------------------

    async def _write(self, obj: Obj, patch: StatusPatch, what: str) -> Requeue | None:
        """Conditional status write; ``Requeue(0)`` on success (the next step reads it)."""
        status = merged_status(obj.get("status"), patch)
        try:
            written = await self._writer.write_status(obj, status)
        except Conflict:
            log.debug("Run %s changed since read; waiting for the cache", queue_key(obj))
            return None
        except NotFound:
            return None
        self.stats.status_writes += 1
        self._remember(obj, written)
        log.debug("Run %s: %s", queue_key(obj), what)
        return Requeue(0.0)

    async def _edit_finalizer(self, obj: Obj, *, add: bool) -> Requeue | None:
        try:
            if add:
                written = await self._finalizers.add(obj)
            else:
                written = await self._finalizers.remove(obj)
        except Conflict:
            return None
        except NotFound:
            return None
        if resource_version(written) != resource_version(obj):
            self._remember(obj, written)
        return Requeue(0.0)

    # -- registration ------------------------------------------------------------------------

    def _source(self, run: Run) -> tuple[Source | None, str]:
        """``spec.source`` with the runtime's default inline file applied, and that file."""
        inline_path = self.settings.inline_path(run)
        source = run.spec.source
        if source is not None and source.inline is not None and not source.inline_path:
            source = replace(source, inline_path=inline_path)
        return source, inline_path

    def _register_spec(self, run: Run, attempt: int) -> RegisterSpec:
        mode = run.spec.mode
        assert isinstance(mode, FunctionMode)
        _, inline_path = self._source(run)
        env = {e.name: e.value for e in run.spec.env}
        files = self.workspace.files(run.metadata.uid)
        return RegisterSpec(
            run_uid=run.metadata.uid,
            attempt=attempt,
            working_dir=self.workspace.for_server(files.work),
            handler=mode.handler,
            env=env,
            idle_timeout_seconds=mode.idle_timeout_seconds or 0,
            digest=registration_digest(run, inline_path=inline_path, env=env),
        )

    async def _prepare(self, run: Run, attempt: int, *, adopt: bool) -> Failure | None:
        """Prepare the source for ``attempt`` (kept as is when re-adopting a Ready Run)."""
        files = self.workspace.files(run.metadata.uid)
        if adopt and await self._files.has_work_dir(files):
            return None
        source, _ = self._source(run)
        try:
            with trio.fail_after(self.timings.prepare):
                await self._files.prepare(source, files)
        except PreparationError as exc:
            return Failure(FailureReason.PREPARATION_FAILED, str(exc), attempt=attempt)
        except trio.TooSlowError:
            message = f"source preparation took longer than {self.timings.prepare:g}s"
            return Failure(FailureReason.PREPARATION_FAILED, message, attempt=attempt)
        return None

    async def _register(self, run: Run, action: Register) -> Requeue | None | _Continue:
        local = self._local_for(run)
        local.stop_poller()
        attempt = action.attempt
        if local.attempt != attempt:
            local.registration_id = None
            local.failure = None
            local.idle_expired = False
        local.attempt = attempt
        local.cleaned = False
        spec = self._register_spec(run, attempt)
        self.registry.registering(
            run.metadata.uid, key=run.key, attempt=attempt, digest=spec.digest
        )
        started = trio.current_time()
        failure: Failure | None = None
        if action.adopt:
            try:
                with trio.fail_after(self.timings.rpc):
                    failure = await self._adoption_loss(run.metadata.uid, attempt)
            except FunctionRpcError as exc:
                log.info("adoption probe of %s: %s", run.key, exc, extra=self._fields(run))
                if failure_from_register_error(exc.code, exc.detail, attempt=attempt) is None:
                    return Requeue(self.timings.unavailable_retry)  # transient: ask again
                # an answer the probe cannot read (e.g. a server with stricter ID rules):
                # adopt as before rather than never; RegisterFunction reports real errors
            except (ServerUnavailable, trio.TooSlowError) as exc:
                log.info("adoption probe of %s: %r", run.key, exc, extra=self._fields(run))
                return Requeue(self.timings.unavailable_retry)
        if failure is None:
            failure = await self._prepare(run, attempt, adopt=action.adopt)
        if failure is None:
            try:
                with trio.fail_after(self.timings.register):
                    registration_id = await self._server.register(spec)
            except FunctionRpcError as exc:
                failure = failure_from_register_error(exc.code, exc.detail, attempt=attempt)
                if failure is None:
                    log.info("RegisterFunction %s: %s", run.key, exc, extra=self._fields(run))
                    return Requeue(self.timings.unavailable_retry)
            except (ServerUnavailable, trio.TooSlowError) as exc:
                log.info("RegisterFunction %s: %r", run.key, exc, extra=self._fields(run))
                return Requeue(self.timings.unavailable_retry)
        if failure is not None:
            self.metrics.registrations.labels(outcome="failed").inc()
            local.failure = failure
            self.registry.unavailable(run.metadata.uid)
            function_log.warning(
                "registration failed: %s", failure.message, extra=self._fields(run)
            )
            return _CONTINUE
        local.registration_id = registration_id
        local.unconfirmed = False
        self.registry.ready(run.metadata.uid, attempt=attempt, registration_id=registration_id)
        self.stats.registrations += 1
        self.metrics.register_seconds.observe(trio.current_time() - started)
        self.metrics.registrations.labels(outcome="adopted" if action.adopt else "registered").inc()
        if action.adopt:
            self.stats.adoptions += 1
            function_log.info("re-adopted registration", extra=self._fields(run))
        self._start_poller(run, local, registration_id)
        return _CONTINUE

    async def _confirm(self, run: Run) -> Requeue | _Continue:
        """After a Runtime Server outage: does the server still hold the registration?

        FunctionStatus READY confirms it (the next step writes ``Ready=True`` again); gone,
        stale or failed is a registration failure of the attempt (``RegistrationLost`` /
        ``RegistrationFailed`` through the retry engine); REGISTERING or no answer: look
        again after ``timings.unavailable_retry`` seconds.
        """
        local = self._local_for(run)
        registration_id = local.registration_id
        if registration_id is None:  # pragma: no cover - decide_function asks only when known
            local.unconfirmed = False
            return _CONTINUE
        try:
            with trio.fail_after(self.timings.rpc):
                view = await self._server.status(run.metadata.uid, registration_id)
        except (ServerUnavailable, FunctionRpcError, trio.TooSlowError) as exc:
            log.info("FunctionStatus of %s: %r", run.key, exc, extra=self._fields(run))
            return Requeue(self.timings.unavailable_retry)
        result = judge(view, idle_timeout_seconds=None, now_unix_nano=0)
        if result.verdict is Verdict.OK:
            if view.state is not RegState.READY:
                return Requeue(self.timings.unavailable_retry)
            local.unconfirmed = False
            function_log.info(
                "registration confirmed after the Runtime Server's outage",
                extra=self._fields(run),
            )
            return _CONTINUE
        reason = (
            FailureReason.REGISTRATION_FAILED
            if result.verdict is Verdict.FAILED
            else FailureReason.REGISTRATION_LOST
        )
        local.failure = Failure(reason, result.detail, attempt=local.attempt)
        local.unconfirmed = False
        local.stop_poller()
        self.registry.unavailable(run.metadata.uid)
        return _CONTINUE

    async def _adoption_loss(self, uid: str, attempt: int) -> Failure | None:
        """Before re-adopting a Ready Run: does the server still hold its registration?

        Seed 000: a lost registration makes the Run not ready and enters registration
        recovery; seed 002: re-sending RegisterFunction for the same attempt is idempotent
        only for a registration that exists. A Runtime Server that restarted together with
        runtimed (the Pod's containers restarted) holds none, and RegisterFunction would
        silently create a fresh one under the old attempt. So FunctionStatus is asked first
        with :data:`ADOPTION_PROBE_ID`, an ID no server hands out: FAILED_PRECONDITION (an
        unknown ID for a known Run UID) means a registration exists and may be adopted;
        NOT_FOUND means none does.

        Returns:
            A ``RegistrationLost`` failure of ``attempt``, or ``None`` to adopt.

        Raises:
            FunctionRpcError: another non-OK answer (a transient one is retried; any other
                leaves the decision to RegisterFunction). ServerUnavailable: no answer.
        """
        view = await self._server.status(uid, ADOPTION_PROBE_ID)
        if view.state is not RegState.NOT_FOUND:
            return None
        message = (
            f"the Runtime Server no longer holds the registration of attempt {attempt}"
            " (it restarted together with runtimed)"
        )
        return Failure(FailureReason.REGISTRATION_LOST, message, attempt=attempt)

    def _start_poller(self, run: Run, local: _Local, registration_id: str) -> None:
        assert self._nursery is not None, "FunctionLifecycle.run() is not running"
        mode = run.spec.mode
        assert isinstance(mode, FunctionMode)
        scope = trio.CancelScope()
        local.poller = scope
        attempt = local.attempt

        def report(result: PollResult) -> None:
            if self._local.get(local.uid) is not local or local.attempt != attempt:
                return
            if result.verdict is Verdict.IDLE:
                local.idle_expired = True
                self.registry.terminating(local.uid, key=local.key, attempt=attempt or 1)
            else:
                reason = (
                    FailureReason.REGISTRATION_FAILED
                    if result.verdict is Verdict.FAILED
                    else FailureReason.REGISTRATION_LOST
                )
                local.failure = Failure(reason, result.detail, attempt=attempt)
                self.registry.unavailable(local.uid)
            local.poller = None
            self.queue.add(local.key)

        async def poll() -> None:
            with scope:
                await poll_registration(
                    self._server,
                    run_uid=local.uid,
                    registration_id=registration_id,
                    idle_timeout_seconds=mode.idle_timeout_seconds,
                    clock=self._clock,
                    timings=self.timings,
                    report=report,
                )

        self._nursery.start_soon(poll)

    async def _fail(self, obj: Obj, run: Run, action: Fail) -> Requeue | None:
        local = self._local_for(run)
        failure = local.failure
        outcome = await self._write(obj, action.decision.patch, "registration failure applied")
        if outcome is None:
            return None
        self.stats.registration_failures += 1
        local.failure = None
        local.stop_poller()
        message = str(action.decision.patch.get("message") or "")
        self._events.emit(
            obj,
            type_="Warning",
            reason=failure.reason.value if failure is not None else "RegistrationFailed",
            message=message,
        )
        self.metrics.ended.labels(
            outcome="Retry" if isinstance(action.decision, Retry) else "Failed"
        ).inc()
        if isinstance(action.decision, Retry):
            function_log.info("registration retry: %s", message, extra=self._fields(run))
            return Requeue(max(0.0, action.decision.delay_seconds))
        function_log.info("function failed: %s", message, extra=self._fields(run))
        return outcome

    # -- cleanup -----------------------------------------------------------------------------

    async def _lookup_id(self, run: Run) -> str | None:
        """Learn the ID of a registration this runtimed lost track of, or fence it off.

        First an idempotent RegisterFunction with the Run's attempt and digest (the server
        answers with the existing registration's ID, without reinitialising it). If the
        server refuses that (a different digest, a newer local attempt, a failed
        registration), a RegisterFunction with attempt :data:`FENCE_ATTEMPT` supersedes
        whatever the server holds for the Run UID (seed 002: a higher attempt invalidates
        the old ID and retires its worker), and its ID is unregistered instead. The working
        directory is recreated first so the server accepts the request (it is removed with
        the other files right after).

        Returns:
            The ID to unregister, or ``None`` when nothing can serve (both registrations
            failed, so no worker runs).

        Raises:
            _Unreachable: the server did not answer.
        """
        files = self.workspace.files(run.metadata.uid)
        try:
            await self._files.ensure_work_dir(files)
        except OSError as exc:
            log.info("cleanup lookup of %s: %s", run.key, exc, extra=self._fields(run))
        for attempt in (max(1, run.status.attempt), FENCE_ATTEMPT):
            spec = self._register_spec(run, attempt)
            try:
                with trio.fail_after(self.timings.register):
                    return await self._server.register(spec)
            except FunctionRpcError as exc:
                log.info("cleanup lookup of %s: %s", run.key, exc, extra=self._fields(run))
            except (ServerUnavailable, trio.TooSlowError) as exc:
                raise _Unreachable(str(exc)) from None
        return None

    async def _unregister(self, uid: str, registration_id: str, *, drain: bool) -> bool:
        """UnregisterFunction: drain within ``timings.drain`` s (or not at all), then cancel.

        Returns:
            True once the server acknowledged (or the ID is stale: a newer registration owns
            the Run UID and ours is gone); False when it did not answer.
        """
        fields = {"run_uid": uid, "registration_id": registration_id}
        if drain and self.timings.drain > 0:
            drain_ms = int(self.timings.drain * 1000)
            with trio.move_on_after(self.timings.drain + self.timings.rpc):
                try:
                    await self._server.unregister(
                        uid, registration_id, cancel_in_flight=False, drain_timeout_millis=drain_ms
                    )
                    return True
                except FunctionRpcError as exc:
                    if exc.code == "FAILED_PRECONDITION":
                        return True
                    log.info("UnregisterFunction (drain): %s", exc, extra=fields)
                except ServerUnavailable as exc:
                    log.info("UnregisterFunction (drain): %s", exc, extra=fields)
                    return False
        with trio.move_on_after(self.timings.rpc):
            try:
                await self._server.unregister(
                    uid, registration_id, cancel_in_flight=True, drain_timeout_millis=0
                )
                return True
            except FunctionRpcError as exc:
                if exc.code == "FAILED_PRECONDITION":
                    return True
                log.info("UnregisterFunction (cancel): %s", exc, extra=fields)
            except ServerUnavailable as exc:
                log.info("UnregisterFunction (cancel): %s", exc, extra=fields)
        return False

    async def _clean_local(
        self, local: _Local, run: Run | None, *, drain: bool, lookup: bool
    ) -> bool:
        """Steps 1-5 of the cleanup sequence; True when done (idempotent).

        1. stop accepting invokes (registry TERMINATING) and stop the poller;
        2-3. UnregisterFunction, draining or cancelling in-flight work (bounded);
        4. remove the Run's files;
        5. drop the registry entry (the local capacity unit).
        """
        if local.cleaned:
            return True
        self.registry.terminating(local.uid, key=local.key, attempt=local.attempt or 1)
        local.stop_poller()
        registration_id = local.registration_id
        try:
            if registration_id is None and lookup and run is not None:
                registration_id = await self._lookup_id(run)
        except _Unreachable as exc:
            log.info("cleanup of %s waits for the Runtime Server: %s", local.key, exc)
            return False
        if registration_id is not None:
            if not await self._unregister(local.uid, registration_id, drain=drain):
                return False
        await self._files.remove(self.workspace.files(local.uid))
        local.registration_id = None
        local.failure = None
        local.cleaned = True
        self.registry.remove(local.uid)
        self.stats.cleanups += 1
        return True

    async def _cleanup(self, obj: Obj, run: Run, action: Cleanup) -> Requeue | None:
        local = self._local_for(run)
        drain = action.kind in (CleanupKind.DELETE, CleanupKind.IDLE)
        if not await self._clean_local(local, run, drain=drain, lookup=action.lookup):
            return Requeue(self.timings.unavailable_retry)
        function_log.info("cleaned up (%s)", action.kind.value, extra=self._fields(run))
        if action.patch is not None:
            outcome = await self._write(obj, action.patch, f"ended ({action.kind.value})")
        else:
            outcome = await self._edit_finalizer(obj, add=False)
        if outcome is not None:
            self.metrics.ended.labels(outcome=_ENDED[action.kind]).inc()
        return outcome

    async def _release(self, local: _Local, why: str) -> float | None:
        """Let go of a Run that is gone, terminal or not ours; seconds to look again or None."""
        obj = self._cache.by_uid(local.uid)
        run: Run | None = None
        if obj is not None:
            try:
                run = Run.from_dict(obj)
            except ApiError:
                run = None
        if not await self._clean_local(local, run, drain=True, lookup=False):
            return self.timings.unavailable_retry
        log.info("released function Run (%s)", why, extra={"run_uid": local.uid, "run": local.key})
        self.metrics.ended.labels(outcome="Released").inc()
        if self._local.get(local.uid) is local and (obj is None or run is None):
            del self._local[local.uid]
        return None

    # -- logs --------------------------------------------------------------------------------

    def _fields(self, run: Run) -> dict[str, Any]:
        return {"run_uid": run.metadata.uid, "attempt": max(1, run.status.attempt), "run": run.key}


class _Continue:
    """Sentinel: the action changed only local state; decide again in this reconciliation."""


_CONTINUE: Final = _Continue()
