"""The spec's promises under failure, as pure checks over what a scenario recorded.

Inputs are the client's :class:`~.workload.InvokeRecord` list, the watch's
:class:`~.timeline.Observation` history per Run, and the task execution ledger. Each check
returns the violations (empty when the promise held) so a scenario can print its figures
and assert on all of them at once.

* :func:`fenced_answers` (seed 000, Ownership Epoch and Fencing): an invocation answered by
  a Pod whose assignment of the Run had already ended before the request was sent. The watch
  lags, so "the watch showed the assignment move away before the request was sent" proves
  the move happened before it too; an answer is excused when the Run was assigned to that
  Pod again before the answer arrived (a new attempt on the same Pod).
* :func:`undocumented_statuses` (seed 000/002 error codes): a response whose status is not
  200 or one of :data:`DOCUMENTED_CODES`.
* :func:`duplicate_executions` (seed 003, at-least-once): a task that executed again
  without its earlier execution having been lost. An execution counts as lost when the Run
  was retried with a failure reason (the suite's tasks never fail by themselves, so every
  retry follows a loss), or when the ledger shows it running on a Pod whose Runtime Server
  a fault killed, or which a fault deleted, after it started.
* :func:`unanswered`: a request without any answer past the gateway's deadline.
* :func:`stuck_runs`: a task not terminal, or a function not Ready, once the scenario's
  recovery bound has passed.
* :func:`recovery_times`: per function Run, seconds from the fault until invokes succeed
  again for good (the first 200 after its last failure).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from krt.api.retry import FailureReason

from .timeline import Observation
from .workload import Execution, InvokeRecord

#: Every status the invoke contract documents (seed 000, seed 002, docs/gateway.md).
DOCUMENTED_CODES = frozenset({200, 400, 401, 403, 404, 413, 415, 429, 500, 502, 503, 504})
FAILURE_REASONS = frozenset(str(r) for r in FailureReason)
TERMINAL_PHASES = frozenset({"Succeeded", "Failed", "Timeout", "Cancelled"})


@dataclass(frozen=True)
class Loss:
    """A fault that destroyed every execution running on a Pod at ``at`` (unix seconds)."""

    pod_uid: str
    at: float


@dataclass(frozen=True)
class Duplicate:
    """A task Run that executed more than once.

    Attributes:
        run: its name. executions: ledger count. attempts: highest ``status.attempt`` seen.
        reasons: failure reasons seen on it (why it was retried).
        lost: executions but the last that a fault destroyed while they ran (on a Pod
            whose Runtime Server was killed or which was deleted after they started).
    """

    run: str
    executions: int
    attempts: int
    reasons: tuple[str, ...]
    lost: int = 0

    @property
    def recorded(self) -> int:
        """Lost executions the Run's status records (retries with a failure reason)."""
        return self.attempts - 1 if self.reasons else 0

    @property
    def justified(self) -> bool:
        """Every execution but the last was lost: recorded as a retry, or destroyed by a fault."""
        return self.executions - 1 <= max(self.recorded, self.lost)

    @property
    def unrecorded(self) -> bool:
        """Re-executed after a loss that the status does not show (no new attempt)."""
        return self.executions - 1 > self.recorded


def fenced_answers(
    records: Iterable[InvokeRecord], history: Mapping[str, Sequence[Observation]]
) -> list[str]:
    """200 answers from an owner whose assignment had ended before the request was sent.

    A 200 that does not say who served it is a violation too (it cannot be checked).
    """
    violations = []
    for record in records:
        if record.status != 200:
            continue
        if not record.pod_uid:
            violations.append(f"{record.run}: a 200 without an owner ({record.body[:80]!r})")
            continue
        ended = _assignment_ended_at(history.get(record.run, ()), record.pod_uid, record.sent)
        if ended is None:
            continue
        again = any(
            o.pod_uid == record.pod_uid and ended < o.at <= record.answered
            for o in history.get(record.run, ())
        )
        if not again:
            violations.append(
                f"{record.run}: answered by Pod {record.pod} ({record.pod_uid}) at "
                f"{record.answered:.2f}, its assignment ended by {ended:.2f} "
                f"(request sent {record.sent:.2f})"
            )
    return violations


