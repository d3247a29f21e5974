"""The shared retry engine: what happens to a Run when an attempt fails.

One implementation for runtimed (task execution and function registration failures, seed
003 Retry; seed 000 Lifecycle State Machine) and the control plane's stale-Run reaper (Pod
loss, seed 000 Ownership Epoch and Fencing). It is pure: :func:`decide` takes the Run as read
and the failure and returns either :class:`Retry` (the status patch to persist *first*) or
:class:`Terminal` (the Failed status patch). The caller does the I/O with a conditional update.

Policy (``spec.retryPolicy``):

* ``maxAttempts`` counts attempts including the first; the default 1 means no retry.
  ``status.attempt`` is the current attempt, 1-based (the scheduler's first bind sets 1).
* ``backoff`` is a Go duration, *exponential*: the wait after failed attempt ``n`` is
  ``backoff * 2**(n-1)``, capped at :data:`~krt.api.limits.MAX_BACKOFF_SECONDS` (300 s). The
  default is :data:`DEFAULT_BACKOFF_SECONDS` (1 s); ``"0s"`` retries at once. No jitter: the
  decision must be deterministic, and retries of different Runs are not synchronised anyway.
* ``retryableReasons`` lists the :class:`FailureReason` values that may retry; unset means
  all of :data:`RETRYABLE_REASONS`. :data:`PERMANENT_REASONS` never retry (the CRD rejects
  them in the list): ``FunctionUnimplemented`` (seed 002: a Runtime without FunctionRuntime
  is a permanent configuration failure), ``OutputsInvalid`` (the program broke the
  outputs contract; running it again breaks it again) and ``ExecuteRejected`` (the Runtime
  Server answered Execute ``INVALID_ARGUMENT``: the same spec is rejected again).

Two ways back in (:class:`Reentry`):

* ``IN_PLACE`` (runtimed, same Pod; seed 003): the retry patch keeps phase Running with
  ``attempt + 1``, ``reason``, ``message``, ``retryAfter`` and ``Running=False/RetryBackoff``.
  runtimed persists it, then Forgets the terminal execution at the Runtime Server (it is keyed
  by Run UID and would otherwise be mistaken for the new attempt's result). When
  :func:`retry_wait_seconds` reaches 0 it clears its local execution observation and writes
  :func:`resume_patch` (``retryAfter`` and ``reason`` removed, ``Running=True``, a message
  naming the attempt now running and the one that failed), without calling Execute
  in that reconciliation; the next reconciliation sees NOT_FOUND and starts the attempt. A
  function Run whose registration failed re-registers with the new attempt the same way.
* ``REQUEUE`` (the reaper, after fencing the old assignment): phase Pending, assignment
  cleared, ``attempt + 1``, ``Scheduled=False/Requeued``; the scheduler binds it again once
  :func:`retry_wait_seconds` is 0 (:func:`~krt.api.lifecycle.bind_patch` clears ``reason``
  the same way).

``startTime`` is never cleared: ``spec.timeout`` bounds the whole Run across attempts, and
runtimed sets ``startTime`` on claim only when it is unset. ``endpoint`` stays (seed 000: it
may remain stable while the Run recovers; clients watch ``Ready``).

A :class:`Failure` may carry the attempt it belongs to; when that is no longer the Run's
current attempt the decision is :class:`Stale` and nothing is written, so a late or repeated
result never fails or retries a newer attempt twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Final, TypeAlias

from krt.api.conditions import bound_message, set_condition, wire_conditions
from krt.api.constants import Reason, RunConditionType
from krt.api.durations import parse_duration
from krt.api.lifecycle import (
    ended_patch,
    previous_failure,
    run_conditions,
    with_previous_failure,
)
from krt.api.limits import MAX_BACKOFF_SECONDS
from krt.api.patches import StatusPatch
from krt.api.phases import Phase, is_terminal
from krt.api.run import RetryPolicy, Run, RunStatus
from krt.api.times import format_time


class FailureReason(StrEnum):
    """Why an attempt failed: ``status.reason`` and the condition reason of the failure."""

    EXECUTION_FAILED = "ExecutionFailed"
    """The task ran and the Runtime Server reported FAILED (non-zero exit)."""
    EXECUTION_LOST = "ExecutionLost"
    """The Runtime Server answered NOT_FOUND after the execution had been observed (seed 003)."""
    START_FAILED = "StartFailed"
    """Execute (or artifact input staging) failed before the execution existed (seed 003)."""
    PREPARATION_FAILED = "PreparationFailed"
    """Source preparation (inline write, git checkout) failed before execution (seed 003)."""
    POD_LOST = "PodLost"
    """The assigned Runtime Pod is gone, replaced (UID mismatch) or deleting and fenced."""
    REGISTRATION_FAILED = "RegistrationFailed"
    """RegisterFunction failed or FunctionStatus reported FAILED / a fatal error (seed 002)."""
    REGISTRATION_LOST = "RegistrationLost"
    """The Runtime Server no longer knows a registration that had been Ready."""
    FUNCTION_UNIMPLEMENTED = "FunctionUnimplemented"
    """The Runtime Server does not implement FunctionRuntime (permanent, seed 002)."""
    OUTPUTS_INVALID = "OutputsInvalid"
    """The task's outputs broke a bound (permanent; the message names key and bound)."""
    EXECUTE_REJECTED = "ExecuteRejected"
    """The Runtime Server rejected Execute as invalid (``INVALID_ARGUMENT``, e.g. a task with
    neither args nor an entrypoint): the Run's spec is wrong for its Runtime (permanent)."""


