"""Invocations in flight through this gateway, per Run, and which are being cancelled.

Issue 8: "a client that disconnects mid-invocation frees the slot (the next invoke succeeds
at once)". When a client disconnects, hypercorn's disconnect callback
(:mod:`gateway.disconnects`) cancels the invocation's cancel scope at once, but the
``RST_STREAM`` that tells runtimed is written only when the cancelled request task next
runs. An invoke of the same Run dispatched before that (its request was read in the same
pass of the event loop, as happens on a loaded machine; trio runs the tasks of one pass in
either order) would reach the owner ahead of the reset and get 429, the slot still held.

So every dispatched invocation is recorded here with the cancel scope of its upstream call,
and before an invoke is forwarded, :meth:`InFlightInvocations.wait_for_cancellations` waits
(at most :data:`SETTLE_SECONDS`) until no invocation of the same Run whose scope was
cancelled is still unwinding. The unwinding request queues its ``RST_STREAM`` on the shared
HTTP/2 connection before it leaves this record, and frames on one connection stay in order,
so the owner reads the reset before the new request. A live invocation of the Run is not
waited for: a genuine overlap is forwarded at once and runtimed answers 429 (seed 000, no
queue).

What this cannot order: a disconnect the gateway has not read yet when the next request
arrives (the new request's bytes processed before the old connection's end of stream), an
invocation sent by another gateway replica, or one on another upstream connection. Those
are ordered only by arrival at the owner, whose slot waits for a reset call to let go
(:mod:`runtimed.dataplane.slots`).
"""

from __future__ import annotations

from typing import Final

import trio

from krt.api.endpoint import FunctionEndpointRef

__all__ = ["SETTLE_SECONDS", "InFlightInvocations", "InvocationEntry"]

#: Longest wait for the cancellation of an abandoned invocation of the same Run (seconds).
SETTLE_SECONDS: Final = 1.0


class InvocationEntry:
    """One dispatched invocation: its Run, its upstream call's cancel scope."""

    __slots__ = ("left", "ref", "scope")

    def __init__(self, ref: FunctionEndpointRef, scope: trio.CancelScope) -> None:
        self.ref = ref
        self.scope = scope
        #: created only when a later request waits for this one (the common path allocates none)
        self.left: trio.Event | None = None


class InFlightInvocations:
    """The invocations this gateway has dispatched and not finished, by Run.

    Args:
        settle_seconds: longest wait for an abandoned invocation's cancellation (seconds).
    """

    def __init__(self, *, settle_seconds: float = SETTLE_SECONDS) -> None:
        self._entries: dict[FunctionEndpointRef, list[InvocationEntry]] = {}
        self._settle = settle_seconds

    def __len__(self) -> int:
        return sum(len(entries) for entries in self._entries.values())

    def enter(self, ref: FunctionEndpointRef, scope: trio.CancelScope) -> InvocationEntry:
        """Record an invocation of Run ``ref`` whose upstream call runs in ``scope``.

        Args:
            ref: the Run (namespace, Runtime, UID).
            scope: cancelled when the client disconnects (``cancel_called`` then true).

        Returns:
            The entry to pass to :meth:`leave` once the upstream call has unwound.
        """
        entry = InvocationEntry(ref, scope)
        entries = self._entries.get(ref)
        if entries is None:
            self._entries[ref] = [entry]
        else:
            entries.append(entry)
        return entry

    def leave(self, entry: InvocationEntry) -> None:
        """Forget ``entry`` (its call finished or unwound: any reset is queued upstream)."""
        entries = self._entries.get(entry.ref)
        if entries is not None:
            if len(entries) == 1 and entries[0] is entry:
                del self._entries[entry.ref]
            elif entry in entries:
                entries.remove(entry)
        if entry.left is not None:
            entry.left.set()

    def cancelling(self, ref: FunctionEndpointRef) -> InvocationEntry | None:
        """An invocation of Run ``ref`` whose cancellation is still unwinding, if any."""
        entries = self._entries.get(ref)
        if not entries:
            return None
        return next((entry for entry in entries if entry.scope.cancel_called), None)

    async def wait_for_cancellations(self, ref: FunctionEndpointRef) -> None:
        """Wait until no invocation of Run ``ref`` is being cancelled (at most the bound).

        Returns at once (no checkpoint) when none is. After ``settle_seconds`` it returns
        anyway: the request is forwarded and runtimed decides.
        """
        if self.cancelling(ref) is None:
            return
        with trio.move_on_after(self._settle):
            while (entry := self.cancelling(ref)) is not None:
                if entry.left is None:
                    entry.left = trio.Event()
                await entry.left.wait()