def _assignment_ended_at(
    observations: Sequence[Observation], pod_uid: str, before: float
) -> float | None:
    """When the watch saw the Run leave ``pod_uid`` for good before ``before`` (or None)."""
    held = False
    ended: float | None = None
    for o in observations:
        if o.at >= before:
            break
        if o.pod_uid == pod_uid and not o.deleted:
            held, ended = True, None
        elif held and ended is None:
            ended = o.at
    return ended


def undocumented_statuses(records: Iterable[InvokeRecord]) -> Counter[int]:
    """Status -> count of HTTP answers whose status is not documented."""
    return Counter(r.status for r in records if r.status and r.status not in DOCUMENTED_CODES)


def unanswered(records: Iterable[InvokeRecord]) -> list[InvokeRecord]:
    """Requests the gateway accepted but never answered within its own deadline.

    The client asks for an invocation timeout and waits that long plus a margin; the
    gateway answers 504 when the timeout expires (seed 002: every invocation is bounded), so
    a longer silence means an invocation that hangs. A refused or reset connection (the
    gateway restarting) is not counted: it has an answer, just not an HTTP one.
    """
    return [r for r in records if r.error == "timeout"]


def status_counts(records: Iterable[InvokeRecord]) -> Counter[str]:
    """``200``, ``503``, ... and ``transport:<error>`` -> count."""
    return Counter(str(r.status) if r.status else f"transport:{r.error}" for r in records)


def duplicate_executions(
    executions: Mapping[str, Sequence[Execution]],
    history: Mapping[str, Sequence[Observation]],
    losses: Sequence[Loss] = (),
) -> list[Duplicate]:
    """Every task Run that executed more than once, with the evidence of lost executions."""
    duplicates = []
    for run, runs in sorted(executions.items()):
        if len(runs) <= 1:
            continue
        seen = history.get(run, ())
        attempts = max((o.attempt for o in seen), default=0)
        reasons = sorted(
            {o.reason for o in seen if o.reason in FAILURE_REASONS}
            | {r for o in seen for r in o.condition_reasons if r in FAILURE_REASONS}
        )
        ordered = sorted(runs, key=lambda e: e.started)
        lost = sum(
            1
            for e in ordered[:-1]
            if any(loss.pod_uid == e.pod_uid and loss.at >= e.started for loss in losses)
        )
        duplicates.append(Duplicate(run, len(runs), attempts, tuple(reasons), lost))
    return duplicates


def stuck_runs(latest: Mapping[str, Observation | None], kinds: Mapping[str, str]) -> list[str]:
    """Tasks not terminal and functions not Ready (call once the recovery bound passed)."""
    stuck = []
    for run, seen in sorted(latest.items()):
        phase = seen.phase if seen else "(never observed)"
        if kinds.get(run) == "task" and phase not in TERMINAL_PHASES:
            stuck.append(f"task {run} is {phase}")
        if kinds.get(run) == "function" and phase != "Ready":
            stuck.append(f"function {run} is {phase} ({seen.reason if seen else ''})")
    return stuck


def recovery_times(
    records: Iterable[InvokeRecord], runs: Iterable[str], fault_at: float
) -> dict[str, float | None]:
    """Run -> seconds from ``fault_at`` to its first 200 after its last failure.

    0.0 when no invoke of the Run failed after the fault; None when it never answered 200
    after its last failure (not recovered).
    """
    by_run: dict[str, list[InvokeRecord]] = {run: [] for run in runs}
    for record in records:
        if record.run in by_run and record.sent >= fault_at:
            by_run[record.run].append(record)
    result: dict[str, float | None] = {}
    for run, seen in by_run.items():
        seen.sort(key=lambda r: r.answered)
        last_failure = max((i for i, r in enumerate(seen) if r.status != 200), default=None)
        if last_failure is None:
            result[run] = 0.0
            continue
        after = [r for r in seen[last_failure + 1 :] if r.status == 200]
        result[run] = after[0].answered - fault_at if after else None
    return result


def longest_pending(history: Mapping[str, Sequence[Observation]], runs: Iterable[str]) -> float:
    """Seconds the slowest of ``runs`` waited from its first sighting to leaving Pending."""
    longest = 0.0
    for run in runs:
        seen = history.get(run, ())
        if not seen:
            continue
        placed = next((o.at for o in seen if o.phase not in ("", "Pending")), None)
        if placed is not None:
            longest = max(longest, placed - seen[0].at)
    return longest
