"""The task-Run reconcile decision: given what runtimed knows, what does it do next (pure).

Seed 003 (Task Execution Lifecycle) as a function over plain data. The trio adapter
(:mod:`runtimed.tasks`) reads the cached Run, this Pod's UID, the local execution
observation and, when :func:`decide_task` asks for it, the Runtime Server's ``Status``
answer; it performs the returned :data:`TaskAction` and asks again. Nothing here does I/O or
reads a clock, so every rule is tested synchronously and exhaustively.

Rules, in the order they are applied to a Run assigned to this Pod:

* Scheduled: ``cancelRequested`` ends Cancelled and an expired ``spec.timeout`` (counted from
  a ``startTime`` kept across requeued attempts) ends Timeout, both without touching the
  Runtime Server (nothing was started for this assignment); otherwise :class:`Claim`
  (conditional update to Running, ``startTime``), after which the same reconciliation
  prepares the source.
* Running with ``cancelRequested`` or an expired ``spec.timeout``: wait for an in-flight
  start, then Cancel a PENDING/RUNNING execution, Forget a finished one, and only when the
  server answers NOT_FOUND write Cancelled/Timeout (:class:`End`).
* Running in retry backoff (``retryAfter`` set): Cancel/Forget whatever the server still
  holds for the Run UID (the previous attempt's execution, e.g. when runtimed restarted
  between persisting the retry and forgetting), then wait for the backoff and :class:`Resume`
  (``retryAfter`` removed, ``Running=True``) without starting anything in that
  reconciliation.
* Running otherwise: an in-flight start is waited for; PENDING/RUNNING is
  :class:`Observe` (recorded locally, handed to the lifecycle event generator); SUCCEEDED
  with valid outputs is :class:`Succeed`, with invalid outputs a permanent
  ``OutputsInvalid`` failure; FAILED is ``ExecutionFailed`` (exit code and stderr tail);
  NOT_FOUND after an observed execution (or an accepted Execute) is ``ExecutionLost``, after
  a failed Execute it is ``StartFailed`` (``ExecuteRejected``, permanent, when the server
  answered ``INVALID_ARGUMENT``), after an Execute a previous runtimed sent for this
  attempt (its durable marker, :mod:`runtimed.execute_markers`: runtimed and the Runtime
  Server restarted together) it is ``ExecutionLost`` too, and with nothing observed or sent
  it is :class:`StartExecution` (preparing the source first when this attempt has not been
  prepared here). Failures go through the shared retry engine (:func:`krt.api.retry.decide`,
  ``IN_PLACE``).
* An unreachable Runtime Server never changes the Run: the decision is to wait and ask again.

A Run this Pod must let go of (deleted, reassigned, or terminal while local state remains)
is handled by :func:`decide_release`: Cancel, Forget, then drop local state, never writing
the Run.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from typing import Final, TypeAlias

from krt.api.constants import Reason
from krt.api.lifecycle import (
    cancelled_patch,
    claim_patch,
    succeeded_patch,
    timed_out_patch,
    timeout_deadline,
)
from krt.api.patches import StatusPatch
from krt.api.phases import Phase, is_terminal
from krt.api.retry import (
    Failure,
    FailureReason,
    Reentry,
    Retry,
    Stale,
    Terminal,
    decide,
    resume_patch,
    retry_wait_seconds,
)
from krt.api.run import Run
from runtimed.output_log import AttemptLog
from runtimed.timeline import Timeline

__all__ = [
    "CANCEL_POLL_SECONDS",
    "EXECUTE_REJECTED_HINT",
    "STDERR_TAIL_CHARS",
    "UNREACHABLE_RETRY_SECONDS",
    "Claim",
    "End",
    "ExecState",
    "Fail",
    "ForgetExecution",
    "CancelExecution",
    "Ignore",
    "LocalView",
    "NeedStatus",
    "Observe",
    "Release",
    "Resume",
    "ServerView",
    "StartExecution",
    "StartState",
    "Succeed",
    "TaskAction",
    "Wait",
    "decide_release",
    "decide_task",
    "execution_failure_message",
    "exit_code_text",
    "start_failure",
]

#: Seconds between Status checks while a Cancel at the Runtime Server takes effect.
CANCEL_POLL_SECONDS: Final = 0.1
#: Seconds before asking an unreachable Runtime Server again.
UNREACHABLE_RETRY_SECONDS: Final = 1.0
#: Characters of stderr kept in a failure message (the whole message is bounded to 2048).
STDERR_TAIL_CHARS: Final = 1200
#: What an ``ExecuteRejected`` message tells the user to change (a new Run with a fixed spec).
EXECUTE_REJECTED_HINT: Final = (
    "set spec.mode.task.args, or spec.source with spec.mode.task.entrypoint (a path inside "
    "the source), and check spec.env; the spec is immutable, so create a new Run"
)
#: An ``INVALID_ARGUMENT`` about the working directory is about what runtimed prepared, not
#: the Run's spec (the directory vanished under it): ``StartFailed``, retried like others.
_PREPARED_BY_RUNTIMED: Final = ("working_dir ",)


class ExecState(StrEnum):
    """The Runtime Server's answer about one execution (``Status`` of the Run UID)."""

    NOT_FOUND = "NotFound"
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    UNREACHABLE = "Unreachable"
    """The call failed in transport (server down, restarting, deadline): no information."""

    @property
    def active(self) -> bool:
        """PENDING or RUNNING: the execution exists and has not finished."""
        return self in (ExecState.PENDING, ExecState.RUNNING)

    @property
    def finished(self) -> bool:
        """SUCCEEDED or FAILED: the execution exists and has finished."""
        return self in (ExecState.SUCCEEDED, ExecState.FAILED)


