"""Pending Runs the scheduler found unschedulable, waiting for capacity, oldest first.

Issue 6 (control-plane CPU per Run). Releasing capacity on a Runtime used to queue every
Pending Run of that Runtime (oldest first), and every one of them was decided again though
at most a few could fit: O(Pending Runs) per completion, O(n^2) over a burst.

The scheduler parks a Run here when its decision is "stay Pending" and takes it out when
the Run is decided again, bound, deleted or no longer Pending. Runs are grouped by Runtime
(``namespace/runtime``) and, within a group, by *shape* (their effective requests): Runs of
one shape in one group are interchangeable for placement, so when the oldest of a shape
does not fit, none of that shape does. A release then needs only the oldest parked Run of
each shape, one after another while they bind (see
:meth:`krt.controlplane.scheduler_loop.Scheduler.retry_parked`): O(binds + shapes) instead
of O(Pending Runs).

Each entry also keeps the message its "stay Pending" decision wrote, so the scheduler can
tell whether the other Runs of a shape still say what a new decision would say (see
:meth:`ParkedRuns.messages`).

Implementation: one binary heap per (group, shape) with lazy deletion (an item is live
while the dict of parked Runs still holds its Run with the same age; an item is pushed at
most once, so a Run decided again and re-parked does not grow the heap), compacted when
stale items outnumber live ones. Every operation is O(log n) amortized. Not thread-safe
(one trio task owns it). A heap rather than a sorted-list library: the stdlib does it in a
few lines with typed code (``sortedcontainers`` ships no type information).
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

RunKey = tuple[str, str]
"""``(namespace, name)`` of a Run."""

Shape = tuple[tuple[str, int], ...]
"""A Run's effective requests as sorted ``(resource, quantity)`` pairs."""

Age = tuple[bool, datetime | None, int, str]
"""Sort key of a Pending Run: no ``creationTimestamp`` last, then ``creationTimestamp``,
then the order the cache first saw it, then its name (see
:meth:`krt.controlplane.run_index.RunIndex.age`)."""

_HeapId = tuple[str, Shape]


def shape_of(requests: Mapping[str, int]) -> Shape:
    """The :data:`Shape` of a Run's effective requests (resource -> quantity)."""
    return tuple(sorted(requests.items()))


@dataclass(frozen=True, slots=True)
class _Entry:
    heap: _HeapId
    age: Age
    message: str


class ParkedRuns:
    """Parked Runs by Runtime and shape, each in age order (see the module docstring)."""

    def __init__(self) -> None:
        """Create an empty set."""
        self._entries: dict[RunKey, _Entry] = {}
        self._heaps: dict[_HeapId, list[tuple[Age, RunKey]]] = {}
        self._messages: dict[_HeapId, Counter[str]] = {}
        self._shapes: dict[str, dict[Shape, None]] = {}
        #: Every item in a heap, live or stale, so that re-parking never pushes a duplicate.
        self._pushed: set[tuple[_HeapId, Age, RunKey]] = set()

    def __len__(self) -> int:
        """Number of parked Runs."""
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        """Whether the Run ``key`` (``(namespace, name)``) is parked."""
        return key in self._entries

    def holds(self, group: str) -> bool:
        """Whether any Run of ``group`` (``namespace/runtime``) is parked."""
        return group in self._shapes

    def park(self, key: RunKey, *, group: str, shape: Shape, age: Age, message: str) -> None:
        """Park the Run ``key``, or update its entry.

        Args:
            key: ``(namespace, name)``.
            group: its Runtime, ``namespace/runtime``.
            shape: its effective requests (:func:`shape_of`).
            age: its place in line (:data:`Age`).
            message: what its latest "stay Pending" decision says.
        """
        heap_id = (group, shape)
        entry = _Entry(heap_id, age, message)
        previous = self._entries.get(key)
        if previous == entry:
            return
        if previous is not None:
            self._uncount(previous)
        self._entries[key] = entry
        self._messages.setdefault(heap_id, Counter())[message] += 1
        self._shapes.setdefault(group, {})[shape] = None
        if (heap_id, age, key) not in self._pushed:
            self._pushed.add((heap_id, age, key))
            heap = self._heaps.setdefault(heap_id, [])
            heapq.heappush(heap, (age, key))
            if len(heap) > 2 * self._messages[heap_id].total() + 64:
                self._compact(heap_id)

    def discard(self, key: RunKey) -> None:
        """Unpark the Run ``key`` (no-op when it is not parked)."""
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._uncount(entry)

    def _uncount(self, entry: _Entry) -> None:
        messages = self._messages[entry.heap]
        messages[entry.message] -= 1
        if messages[entry.message] <= 0:
            del messages[entry.message]
        if not messages:
            del self._messages[entry.heap]
            for age, key in self._heaps.pop(entry.heap, []):
                self._pushed.discard((entry.heap, age, key))
            group, shape = entry.heap
            shapes = self._shapes[group]
            del shapes[shape]
            if not shapes:
                del self._shapes[group]

    def _live(self, heap_id: _HeapId, item: tuple[Age, RunKey]) -> bool:
        entry = self._entries.get(item[1])
        return entry is not None and entry.heap == heap_id and entry.age == item[0]

    def _compact(self, heap_id: _HeapId) -> None:
        live = []
        for item in self._heaps[heap_id]:
            if self._live(heap_id, item):
                live.append(item)
            else:
                self._pushed.discard((heap_id, *item))
        heapq.heapify(live)
        self._heaps[heap_id] = live

    def _head(self, heap_id: _HeapId) -> tuple[Age, RunKey] | None:
        heap = self._heaps.get(heap_id)
        while heap:
            if self._live(heap_id, heap[0]):
                return heap[0]
            age, key = heapq.heappop(heap)
            self._pushed.discard((heap_id, age, key))
        return None

    def oldest(
        self, group: str, *, excluding: set[Shape] | frozenset[Shape] = frozenset()
    ) -> tuple[RunKey, Shape] | None:
        """The oldest parked Run of ``group`` whose shape is not in ``excluding``.

        Returns:
            ``(key, shape)``, or ``None`` when no such Run is parked. The Run stays parked.
        """
        best: tuple[Age, RunKey, Shape] | None = None
        for shape in self._shapes.get(group, {}):
            if shape in excluding:
                continue
            head = self._head((group, shape))
            if head is not None and (best is None or head < best[:2]):
                best = (head[0], head[1], shape)
        return (best[1], best[2]) if best is not None else None

    def messages(self, group: str, shape: Shape) -> Mapping[str, int]:
        """The messages the parked Runs of one shape carry, with their counts (read-only)."""
        return self._messages.get((group, shape), {})

    def keys(self, group: str, shape: Shape | None = None) -> list[RunKey]:
        """The parked Runs of ``group`` (of one ``shape`` if given), oldest first.

        O(parked Runs of those shapes): for the rare wake-ups that must look at all of them.
        """
        shapes = [shape] if shape is not None else list(self._shapes.get(group, {}))
        found: list[tuple[Age, RunKey]] = []
        for each in shapes:
            heap_id = (group, each)
            found.extend(item for item in self._heaps.get(heap_id, []) if self._live(heap_id, item))
        return [key for _, key in sorted(found)]

    def clear(self) -> None:
        """Unpark every Run."""
        self._entries.clear()
        self._heaps.clear()
        self._messages.clear()
        self._shapes.clear()
        self._pushed.clear()