PERMANENT_REASONS: Final = frozenset(
    {
        FailureReason.FUNCTION_UNIMPLEMENTED,
        FailureReason.OUTPUTS_INVALID,
        FailureReason.EXECUTE_REJECTED,
    }
)
RETRYABLE_REASONS: Final = frozenset(set(FailureReason) - PERMANENT_REASONS)
DEFAULT_BACKOFF_SECONDS: Final = 1.0


class Reentry(StrEnum):
    """How a retried Run re-enters the lifecycle."""

    IN_PLACE = "InPlace"
    """runtimed retries on the same Pod: phase Running, next attempt after the backoff."""
    REQUEUE = "Requeue"
    """Back to Pending with the assignment cleared; the scheduler places the next attempt."""


@dataclass(frozen=True, slots=True)
class Failure:
    """A failed attempt, as the component that observed it reports it.

    Attributes:
        reason: the failure reason.
        message: detail (exit code, stderr tail, RPC error); bounded in the patch.
        attempt: the attempt that failed, when the observer knows it (fences stale results).
    """

    reason: FailureReason
    message: str = ""
    attempt: int | None = None


@dataclass(frozen=True, slots=True)
class Retry:
    """Retry: persist :attr:`patch` (a status merge patch) before anything else.

    Attributes:
        patch: the status merge patch (attempt + 1, reason, message, conditions, retryAfter).
        attempt: the new attempt number.
        retry_after: when the next attempt may start.
        delay_seconds: ``retry_after - now`` in seconds.
    """

    patch: StatusPatch
    attempt: int
    retry_after: datetime
    delay_seconds: float


@dataclass(frozen=True, slots=True)
class Terminal:
    """No retry: persist :attr:`patch`, which ends the Run Failed.

    Attributes:
        patch: the status merge patch (phase Failed, reason, message, completionTime,
            conditions).
        why: ``"exhausted"`` (no attempts left), ``"permanent"`` (a reason that never
            retries) or ``"not-retryable"`` (not in ``retryableReasons``).
    """

    patch: StatusPatch
    why: str


@dataclass(frozen=True, slots=True)
class Stale:
    """The failure belongs to an attempt that is no longer current: write nothing.

    Also returned when the Run is already terminal.
    """

    detail: str


RetryDecision: TypeAlias = Retry | Terminal | Stale


def retryable_reasons(policy: RetryPolicy) -> frozenset[FailureReason]:
    """The reasons that may retry under ``policy`` (permanent reasons never do).

    Unknown strings in ``retryableReasons`` are ignored (the CRD admits only known ones).
    """
    if policy.retryable_reasons is None:
        return RETRYABLE_REASONS
    known = {reason.value: reason for reason in FailureReason}
    return (
        frozenset(known[name] for name in policy.retryable_reasons if name in known)
        - PERMANENT_REASONS
    )


def backoff_seconds(policy: RetryPolicy, failed_attempt: int) -> float:
    """Seconds to wait after attempt ``failed_attempt`` fails, before the next one starts.

    Args:
        policy: the Run's retry policy.
        failed_attempt: 1-based number of the attempt that failed.

    Returns:
        ``backoff * 2**(failed_attempt-1)``, at most ``MAX_BACKOFF_SECONDS``.

    Raises:
        DurationError: ``policy.backoff`` is not a Go duration.
    """
    base = (
        DEFAULT_BACKOFF_SECONDS
        if policy.backoff is None
        else parse_duration(policy.backoff, field="spec.retryPolicy.backoff", clamp=True)
    )
    if base <= 0:
        return 0.0
    exponent = max(0, failed_attempt - 1)
    if exponent >= 64:  # any base above zero is past the cap long before this
        return MAX_BACKOFF_SECONDS
    return float(min(MAX_BACKOFF_SECONDS, base * float(2**exponent)))