@dataclass(frozen=True, slots=True)
class ServerView:
    """What ``Status`` said about the Run UID, plus the outputs the adapter read on success.

    Attributes:
        state: see :class:`ExecState`.
        exit_code: the process exit code (finished executions).
        stdout: captured stdout (bounded by the server).
        stderr: captured stderr (bounded by the server).
        error_message: the server's explanation of a failure (start error, timeout, signal).
        outputs: for SUCCEEDED, the validated ``$KRUNTIME_OUTPUTS`` entries (empty when the
            task wrote none); ``None`` when not read or invalid.
        outputs_error: for SUCCEEDED, why the outputs broke a bound (names key and bound).
    """

    state: ExecState
    exit_code: int = 0
    stdout: str = ""
    stderr: str = ""
    error_message: str = ""
    outputs: Mapping[str, str] | None = None
    outputs_error: str | None = None


class StartState(StrEnum):
    """The local asynchronous start worker of the current attempt (seed 003)."""

    NONE = "None"
    IN_FLIGHT = "InFlight"
    SUCCEEDED = "Succeeded"
    """Execute returned OK: the server accepted the execution."""
    FAILED = "Failed"
    """Preparation-independent start failure (staging or Execute); not yet applied."""


@dataclass(frozen=True, slots=True)
class LocalView:
    """runtimed's local observation of one Run's current attempt (lost on restart).

    The one fact kept across a restart, that an Execute was sent for an attempt, is not part
    of the view: it is :func:`decide_task`'s ``execute_sent`` (:mod:`runtimed.execute_markers`).

    Attributes:
        attempt: the ``status.attempt`` this observation belongs to.
        prepared: the source was prepared for this attempt on this Pod.
        start: the start worker's state.
        start_error: the recorded start failure (``start`` is FAILED).
        start_rejected: the Runtime Server's message when it answered the Execute request
            itself ``INVALID_ARGUMENT`` (the spec it was built from is invalid), else empty.
        observed: the Runtime Server reported the execution (PENDING, RUNNING or finished).
    """

    attempt: int = 0
    prepared: bool = False
    start: StartState = StartState.NONE
    start_error: str = ""
    start_rejected: str = ""
    observed: bool = False

    def for_attempt(self, attempt: int) -> LocalView:
        """This view if it belongs to ``attempt``, else a fresh one (an in-flight start kept).

        A start worker is never duplicated: its in-flight flag survives an attempt change
        until the worker reports back.
        """
        if self.attempt == attempt:
            return self
        in_flight = self.start is StartState.IN_FLIGHT
        return LocalView(
            attempt=attempt, start=StartState.IN_FLIGHT if in_flight else StartState.NONE
        )


