"""krt.gc_tuning: start-up objects leave the collected generations, garbage does not survive."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from krt.gc_tuning import YOUNG_THRESHOLD, freeze_startup_heap


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


@pytest.fixture
def unfrozen_after() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


def test_survivors_are_frozen_and_skipped_by_collections(unfrozen_after: None) -> None:
    kept = _Node()
    count = freeze_startup_heap()
    assert count == gc.get_freeze_count() > 0
    assert not any(obj is kept for obj in gc.get_objects())  # a full collection skips it


def test_garbage_cycles_are_collected_before_freezing(unfrozen_after: None) -> None:
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    gone = weakref.ref(a)
    del a, b
    freeze_startup_heap()
    assert gone() is None  # collected, not frozen forever


def test_objects_created_later_are_still_collected(unfrozen_after: None) -> None:
    freeze_startup_heap()
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    gone = weakref.ref(a)
    del a, b
    gc.collect()
    assert gone() is None


def test_young_collections_wait_for_more_allocations(unfrozen_after: None) -> None:
    _, older, oldest = gc.get_threshold()
    freeze_startup_heap()
    assert gc.get_threshold() == (YOUNG_THRESHOLD, older, oldest)
