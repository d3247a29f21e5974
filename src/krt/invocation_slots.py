"""One in-flight invocation per function Run, and the wait for a cancelled one to let go.

Used by runtimed (the owner's slot: :meth:`InvocationSlots.claim`; invocations it forwards:
:meth:`InvocationSlots.passage`) and by the gateway (every invocation it dispatches is a
passage keyed by its :class:`~krt.api.endpoint.FunctionEndpointRef`: its reset must reach
runtimed before a later invocation of the same Run). Seed 000, Capacity.

Seed 000: "runtimed and the Runtime Server allow one in-flight invocation per function Run
and reject an overlapping request with 429"; "no unbounded server-side queue". Issue 8: "a
client that disconnects mid-invocation frees the slot (the next invoke succeeds at once)".

The two rules meet when the caller's ``RST_STREAM`` and the next invoke arrive together
(one read from the socket, as on a loaded machine): the connection's read loop cancels the
old call (its cancel scope: :func:`krt.grpc.unary_server.current_call_scope`) and starts the
new one in the same pass, and trio may run the new call's task before the old one unwinds
and leaves its ``async with`` block. So a holder is recorded with its call's cancel scope,
and a claim that finds the slot taken looks at it:

* the holder's call is live: :class:`Busy` at once (a genuine overlap, HTTP 429, no queue);
* the holder's call was cancelled (stream reset, connection gone, deadline): the holder is
  unwinding and lets go within a scheduler pass or two, so the claim waits for that release
  (at most :data:`RELEASE_WAIT_SECONDS`), then takes the slot.

The cancellation is recorded synchronously when the reset is read, before any later frame
of the connection is processed, so on one connection a reset followed by a new request is
always admitted, whatever order trio runs the two tasks in.

:meth:`InvocationSlots.passage` is the same wait without the exclusion, for invocations this
runtimed forwards to the owner, and for every invocation the gateway dispatches: a call
that is being cancelled sends its ``RST_STREAM`` upstream when it unwinds, and a later call
of the same Run must not overtake it on the shared HTTP/2 connection (the owner would see two
invocations and answer 429). What a passage cannot order: a disconnect not yet read when the
next request arrives, or calls through another gateway replica or upstream connection; those
are ordered only by arrival at the owner, whose claim waits for a reset call to let go.
"""

from __future__ import annotations

from collections.abc import Hashable
from types import TracebackType
from typing import Final

import trio

__all__ = ["RELEASE_WAIT_SECONDS", "Busy", "InvocationSlots"]

#: Longest wait for a cancelled holder to let go of its slot (seconds).
RELEASE_WAIT_SECONDS: Final = 1.0


class Busy(Exception):
    """An invocation of this Run is already in flight (gRPC RESOURCE_EXHAUSTED, HTTP 429)."""


class _Holder:
    """One invocation inside a :meth:`InvocationSlots.claim` or ``passage`` block."""

    __slots__ = ("call", "exclusive", "released", "run_uid", "slots")

    def __init__(
        self,
        slots: InvocationSlots,
        run_uid: Hashable,
        call: trio.CancelScope | None,
        *,
        exclusive: bool,
    ) -> None:
        self.slots = slots
        self.run_uid = run_uid
        self.call = call
        self.exclusive = exclusive
        #: created only when someone waits for this holder (keeps the common path cheap)
        self.released: trio.Event | None = None

    @property
    def cancelling(self) -> bool:
        """Whether this holder's call was cancelled (it is unwinding)."""
        return self.call is not None and self.call.cancel_called

    async def __aenter__(self) -> None:
        await self.slots._enter(self)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.slots._leave(self)


class InvocationSlots:
    """The Run UIDs with an invocation in flight through this runtimed.

    Args:
        release_wait_seconds: longest wait for a cancelled holder's release (seconds).
    """

    def __init__(self, *, release_wait_seconds: float = RELEASE_WAIT_SECONDS) -> None:
        self._holders: dict[Hashable, list[_Holder]] = {}
        self._release_wait = release_wait_seconds

    def __contains__(self, run_uid: object) -> bool:
        """Whether Run ``run_uid`` has a claimed slot (a local invocation in flight)."""
        holders = self._holders.get(run_uid) if isinstance(run_uid, Hashable) else None
        return holders is not None and any(holder.exclusive for holder in holders)

    def __len__(self) -> int:
        return sum(
            1 for holders in self._holders.values() if any(holder.exclusive for holder in holders)
        )

    def holders(self) -> int:
        """Invocations inside a ``claim`` or ``passage`` block now, of every Run."""
        return sum(len(holders) for holders in self._holders.values())

    def claim(self, run_uid: Hashable, *, call: trio.CancelScope | None = None) -> _Holder:
        """Hold Run ``run_uid``'s slot for an ``async with`` block (a local invocation).

        Args:
            run_uid: the Run.
            call: the cancel scope of the gRPC call this invocation serves
                (:func:`krt.grpc.unary_server.current_call_scope`); ``None`` counts as a
                call that is never cancelled.

        Raises:
            Busy: (on entering) an invocation of the Run is in flight and its call was not
                cancelled, or a cancelled one did not let go within ``release_wait_seconds``.
        """
        return _Holder(self, run_uid, call, exclusive=True)

    def passage(self, run_uid: Hashable, *, call: trio.CancelScope | None = None) -> _Holder:
        """Mark a forwarded invocation of Run ``run_uid`` for an ``async with`` block.

        Entering waits (at most ``release_wait_seconds``) while an invocation of the Run
        through this runtimed is being cancelled, then enters even if one is live (the owner
        decides). Never raises :class:`Busy`.

        Args:
            run_uid: the Run.
            call: as for :meth:`claim`.
        """
        return _Holder(self, run_uid, call, exclusive=False)

    async def _enter(self, holder: _Holder) -> None:
        holders = self._holders.get(holder.run_uid)
        if holders:
            await self._wait_for_cancelled(holder, holders)
        self._holders.setdefault(holder.run_uid, []).append(holder)

    async def _wait_for_cancelled(self, holder: _Holder, holders: list[_Holder]) -> None:
        deadline = trio.current_time() + self._release_wait
        while holders:
            live = [other for other in holders if not other.cancelling]
            if holder.exclusive and any(other.exclusive for other in live):
                raise Busy(f"an invocation of Run {holder.run_uid} is already in flight")
            unwinding = next((other for other in holders if other.cancelling), None)
            if unwinding is None:
                return
            if unwinding.released is None:
                unwinding.released = trio.Event()
            with trio.move_on_at(deadline):
                await unwinding.released.wait()
            if trio.current_time() >= deadline and unwinding in holders:
                if holder.exclusive:
                    raise Busy(
                        f"an invocation of Run {holder.run_uid} is still being cancelled after"
                        f" {self._release_wait:g} s"
                    )
                return
            holders = self._holders.get(holder.run_uid, [])

    def _leave(self, holder: _Holder) -> None:
        holders = self._holders.get(holder.run_uid)
        if holders is not None:
            if len(holders) == 1 and holders[0] is holder:
                del self._holders[holder.run_uid]
            elif holder in holders:
                holders.remove(holder)
        if holder.released is not None:
            holder.released.set()