# -- actions ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Ignore:
    """Nothing to do for this Run on this Pod."""

    reason: str


@dataclass(frozen=True, slots=True)
class NeedStatus:
    """Call ``Status(run UID)`` and decide again with the answer."""


@dataclass(frozen=True, slots=True)
class Claim:
    """Write :attr:`patch` (Scheduled -> Running, ``startTime``), then prepare the source.

    A preparation error is applied by the same reconciliation as a ``PreparationFailed``
    failure through the retry engine (seed 003, Lifecycle step 2).
    """

    patch: StatusPatch


@dataclass(frozen=True, slots=True)
class StartExecution:
    """Start the asynchronous worker (staging + Execute); prepare the source first if asked.

    Attributes:
        prepare: the source must be (re)prepared for this attempt before the worker starts.
    """

    prepare: bool


@dataclass(frozen=True, slots=True)
class Wait:
    """Do nothing now; reconcile again after :attr:`after` seconds, or on the next event.

    Attributes:
        after: seconds, or ``None`` to wait for an event (worker result, watch, RLEG).
        reason: for logs.
    """

    after: float | None
    reason: str


@dataclass(frozen=True, slots=True)
class Observe:
    """The execution exists (PENDING/RUNNING): record it and watch it (RLEG).

    Attributes:
        after: seconds until ``spec.timeout`` expires (reconcile then), or ``None``.
    """

    after: float | None


@dataclass(frozen=True, slots=True)
class Succeed:
    """Write :attr:`patch` (Succeeded with outputs), then Forget the execution and release."""

    patch: StatusPatch


@dataclass(frozen=True, slots=True)
class Fail:
    """Persist the retry engine's decision first; then Forget the finished execution.

    Attributes:
        decision: :class:`~krt.api.retry.Retry` (stay Running, next attempt after the
            backoff) or :class:`~krt.api.retry.Terminal` (Failed; release afterwards).
        forget: the Runtime Server still holds an execution for the Run UID.
    """

    decision: Retry | Terminal
    forget: bool


@dataclass(frozen=True, slots=True)
class CancelExecution:
    """Call ``Cancel(run UID)``, then reconcile again after :attr:`after` seconds."""

    after: float


@dataclass(frozen=True, slots=True)
class ForgetExecution:
    """Call ``Forget(run UID)`` (the execution has finished), then decide again."""


@dataclass(frozen=True, slots=True)
class End:
    """Write :attr:`patch` (Cancelled or Timeout); the server no longer holds the execution."""

    patch: StatusPatch


@dataclass(frozen=True, slots=True)
class Resume:
    """Backoff expired: clear the local observation and write :attr:`patch`; start nothing now."""

    patch: StatusPatch


@dataclass(frozen=True, slots=True)
class Release:
    """Drop the local state and the Run's working directory (nothing left at the server)."""


TaskAction: TypeAlias = (
    Ignore
    | NeedStatus
    | Claim
    | StartExecution
    | Wait
    | Observe
    | Succeed
    | Fail
    | CancelExecution
    | ForgetExecution
    | End
    | Resume
    | Release
)


# -- helpers ---------------------------------------------------------------------------------


