"""A keyed work queue: one sequential reconcile per key, parallel across keys.

Informer handlers call :meth:`WorkQueue.add` (synchronous, never blocks); ``workers`` trio
tasks take keys and call ``reconcile(key)``. The rules are client-go's workqueue, which
every Kubernetes controller relies on:

* a key waiting in the queue is there once, however often it is added (dedup);
* a key is never reconciled by two workers at once: added while being reconciled, it is
  marked dirty and queued again when the running reconcile finishes;
* ``add_after(key, seconds)`` queues later (a timer heap served by one task); the earliest
  request wins, and an ``add`` meanwhile queues at once;
* a reconcile that raises is logged and retried after a per-key exponential backoff
  (jittered); returning :class:`Requeue` asks for a retry explicitly (after ``after``
  seconds, or with the same backoff when ``after`` is None); returning None means done and
  resets that key's backoff.

Idle workers block on a memory channel (no polling). Time is trio time, so tests run on
``autojump_clock``.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

import trio

from krt.kube.backoff import Backoff

__all__ = ["Requeue", "WorkQueue"]

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True, slots=True)
class Requeue:
    """Returned by a reconcile to be called again for the same key.

    Attributes:
        after: seconds to wait; None uses the key's exponential backoff (counts as a
            failure).
    """

    after: float | None = None


class WorkQueue(Generic[K]):
    """Keyed work with deduplication, per-key serialisation, delays and retry backoff.

    Args:
        name: used in log messages.
        base_delay: first retry delay after a failure, seconds.
        max_delay: cap on retry delays, seconds.
    """

    def __init__(self, name: str = "queue", *, base_delay: float = 0.05, max_delay: float = 300.0):
        Backoff(base=base_delay, maximum=max_delay)  # validates the pair up front
        self.name = name
        self._base_delay = base_delay
        self._max_delay = max_delay
        self._send, self._receive = trio.open_memory_channel[K](math.inf)
        self._queued: set[K] = set()
        self._processing: set[K] = set()
        self._failures: dict[K, Backoff] = {}
        self._timers: list[tuple[float, int, K]] = []
        self._due: dict[K, float] = {}
        self._tiebreak = itertools.count()
        self._timer_wakeup = trio.Event()
        #: Reconciles finished, by outcome (for tests and metrics).
        self.done = 0
        self.failed = 0

    def __len__(self) -> int:
        """Keys waiting to be reconciled now (not counting delayed or running ones)."""
        return len(self._queued)

    def add(self, key: K) -> None:
        """Queue ``key`` for reconciliation now (no-op if it is already waiting).

        Safe to call from synchronous code (informer handlers) inside the trio run.
        """
        if key in self._queued:
            return
        self._queued.add(key)
        if key not in self._processing:
            self._send.send_nowait(key)

    def add_after(self, key: K, seconds: float) -> None:
        """Queue ``key`` after ``seconds`` (trio time); <= 0 means now.

        If the key is already due earlier, the earlier time stands.

        Raises:
            ValueError: ``seconds`` is NaN.
        """
        if math.isnan(seconds):
            raise ValueError("add_after: seconds must be a number, got NaN")
        if seconds <= 0:
            self.add(key)
            return
        due = trio.current_time() + seconds
        current = self._due.get(key)
        if current is not None and current <= due:
            return
        self._due[key] = due
        heapq.heappush(self._timers, (due, next(self._tiebreak), key))
        if self._timers[0][2] == key:
            self._timer_wakeup.set()

    def forget(self, key: K) -> None:
        """Reset ``key``'s failure backoff (e.g. after it was deleted)."""
        self._failures.pop(key, None)

    def failures(self, key: K) -> int:
        """How many consecutive failed reconciles ``key`` has had."""
        backoff = self._failures.get(key)
        return backoff.failures if backoff is not None else 0

    def _retry_later(self, key: K) -> None:
        backoff = self._failures.get(key)
        if backoff is None:
            backoff = self._failures[key] = Backoff(base=self._base_delay, maximum=self._max_delay)
        self.add_after(key, backoff.next_delay())

    async def run(
        self,
        reconcile: Callable[[K], Awaitable[Requeue | None]],
        *,
        workers: int,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Run ``workers`` reconcile workers and the delay timer; never returns unless cancelled.

        Args:
            reconcile: ``async (key) -> Requeue | None``; exceptions are logged and retried
                with backoff (``trio.Cancelled`` propagates).
            workers: parallel workers (>= 1).
            task_status: ``started()`` once the workers are running.

        Raises:
            ValueError: ``workers`` < 1.
        """
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._timer_loop)
            for _ in range(workers):
                nursery.start_soon(self._worker, reconcile)
            task_status.started()

    async def _timer_loop(self) -> None:
        while True:
            now = trio.current_time()
            while self._timers and self._timers[0][0] <= now:
                due, _, key = heapq.heappop(self._timers)
                if self._due.get(key) == due:
                    del self._due[key]
                    self.add(key)
            self._timer_wakeup = trio.Event()
            deadline = self._timers[0][0] if self._timers else math.inf
            with trio.move_on_at(deadline):
                await self._timer_wakeup.wait()

    async def _worker(self, reconcile: Callable[[K], Awaitable[Requeue | None]]) -> None:
        async for key in self._receive:
            self._queued.discard(key)
            self._processing.add(key)
            try:
                result = await reconcile(key)
            except Exception:
                self.failed += 1
                log.exception("%s: reconcile of %r failed; retrying with backoff", self.name, key)
                self._retry_later(key)
            else:
                self.done += 1
                if result is None:
                    self._failures.pop(key, None)
                elif result.after is None:
                    self._retry_later(key)
                else:
                    self.add_after(key, result.after)
            finally:
                self._processing.discard(key)
            if key in self._queued:
                self._send.send_nowait(key)
