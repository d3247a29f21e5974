"""Run phases and the one set of helpers every component classifies them with.

Seed 000, Run Status API: "Ready is active and non-terminal. Generic phase helpers, capacity
accounting, stale-pod recovery, cancellation, metrics, CLI waits, TTL cleanup, and completed
Run GC must all classify it explicitly. Only Succeeded, Failed, Timeout, and Cancelled remain
terminal." Each question a component asks about a phase has a named helper here, so no
component writes its own ``phase in (...)`` test and forgets Ready. The transition table is the
Lifecycle State Machine of seeds 000 and 003 plus the reaper's return to Pending.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Final


class Phase(StrEnum):
    """``Run.status.phase``. A Run without a phase is :attr:`PENDING` (see :func:`phase_of`)."""

    PENDING = "Pending"
    SCHEDULED = "Scheduled"
    RUNNING = "Running"
    READY = "Ready"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    TIMEOUT = "Timeout"
    CANCELLED = "Cancelled"


_PHASES: Final[dict[str, Phase]] = {phase.value: phase for phase in Phase}
TERMINAL_PHASES: Final = frozenset({Phase.SUCCEEDED, Phase.FAILED, Phase.TIMEOUT, Phase.CANCELLED})
ACTIVE_PHASES: Final = frozenset({Phase.SCHEDULED, Phase.RUNNING, Phase.READY})
TERMINAL_RUNS_SELECTOR: Final = ",".join(
    f"status.phase!={phase}"
    for phase in ("", *(p.value for p in Phase if p not in TERMINAL_PHASES))
)
"""A field selector matching only terminal Runs (``status.phase`` is a selectable field of the
Run CRD). Field selectors have no set operator, so it excludes every other phase, and the
empty one: a new Run has no status yet. A watch with it sees each Run once, as ADDED, when
the Run ends (and DELETED when a terminal Run is deleted)."""


def phase_of(value: str | None) -> Phase:
    """Read a ``status.phase`` value; absent or empty means Pending (a new Run has no status).

    Args:
        value: the raw phase string, or ``None``.

    Returns:
        The phase.

    Raises:
        ValueError: the string is not one of the eight phases.
    """
    if not value:
        return Phase.PENDING
    phase = _PHASES.get(value) if isinstance(value, str) else None
    if phase is None:
        raise ValueError(
            f"status.phase: unknown phase {value!r} (expected one of {', '.join(Phase)})"
        )
    return phase


def is_terminal(phase: Phase) -> bool:
    """True for Succeeded, Failed, Timeout and Cancelled: the Run will never change phase again.

    Ready is *not* terminal (seed 000).
    """
    return phase in TERMINAL_PHASES


def is_active(phase: Phase) -> bool:
    """True for Scheduled, Running and Ready: the Run is bound to a Runtime Pod and working.

    Ready counts as active (seed 000): a registered function keeps its Pod reservation.
    """
    return phase in ACTIVE_PHASES


def holds_capacity(phase: Phase) -> bool:
    """True when a Run in this phase occupies its ``resources.requests`` on its assigned Pod.

    Seed 000, Capacity and Concurrency: "A Ready function Run continues to consume one unit
    until terminal cleanup or deletion releases it." A Run being deleted keeps its (active)
    phase until runtimed releases it and removes the finalizer, so "deleting but not released"
    is covered by the phase alone. Pending and terminal Runs hold nothing.
    """
    return phase in ACTIVE_PHASES


def needs_stale_recovery_check(phase: Phase) -> bool:
    """True when the stale-Run reaper must check this Run's assignment (its Pod may be lost).

    Every active phase, Ready included, has an assignment that Pod loss can strand.
    """
    return phase in ACTIVE_PHASES


def is_cancellable(phase: Phase) -> bool:
    """True while ``spec.cancelRequested`` still has an effect (any non-terminal phase)."""
    return phase not in TERMINAL_PHASES


def is_gc_eligible(phase: Phase) -> bool:
    """True when completed-Run GC may delete the Run once its TTL passes (terminal phases only).

    A Ready function Run is never garbage-collected: it ends by deletion, cancellation,
    lifetime or idle timeout, and then becomes terminal.
    """
    return phase in TERMINAL_PHASES


def gc_deadline(
    phase: Phase, *, completion_time: datetime | None, ttl_seconds_after_finished: int | None
) -> datetime | None:
    """When completed-Run GC may delete a Run, or ``None`` if it must not (yet).

    Args:
        phase: the Run's phase.
        completion_time: ``status.completionTime``.
        ttl_seconds_after_finished: ``spec.ttlSecondsAfterFinished`` in seconds; ``None``
            keeps the Run forever.

    Returns:
        ``completion_time + ttl`` for a terminal Run with both set; ``None`` for an active or
        Pending Run (Ready included), or when either value is missing.
    """
    if not is_gc_eligible(phase) or completion_time is None or ttl_seconds_after_finished is None:
        return None
    return completion_time + timedelta(seconds=ttl_seconds_after_finished)


class PhaseClass(StrEnum):
    """Coarse lifecycle class of a phase, e.g. for metric labels (``runs{class="active"}``)."""

    PENDING = "pending"
    ACTIVE = "active"
    TERMINAL = "terminal"


def phase_class(phase: Phase) -> PhaseClass:
    """Classify a phase for metrics and summaries: Ready counts as ``active``."""
    if phase in ACTIVE_PHASES:
        return PhaseClass.ACTIVE
    if phase in TERMINAL_PHASES:
        return PhaseClass.TERMINAL
    return PhaseClass.PENDING


class WaitTarget(StrEnum):
    """What a client (``krt run --wait``) waits for."""

    COMPLETION = "completion"
    """A terminal phase. Ready does not end this wait: a function Run is still running."""
    READY = "ready"
    """Ready (a function accepting invokes) or a terminal phase (it will never be Ready)."""


def wait_finished(phase: Phase, target: WaitTarget) -> bool:
    """True when a wait for ``target`` can stop at ``phase``.

    Args:
        phase: the Run's current phase.
        target: what the caller waits for.
    """
    if target is WaitTarget.READY:
        return phase is Phase.READY or phase in TERMINAL_PHASES
    return phase in TERMINAL_PHASES


#: Allowed phase changes (the Lifecycle State Machine). A phase may always stay the same.
#: * Pending -> Scheduled (scheduler binds) or Cancelled (cancel before assignment).
#: * Scheduled -> Running (runtimed claims), Pending (reaper after fencing), any terminal.
#: * Running -> Ready (function registered), Pending (reaper), any terminal.
#: * Ready -> Running (registration recovery in place), Pending (reaper), any terminal.
#: * terminal -> nothing.
TRANSITIONS: Final[Mapping[Phase, frozenset[Phase]]] = {
    Phase.PENDING: frozenset({Phase.SCHEDULED, Phase.CANCELLED}),
    Phase.SCHEDULED: frozenset({Phase.RUNNING, Phase.PENDING}) | TERMINAL_PHASES,
    Phase.RUNNING: frozenset({Phase.READY, Phase.PENDING}) | TERMINAL_PHASES,
    Phase.READY: frozenset({Phase.RUNNING, Phase.PENDING}) | TERMINAL_PHASES,
    Phase.SUCCEEDED: frozenset(),
    Phase.FAILED: frozenset(),
    Phase.TIMEOUT: frozenset(),
    Phase.CANCELLED: frozenset(),
}


def can_transition(old: Phase, new: Phase) -> bool:
    """True when the lifecycle state machine allows ``old -> new`` (or ``old == new``).

    Args:
        old: the phase the writer read.
        new: the phase it wants to write.
    """
    return old == new or new in TRANSITIONS[old]