def exit_code_text(exit_code: int) -> str:
    """An exit code as shells and Kubernetes report it.

    A negative code is a death by signal (Python's subprocess convention, which the Runtime
    Server's wire ``exit_code`` keeps): it is shown as 128 + the signal number, with the
    signal's name.

    Args:
        exit_code: the wire exit code (``-9`` for SIGKILL).

    Returns:
        ``"exit code 3"`` or ``"exit code 137 (killed by signal 9, SIGKILL)"``.
    """
    if exit_code >= 0:
        return f"exit code {exit_code}"
    number = -exit_code
    try:
        name = signal.Signals(number).name
    except ValueError:
        return f"exit code {128 + number} (killed by signal {number})"
    return f"exit code {128 + number} (killed by signal {number}, {name})"


def execution_failure_message(server: ServerView) -> str:
    """The ``ExecutionFailed`` message: exit code, the server's error, a stderr tail.

    The server's error is left out when it only restates the exit code (``"exited with
    status N"``, ``"killed by signal N"``); a signal death reads ``exit code 137 (killed by
    signal 9, SIGKILL)`` (:func:`exit_code_text`).

    The stderr tail is cut to :data:`STDERR_TAIL_CHARS` (keeping its end) so the exit code
    survives the 2048-character bound of ``status.message``.
    """
    code = server.exit_code
    parts = [exit_code_text(code)]
    # a plain "exited with status N" / "killed by signal N" says nothing the code does not
    restated = f"killed by signal {-code}" if code < 0 else f"exited with status {code}"
    if server.error_message and server.error_message != restated:
        parts.append(server.error_message)
    stderr = server.stderr.rstrip()
    if stderr:
        if len(stderr) > STDERR_TAIL_CHARS:
            stderr = "\u2026" + stderr[len(stderr) - (STDERR_TAIL_CHARS - 1) :]
        parts.append(f"stderr: {stderr}")
    return "; ".join(parts)


def start_failure(view: LocalView) -> tuple[FailureReason, str]:
    """The failure reason and message of a start failure recorded by :mod:`runtimed.tasks`.

    An Execute the Runtime Server answered ``INVALID_ARGUMENT``
    (:attr:`LocalView.start_rejected`) is ``ExecuteRejected``, which never retries: the same
    spec is rejected again. Anything else (staging, an unreachable or slow server, another
    gRPC error, an ``INVALID_ARGUMENT`` about the working directory runtimed prepared) is
    ``StartFailed``, retryable (seed 003).

    Args:
        view: the Run's local view (``start`` is FAILED).

    Returns:
        ``(reason, message)``; the message names the fields to set for ``ExecuteRejected``.
    """
    detail = view.start_rejected
    if not detail or detail.startswith(_PREPARED_BY_RUNTIMED):
        return FailureReason.START_FAILED, view.start_error
    return (
        FailureReason.EXECUTE_REJECTED,
        f"the Runtime Server rejected Execute (INVALID_ARGUMENT): {detail}; {EXECUTE_REJECTED_HINT}",
    )


def _fail(
    run: Run, reason: FailureReason, message: str, *, now: datetime, forget: bool
) -> TaskAction:
    decision = decide(
        run,
        Failure(reason, message, attempt=max(1, run.status.attempt)),
        now=now,
        reentry=Reentry.IN_PLACE,
    )
    if isinstance(decision, Stale):
        return Ignore(f"stale failure: {decision.detail}")
    return Fail(decision, forget=forget)


def _ending_patch(run: Run, *, now: datetime) -> StatusPatch | None:
    """Cancelled or Timeout patch when the Run must end now, else ``None``."""
    if run.spec.cancel_requested:
        return cancelled_patch(run, now=now)
    deadline = timeout_deadline(run)
    if deadline is not None and now >= deadline:
        return timed_out_patch(
            run,
            reason=Reason.TIMEOUT_EXCEEDED,
            message=f"spec.timeout {run.spec.timeout} exceeded (counted from startTime)",
            now=now,
        )
    return None


def _seconds_to_deadline(run: Run, now: datetime) -> float | None:
    deadline = timeout_deadline(run)
    if deadline is None:
        return None
    return max(0.0, (deadline - now).total_seconds())


