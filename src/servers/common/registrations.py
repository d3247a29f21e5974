"""The registration table: every FunctionRuntime rule of seed 002 as a pure state machine.

No I/O and no trio here: the table decides, the trio layer (:mod:`servers.common.functions`)
starts and stops workers. Rules (seed 002, "Registration and Status Semantics", "Invocation
Semantics", "Unregistration"):

* one current registration per Run UID; an opaque ``registration_id`` names one generation;
* the same (Run UID, attempt, digest) resumes the current registration (idempotent);
* the same attempt with a different digest is ALREADY_EXISTS and changes nothing;
* a higher attempt supersedes: the old ID becomes stale; a lower attempt is
  FAILED_PRECONDITION;
* a stale ID is FAILED_PRECONDITION on status, invoke and unregister and never touches the
  newer registration; an unknown Run UID is NOT_FOUND (unregister: success);
* invoke needs READY; one in-flight invocation, an overlapping one is RESOURCE_EXHAUSTED;
  DRAINING rejects new invocations;
* ``last_activity_unix_nano`` is set at READY and at every invocation start and end, read
  from one injectable wall clock.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import NewType

from servers.common.errors import (
    already_exists,
    failed_precondition,
    not_found,
    resource_exhausted,
)
from servers.common.validation import bound_text

RunUID = NewType("RunUID", str)
RegistrationID = NewType("RegistrationID", str)

#: a wall clock returning nanoseconds since the epoch (default ``time.time_ns``).
WallClock = Callable[[], int]


class RegistrationState(enum.IntEnum):
    """Local registration states; values equal ``FunctionRegistrationState`` in the proto."""

    REGISTERING = 1
    READY = 2
    DRAINING = 3
    FAILED = 4


@dataclass(frozen=True)
class RegistrationSpec:
    """The validated inputs of one RegisterFunction call.

    Attributes:
        run_uid: the Run UID (never its name).
        attempt: one-based registration attempt.
        digest: the registration digest (idempotency check).
        working_dir: resolved, existing directory under the server's work dir.
        handler: the language-specific handler string.
        env: exactly the handler's environment (besides a minimal PATH/HOME).
        idle_timeout_seconds: informational; runtimed enforces idle timeout.
    """

    run_uid: RunUID
    attempt: int
    digest: str
    working_dir: Path
    handler: str
    env: Mapping[str, str] = field(default_factory=dict)
    idle_timeout_seconds: int = 0


@dataclass
class Registration:
    """One registration generation, as the table sees it (mutated only by the table)."""

    spec: RegistrationSpec
    registration_id: RegistrationID
    state: RegistrationState = RegistrationState.REGISTERING
    in_flight: int = 0
    last_activity_unix_nano: int = 0
    fatal_error: str = ""
    invocation_id: str | None = None

    @property
    def run_uid(self) -> RunUID:
        """The Run UID this registration belongs to."""
        return self.spec.run_uid


class RegisterOutcome(enum.Enum):
    """What :meth:`RegistrationTable.register` decided."""

    #: a new registration was created in REGISTERING: the caller must start its worker.
    CREATED = "created"
    #: the same registration already exists: return it without reinitialising.
    EXISTING = "existing"


@dataclass(frozen=True)
class RegisterDecision:
    """Result of :meth:`RegistrationTable.register`.

    Attributes:
        outcome: created or existing.
        registration: the current registration for the Run UID.
        superseded: the older registration this call replaced (its worker must be stopped
            and its in-flight invocation cancelled), or None.
    """

    outcome: RegisterOutcome
    registration: Registration
    superseded: Registration | None = None


@dataclass
class _RunEntry:
    current: Registration
    stale_ids: set[RegistrationID] = field(default_factory=set)


class RegistrationTable:
    """All local registrations of one Runtime Server, keyed by Run UID.

    Args:
        clock: wall clock in nanoseconds for ``last_activity_unix_nano``.
    """

    def __init__(self, *, clock: WallClock = time.time_ns) -> None:
        self._clock = clock
        self._runs: dict[RunUID, _RunEntry] = {}
        self._by_id: dict[RegistrationID, RunUID] = {}

    def __len__(self) -> int:
        return len(self._runs)

    def registrations(self) -> list[Registration]:
        """Return the current registration of every Run UID."""
        return [entry.current for entry in self._runs.values()]

    # -- registration ---------------------------------------------------------------

    def register(self, spec: RegistrationSpec, new_id: RegistrationID) -> RegisterDecision:
        """Decide a RegisterFunction call.

        Args:
            spec: validated request.
            new_id: a fresh opaque ID, used only when a registration is created.

        Returns:
            The decision; on CREATED the registration is REGISTERING.

        Raises:
            ContractError: ALREADY_EXISTS for a different digest on the same attempt;
                FAILED_PRECONDITION for a lower attempt, or when the same registration is
                draining.
        """
        entry = self._runs.get(spec.run_uid)
        if entry is None:
            reg = Registration(spec=spec, registration_id=new_id)
            self._runs[spec.run_uid] = _RunEntry(current=reg)
            self._by_id[new_id] = spec.run_uid
            return RegisterDecision(RegisterOutcome.CREATED, reg)
        current = entry.current
        if spec.attempt < current.spec.attempt:
            raise failed_precondition(
                f"registration_attempt {spec.attempt} of run {spec.run_uid} is older than the"
                f" current attempt {current.spec.attempt}"
            )
        if spec.attempt == current.spec.attempt:
            if spec.digest != current.spec.digest:
                raise already_exists(
                    f"run {spec.run_uid} attempt {spec.attempt} is already registered with a"
                    " different registration_digest"
                )
            if current.state is RegistrationState.DRAINING:
                raise failed_precondition(
                    f"registration {current.registration_id} of run {spec.run_uid} is draining"
                )
            return RegisterDecision(RegisterOutcome.EXISTING, current)
        reg = Registration(spec=spec, registration_id=new_id)
        entry.stale_ids.add(current.registration_id)
        del self._by_id[current.registration_id]
        entry.current = reg
        self._by_id[new_id] = spec.run_uid
        return RegisterDecision(RegisterOutcome.CREATED, reg, superseded=current)

    def mark_ready(self, registration_id: RegistrationID) -> Registration | None:
        """Move a REGISTERING registration to READY and stamp its activity.

        Returns:
            The registration, or None if it was superseded or removed meanwhile.
        """
        reg = self._current_by_id(registration_id)
        if reg is None or reg.state is not RegistrationState.REGISTERING:
            return None
        reg.state = RegistrationState.READY
        reg.last_activity_unix_nano = self._clock()
        return reg

    def mark_failed(self, registration_id: RegistrationID, fatal_error: str) -> Registration | None:
        """Move a current registration to FAILED with a bounded ``fatal_error``.

        A DRAINING registration stays DRAINING (it is being removed anyway).

        Returns:
            The registration, or None if it is no longer current.
        """
        reg = self._current_by_id(registration_id)
        if reg is None:
            return None
        reg.fatal_error = bound_text(fatal_error)
        if reg.state is not RegistrationState.DRAINING:
            reg.state = RegistrationState.FAILED
        return reg

    # -- lookups --------------------------------------------------------------------

    def resolve(self, run_uid: str, registration_id: str) -> Registration:
        """Return the current registration named by a FunctionRegistration reference.

        Raises:
            ContractError: NOT_FOUND when no registration has this Run UID;
                FAILED_PRECONDITION when ``registration_id`` is stale or not this Run's.
        """
        entry = self._runs.get(RunUID(run_uid))
        if entry is None:
            raise not_found(f"no registration for run {run_uid}")
        if registration_id != entry.current.registration_id:
            kind = "stale" if registration_id in entry.stale_ids else "unknown"
            raise failed_precondition(
                f"registration_id {registration_id!r} is {kind} for run {run_uid}"
            )
        return entry.current

    def get(self, registration_id: RegistrationID) -> Registration | None:
        """Return the current registration with this ID, or None."""
        return self._current_by_id(registration_id)

    # -- invocations ----------------------------------------------------------------

    def begin_invocation(
        self, run_uid: str, registration_id: str, invocation_id: str
    ) -> Registration:
        """Admit one invocation: READY and nothing in flight.

        Raises:
            ContractError: NOT_FOUND / FAILED_PRECONDITION as :meth:`resolve`;
                FAILED_PRECONDITION when not READY (registering, draining, failed);
                RESOURCE_EXHAUSTED when an invocation is already in flight.
        """
        reg = self.resolve(run_uid, registration_id)
        if reg.state is not RegistrationState.READY:
            raise failed_precondition(
                f"registration {reg.registration_id} of run {run_uid} is {reg.state.name},"
                " not READY"
            )
        if reg.in_flight:
            raise resource_exhausted(
                f"run {run_uid} already has an invocation in flight ({reg.invocation_id});"
                " v0.x allows one and does not queue"
            )
        reg.in_flight = 1
        reg.invocation_id = invocation_id
        reg.last_activity_unix_nano = self._clock()
        return reg

    def end_invocation(self, registration_id: RegistrationID) -> None:
        """Record the end of the in-flight invocation (success, error, timeout or cancel).

        Works on superseded registrations too (their end is simply forgotten).
        """
        reg = self._current_by_id(registration_id)
        if reg is None:
            return
        reg.in_flight = 0
        reg.invocation_id = None
        reg.last_activity_unix_nano = self._clock()

    # -- unregistration -------------------------------------------------------------

    def begin_unregister(self, run_uid: str, registration_id: str) -> Registration | None:
        """Move the named registration to DRAINING so it admits no new invocation.

        Returns:
            The registration, or None when no registration has this Run UID (unregistering
            an absent registration succeeds).

        Raises:
            ContractError: FAILED_PRECONDITION when ``registration_id`` is stale.
        """
        entry = self._runs.get(RunUID(run_uid))
        if entry is None:
            return None
        reg = self.resolve(run_uid, registration_id)
        reg.state = RegistrationState.DRAINING
        return reg

    def remove(self, registration_id: RegistrationID) -> bool:
        """Forget the Run UID whose current registration has this ID.

        Returns:
            True when removed; False when it was already gone or superseded.
        """
        reg = self._current_by_id(registration_id)
        if reg is None:
            return False
        del self._runs[reg.run_uid]
        del self._by_id[registration_id]
        return True

    def _current_by_id(self, registration_id: RegistrationID) -> Registration | None:
        run_uid = self._by_id.get(registration_id)
        return None if run_uid is None else self._runs[run_uid].current
