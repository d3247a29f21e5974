"""Admission of claims: at most N Runs between their claim and their start, oldest first.

Issue 6: under a burst every Run assigned to the Pod used to be claimed at once, and all of
them then shared the CPU stage by stage (claim, prepare, Status, Execute, finish), so the
first Run finished only when nearly the whole burst did. The window lets at most ``size``
Runs be between their claim and the answer to their ``Execute`` (the CPU-heavy part of a
start); a Run that would claim while the window is full is *parked* and reconciled again,
oldest first, when a place frees. Runs already started are never held back: a running
execution (however long) holds no place, so the Runtime's capacity is unaffected.

The claim order is FIFO: while Runs are parked, a place goes to the oldest parked Run, not
to whichever Run happens to be reconciled next. A parked Run whose next reconciliation does
not ask for a place (it was deleted, cancelled, reassigned) is dropped from the line and
the next one is woken, so the line never stalls behind a Run that no longer claims.

Pure bookkeeping (no I/O, no clock); ``wake(key)`` re-queues a Run key.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import islice

__all__ = ["StartWindow"]


class StartWindow:
    """At most ``size`` Runs between claim and start; later claims wait in FIFO order.

    Args:
        size: places (>= 1).
        wake: called with a parked Run's key when it may try again (the work queue's
            ``add``: idempotent).

    Raises:
        ValueError: ``size`` < 1.
    """

    def __init__(self, size: int, wake: Callable[[str], None]) -> None:
        if size < 1:
            raise ValueError(f"start window size must be at least 1, got {size}")
        self.size = size
        self._wake = wake
        #: Run UID -> key of the Runs holding a place.
        self._holders: dict[str, str] = {}
        #: keys waiting for a place, oldest first
        self._parked: dict[str, None] = {}
        #: keys that asked for a place in their current reconciliation
        self._asked: set[str] = set()

    @property
    def holders(self) -> int:
        """Runs holding a place."""
        return len(self._holders)

    @property
    def parked(self) -> list[str]:
        """Keys waiting for a place, oldest first."""
        return list(self._parked)

    def try_enter(self, key: str, uid: str) -> bool:
        """Take a place for Run ``uid`` (key ``key``) if one is free and it is its turn.

        Returns:
            True: claim now (call :meth:`leave` once the start has answered or the Run is
            let go). False: the key is parked and will be woken.
        """
        self._asked.add(key)
        if uid in self._holders:
            return True
        free = self.size - len(self._holders)
        if free > 0 and (not self._parked or key in islice(self._parked, free)):
            self._parked.pop(key, None)
            self._holders[uid] = key
            self._wake_turns()
            return True
        self._parked.setdefault(key, None)
        self._wake_turns()
        return False

    def leave(self, uid: str) -> None:
        """Give back Run ``uid``'s place (no-op when it holds none); wake the next in line."""
        if self._holders.pop(uid, None) is not None:
            self._wake_turns()

    def settle(self, key: str) -> None:
        """End of a reconciliation of ``key``: a parked key that did not ask leaves the line."""
        if key not in self._asked and self._parked.pop(key, 0) is None:
            self._wake_turns()
        self._asked.discard(key)

    def _wake_turns(self) -> None:
        """Wake the parked keys whose turn it is (as many as there are free places)."""
        free = self.size - len(self._holders)
        for key in islice(self._parked, max(0, free)):
            self._wake(key)