def _drain_server(server: ServerView | None, then: TaskAction) -> TaskAction:
    """Cancel/Forget whatever the server holds for the Run UID; ``then`` once it holds nothing."""
    if server is None:
        return NeedStatus()
    if server.state is ExecState.UNREACHABLE:
        return Wait(UNREACHABLE_RETRY_SECONDS, "Runtime Server unreachable")
    if server.state.active:
        return CancelExecution(CANCEL_POLL_SECONDS)
    if server.state.finished:
        return ForgetExecution()
    return then


# -- the decisions ---------------------------------------------------------------------------


def decide_task(
    run: Run,
    *,
    pod_uid: str,
    local: LocalView | None,
    server: ServerView | None,
    now: datetime,
    execute_sent: int = 0,
) -> TaskAction:
    """Decide the next step for a cached task Run (seed 003; see the module docstring).

    Args:
        run: the Run as cached (parsed).
        pod_uid: this Runtime Pod's UID (the fence: only ``status.assignedPodUID`` equal to
            it is ours).
        local: the local observation of the Run, or ``None`` when there is none (first
            sight, or after a runtimed restart).
        server: the Runtime Server's ``Status`` answer for the Run UID, or ``None`` when it
            has not been asked in this reconciliation (the decision may return
            :class:`NeedStatus`).
        now: the current wall-clock time (aware), for ``startTime``, timeout and backoff.
        execute_sent: the latest attempt of the Run for which an Execute was sent, by this
            runtimed or an earlier one (the durable marker, :mod:`runtimed.execute_markers`);
            0 when none was. An attempt at or below it is never started again: with the
            server answering NOT_FOUND it is ``ExecutionLost``. Older attempts' markers
            (below ``status.attempt``) do not count.

    Returns:
        The next :data:`TaskAction`. A Run that is not ours, is a function Run, or is
        terminal or Pending gives :class:`Ignore` (local leftovers of such Runs go through
        :func:`decide_release`).

    Raises:
        DurationError: ``spec.timeout`` or ``retryPolicy.backoff`` is malformed (the CRD
            rejects both, so only a corrupted object gets here).
    """
    status = run.status
    if not pod_uid or status.assigned_pod_uid != pod_uid:
        return Ignore("not assigned to this Pod")
    if run.spec.is_function:
        return Ignore("function Runs are not task Runs")
    if is_terminal(status.phase) or status.phase is Phase.PENDING:
        return Ignore(f"phase {status.phase.value}")
    if status.phase is Phase.SCHEDULED:
        ending = _ending_patch(run, now=now)
        if ending is not None:
            return End(ending)
        return Claim(claim_patch(run, now=now))
    if status.phase is not Phase.RUNNING:
        return Ignore(f"phase {status.phase.value} is not a task phase")

    attempt = max(1, status.attempt)
    view = (local or LocalView(attempt=attempt)).for_attempt(attempt)

    ending = _ending_patch(run, now=now)
    if ending is not None:
        if view.start is StartState.IN_FLIGHT:
            return Wait(None, "ending: waiting for the in-flight start to report")
        return _drain_server(server, End(ending))

    if status.retry_after is not None:
        remaining = retry_wait_seconds(status, now=now)
        then: TaskAction = (
            Wait(remaining, "retry backoff")
            if remaining > 0
            else Resume(resume_patch(run, now=now))
        )
        if view.start is StartState.IN_FLIGHT:
            return Wait(None, "backoff: waiting for the in-flight start to report")
        return _drain_server(server, then)

    if view.start is StartState.IN_FLIGHT:
        return Wait(None, "start in flight")
    if server is None:
        return NeedStatus()
    state = server.state
    if state is ExecState.UNREACHABLE:
        return Wait(UNREACHABLE_RETRY_SECONDS, "Runtime Server unreachable")
    if state.active:
        return Observe(_seconds_to_deadline(run, now))
    if state is ExecState.SUCCEEDED:
        if server.outputs_error is not None or server.outputs is None:
            detail = server.outputs_error or "outputs were not read"
            return _fail(run, FailureReason.OUTPUTS_INVALID, detail, now=now, forget=True)
        return Succeed(succeeded_patch(run, outputs=server.outputs, now=now))
    if state is ExecState.FAILED:
        return _fail(
            run,
            FailureReason.EXECUTION_FAILED,
            execution_failure_message(server),
            now=now,
            forget=True,
        )
    # NOT_FOUND
    if view.observed or view.start is StartState.SUCCEEDED:
        return _fail(
            run,
            FailureReason.EXECUTION_LOST,
            "the Runtime Server no longer knows the execution it had accepted",
            now=now,
            forget=False,
        )
    if view.start is StartState.FAILED:
        reason, message = start_failure(view)
        return _fail(run, reason, message, now=now, forget=False)
    if execute_sent >= attempt:
        # Execute was sent for this attempt before a runtimed restart and the (restarted)
        # server does not know it: lost, like an observed execution. If runtimed died
        # between the marker and the Execute, nothing ran and this costs a retry: the safe
        # answer under at-least-once, never a silent second run of the same attempt.
        return _fail(
            run,
            FailureReason.EXECUTION_LOST,
            f"the Runtime Server does not know the execution of attempt {attempt}, which "
            "runtimed had sent (or was sending) before runtimed and the Runtime Server "
            "restarted",
            now=now,
            forget=False,
        )
    return StartExecution(prepare=not view.prepared)