def decide(run: Run, failure: Failure, *, now: datetime, reentry: Reentry) -> RetryDecision:
    """Decide whether a failed attempt retries, and build the status patch to persist.

    Args:
        run: the Run as last read (its ``status.attempt`` is the attempt that failed).
        failure: what failed and why.
        now: the caller's current time (aware).
        reentry: ``IN_PLACE`` for runtimed on the same Pod, ``REQUEUE`` for the reaper (the
            old assignment must already be fenced).

    Returns:
        :class:`Retry`, :class:`Terminal` or :class:`Stale` (see the module docstring).

    Raises:
        DurationError: ``spec.retryPolicy.backoff`` is malformed.
    """
    status = run.status
    current = max(1, status.attempt)
    if is_terminal(status.phase):
        return Stale(f"the Run is already {status.phase.value}")
    if failure.attempt is not None and failure.attempt != current:
        return Stale(f"failure of attempt {failure.attempt}, but the Run is at attempt {current}")
    policy = run.spec.effective_retry_policy
    max_attempts = max(1, policy.max_attempts)
    summary = f"attempt {current} of {max_attempts} failed ({failure.reason.value})"
    detail = f"{summary}: {failure.message}" if failure.message else summary

    if failure.reason in PERMANENT_REASONS:
        return _terminal(
            run, failure, f"{detail}; {failure.reason.value} is permanent", now, "permanent"
        )
    if failure.reason not in retryable_reasons(policy):
        return _terminal(
            run,
            failure,
            f"{detail}; not in spec.retryPolicy.retryableReasons",
            now,
            "not-retryable",
        )
    if current >= max_attempts:
        return _terminal(run, failure, f"{detail}; no attempts left", now, "exhausted")

    delay = backoff_seconds(policy, current)
    retry_after = now + timedelta(seconds=delay)
    next_attempt = current + 1
    message = bound_message(f"{detail}; attempt {next_attempt} after {delay:g}s")
    conditions = run_conditions(
        run,
        RunConditionType.RUNNING,
        False,
        reason=Reason.RETRY_BACKOFF,
        message=message,
        now=now,
        ready_reason=failure.reason,
    )
    patch: StatusPatch = {
        "attempt": next_attempt,
        "reason": failure.reason.value,
        "message": message,
        "retryAfter": format_time(retry_after),
        "outputs": None,
        "completionTime": None,
    }
    if reentry is Reentry.IN_PLACE:
        patch["phase"] = Phase.RUNNING.value
    else:
        patch["phase"] = Phase.PENDING.value
        patch["assignedPod"] = None
        patch["assignedPodUID"] = None
        conditions = set_condition(
            conditions,
            RunConditionType.SCHEDULED,
            False,
            reason=Reason.REQUEUED,
            message=message,
            now=now,
        )
    patch["conditions"] = wire_conditions(conditions)
    return Retry(patch=patch, attempt=next_attempt, retry_after=retry_after, delay_seconds=delay)


def _terminal(run: Run, failure: Failure, message: str, now: datetime, why: str) -> Terminal:
    message = bound_message(message)
    conditions = run_conditions(
        run, RunConditionType.RUNNING, False, reason=failure.reason, message=message, now=now
    )
    return Terminal(
        patch=ended_patch(Phase.FAILED, failure.reason, message, conditions, now), why=why
    )


def retry_wait_seconds(status: RunStatus, *, now: datetime) -> float:
    """Seconds until a Run in retry backoff may start its next attempt (0 when due or none).

    Args:
        status: the Run's status.
        now: the caller's current time.
    """
    if status.retry_after is None:
        return 0.0
    return max(0.0, (status.retry_after - now).total_seconds())


def resume_patch(run: Run, *, now: datetime) -> StatusPatch:
    """The patch runtimed writes when an in-place retry's backoff has expired (seed 003).

    Removes ``retryAfter`` and sets ``Running=True`` (reason ``Claimed``) for the new attempt;
    a function Run's ``Ready`` stays False with reason ``Registering``. The top-level
    ``reason`` is cleared and ``message`` describes the attempt now running, naming the one
    that failed (``"attempt 2 of 3 running (attempt 1 failed: ExecutionFailed: exit code 3;
    ...)"``): Kubernetes' convention that they describe the current state, not the backoff. The caller must also
    clear its local observation of the previous execution, and must not call Execute in the
    same reconciliation.

    Args:
        run: the Run as read (phase Running, in backoff).
        now: the caller's current time.

    Returns:
        The status merge patch.

    Raises:
        ValueError: the Run is not Running in retry backoff, or the backoff has not expired.
    """
    status = run.status
    if status.phase is not Phase.RUNNING or status.retry_after is None:
        raise ValueError(
            f"Run {run.key} is not in in-place retry backoff (phase {status.phase.value})"
        )
    if status.retry_after > now:
        raise ValueError(f"Run {run.key}: backoff runs until {format_time(status.retry_after)}")
    policy = run.spec.effective_retry_policy
    message = f"attempt {max(1, status.attempt)} of {max(1, policy.max_attempts)} running"
    previous = previous_failure(status)
    if previous is not None:
        message = with_previous_failure(f"{message} (", previous)
    conditions = run_conditions(
        run,
        RunConditionType.RUNNING,
        True,
        reason=Reason.CLAIMED,
        message=message,
        now=now,
        ready_reason=Reason.REGISTERING,
    )
    return {
        "retryAfter": None,
        "reason": None,
        "message": message,
        "conditions": wire_conditions(conditions),
    }
