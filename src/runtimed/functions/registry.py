"""The in-memory map of function registrations on this Pod: Run UID -> registration.

Seed 000, Run Status API: "Opaque Runtime Server registration IDs, ownership-cache entries,
invocation counters, and invocation history do not belong in Run status." The registration
ID therefore lives only here. The function lifecycle (:mod:`runtimed.functions.lifecycle`)
is the only writer; the invoke proxy reads it on the hot path (no Kubernetes call):

* :meth:`FunctionRegistry.accepting` returns the entry when the Run accepts invokes (state
  READY): the proxy fills ``registration_id`` from it and calls the local Runtime Server;
* any other state (REGISTERING, UNAVAILABLE, TERMINATING) or no entry means "not ready
  here": answer 503 (seed 000, Runtime Gateway).

Cleanup marks an entry TERMINATING *before* it unregisters (seed 000, Cleanup and
Finalization, step 1 "stop accepting new invokes"), so no invoke is admitted once cleanup
started. The registry is rebuilt after a restart from the Run objects (re-adoption).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import NewType

__all__ = ["EntryState", "FunctionRegistry", "RegistrationID", "RegistryEntry", "RunUID"]

RunUID = NewType("RunUID", str)
RegistrationID = NewType("RegistrationID", str)


class EntryState(StrEnum):
    """Local readiness of one function Run on this Pod."""

    REGISTERING = "Registering"
    """Source preparation or RegisterFunction in progress: invokes get 503."""
    READY = "Ready"
    """Registered: invokes are admitted with :attr:`RegistryEntry.registration_id`."""
    UNAVAILABLE = "Unavailable"
    """The registration failed or was lost; recovery pending: invokes get 503."""
    TERMINATING = "Terminating"
    """Cleanup started (cancel, delete, timeout): no new invokes, ever."""


@dataclass(frozen=True, slots=True)
class RegistryEntry:
    """One function Run registered (or being registered) on this Pod.

    Attributes:
        run_uid: the Run UID (the stable registration identity).
        key: ``namespace/name`` of the Run.
        attempt: the registration attempt (``status.attempt``) of :attr:`registration_id`.
        registration_id: the Runtime Server's opaque ID, or ``None`` before registration.
        state: local readiness.
        digest: the registration digest sent with :attr:`attempt`.
    """

    run_uid: RunUID
    key: str
    attempt: int
    registration_id: RegistrationID | None
    state: EntryState
    digest: str = ""

    @property
    def accepts_invokes(self) -> bool:
        """True only in READY with a registration ID."""
        return self.state is EntryState.READY and self.registration_id is not None


class FunctionRegistry:
    """Run UID -> :class:`RegistryEntry` (entries are immutable; updates replace them).

    Args:
        on_change: called with the Run UID after every change (metrics, tests); must not block.
    """

    def __init__(self, *, on_change: Callable[[RunUID], None] | None = None) -> None:
        self._entries: dict[RunUID, RegistryEntry] = {}
        self._on_change = on_change

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[RegistryEntry]:
        return iter(list(self._entries.values()))

    def get(self, run_uid: str) -> RegistryEntry | None:
        """The entry of ``run_uid``, or ``None``."""
        return self._entries.get(RunUID(run_uid))

    def accepting(self, run_uid: str) -> RegistryEntry | None:
        """The entry when Run ``run_uid`` accepts invokes here (the proxy's question), else None."""
        entry = self._entries.get(RunUID(run_uid))
        return entry if entry is not None and entry.accepts_invokes else None

    def count(self, state: EntryState) -> int:
        """Entries in ``state``."""
        return sum(1 for entry in self._entries.values() if entry.state is state)

    def _put(self, entry: RegistryEntry) -> RegistryEntry:
        self._entries[entry.run_uid] = entry
        if self._on_change is not None:
            self._on_change(entry.run_uid)
        return entry

    def registering(self, run_uid: str, *, key: str, attempt: int, digest: str) -> RegistryEntry:
        """Record that ``attempt`` is being registered (keeps a known ID of that attempt).

        Raises:
            ValueError: ``attempt`` < 1, or the entry is TERMINATING (cleanup never reverts).
        """
        if attempt < 1:
            raise ValueError(f"registration attempt must be >= 1, got {attempt}")
        old = self._entries.get(RunUID(run_uid))
        if old is not None and old.state is EntryState.TERMINATING:
            raise ValueError(f"Run {run_uid} is terminating; it cannot register again")
        keep = old.registration_id if old is not None and old.attempt == attempt else None
        return self._put(
            RegistryEntry(RunUID(run_uid), key, attempt, keep, EntryState.REGISTERING, digest)
        )

    def ready(self, run_uid: str, *, attempt: int, registration_id: str) -> RegistryEntry:
        """Record a successful RegisterFunction of ``attempt``: invokes are admitted.

        Raises:
            KeyError: no entry (call :meth:`registering` first).
            ValueError: the entry is for another attempt, is TERMINATING, or the ID is empty.
        """
        old = self._entries[RunUID(run_uid)]
        if not registration_id:
            raise ValueError("registration_id must not be empty")
        if old.attempt != attempt:
            raise ValueError(f"Run {run_uid}: entry is for attempt {old.attempt}, not {attempt}")
        if old.state is EntryState.TERMINATING:
            raise ValueError(f"Run {run_uid} is terminating; it cannot become ready")
        return self._put(
            replace(old, registration_id=RegistrationID(registration_id), state=EntryState.READY)
        )

    def unavailable(self, run_uid: str) -> RegistryEntry | None:
        """Stop admitting invokes because the registration failed or was lost.

        A TERMINATING entry stays TERMINATING. Returns the entry, or ``None`` when absent.
        """
        old = self._entries.get(RunUID(run_uid))
        if old is None or old.state in (EntryState.TERMINATING, EntryState.UNAVAILABLE):
            return old
        return self._put(replace(old, state=EntryState.UNAVAILABLE))

    def terminating(
        self, run_uid: str, *, key: str, attempt: int, digest: str = ""
    ) -> RegistryEntry:
        """Stop admitting invokes for good (cleanup step 1); creates the entry if absent."""
        old = self._entries.get(RunUID(run_uid))
        if old is None:
            return self._put(
                RegistryEntry(RunUID(run_uid), key, attempt, None, EntryState.TERMINATING, digest)
            )
        if old.state is EntryState.TERMINATING:
            return old
        return self._put(replace(old, state=EntryState.TERMINATING))

    def remove(self, run_uid: str) -> RegistryEntry | None:
        """Forget Run ``run_uid`` (after cleanup); returns the removed entry."""
        entry = self._entries.pop(RunUID(run_uid), None)
        if entry is not None and self._on_change is not None:
            self._on_change(entry.run_uid)
        return entry