def decide_release(*, start_in_flight: bool, server: ServerView | None) -> TaskAction:
    """Let go of a Run this Pod no longer runs (deleted, reassigned, terminal, or unknown).

    Never writes the Run: Cancel an active execution, Forget a finished one, and
    :class:`Release` local state once the server holds nothing for the Run UID. An in-flight
    start is not waited for: the worker sees the Run is no longer locally active and
    forgets what it created (seed 003, Asynchronous Start Boundary).

    Args:
        start_in_flight: a start worker for the Run UID has not reported yet.
        server: the ``Status`` answer, or ``None`` when not asked yet.
    """
    if start_in_flight:
        return Release()
    return _drain_server(server, Release())


@dataclass
class LocalRun:
    """Mutable local state of one Run UID, owned by the adapter (see :class:`LocalView`).

    Attributes:
        uid: the Run UID (the Runtime Server's execution ID).
        key: ``namespace/name`` of the Run (its work-queue key).
        view: the observation of the current attempt.
        active: False once runtimed let go of the Run; a start worker that finishes after
            that forgets what it created.
        last_server_state: last state the lifecycle event generator saw (change detection).
        seen_running: the Run's resourceVersion and the PENDING/RUNNING answer of the last
            Status that observed the execution; a reconciliation of the same version reuses
            it instead of asking again until the RLEG reports a change or runtimed itself
            acts on the execution (Cancel, Forget, a new start): issue 6.
        logged_attempt: the attempt whose stdout/stderr were logged to the end.
        output_log: what of the current attempt's output was logged (see
            :meth:`output_log_of`).
        follow_at: trio time of the next read of the running output (0: at once).
        follow_delay: seconds between reads; grows while the task prints nothing.
        timeline: when the Run passed each lifecycle stage here (diagnostics, issue 6).
    """

    uid: str
    key: str
    view: LocalView = field(default_factory=LocalView)
    active: bool = True
    last_server_state: ExecState | None = None
    seen_running: tuple[str, ServerView] | None = None
    logged_attempt: int = 0
    output_log: AttemptLog = field(default_factory=AttemptLog)
    follow_at: float = 0.0
    follow_delay: float = 0.0
    timeline: Timeline = field(default_factory=Timeline)

    def output_log_of(self, attempt: int) -> AttemptLog:
        """The record of ``attempt``'s logged output (a fresh one when the attempt changed)."""
        if self.output_log.attempt != attempt:
            self.output_log = AttemptLog(attempt=attempt)
        return self.output_log

    def update(self, **changes: object) -> None:
        """Replace fields of :attr:`view`."""
        self.view = replace(self.view, **changes)  # type: ignore[arg-type]
