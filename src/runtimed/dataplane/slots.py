"""One in-flight invocation per function Run, enforced at the owner (seed 000, Capacity).

Seed 000: "runtimed and the Runtime Server allow one in-flight invocation per function Run
and reject an overlapping request with 429"; "no unbounded server-side queue". A slot is
taken without waiting (:class:`Busy` at once when taken) and freed when the ``with`` block
ends, including by cancellation, so a caller that disconnects frees it immediately.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["Busy", "InvocationSlots"]


class Busy(Exception):
    """An invocation of this Run is already in flight (gRPC RESOURCE_EXHAUSTED, HTTP 429)."""


class InvocationSlots:
    """The set of Run UIDs with an invocation in flight on this Pod."""

    def __init__(self) -> None:
        self._busy: set[str] = set()

    def __contains__(self, run_uid: object) -> bool:
        return run_uid in self._busy

    def __len__(self) -> int:
        return len(self._busy)

    @contextmanager
    def claim(self, run_uid: str) -> Iterator[None]:
        """Hold Run ``run_uid``'s slot for the ``with`` block.

        Raises:
            Busy: the slot is taken (nothing is queued).
        """
        if run_uid in self._busy:
            raise Busy(f"an invocation of Run {run_uid} is already in flight")
        self._busy.add(run_uid)
        try:
            yield
        finally:
            self._busy.discard(run_uid)
