"""A pytest fixture that pins the order in which trio runs the tasks of one scheduler batch.

Races between two tasks made runnable in the same pass (a stream reset and the next request
read together) depend on that order; tests that check such a race run once per order.
Import the fixture into a test module: ``from tests.trio_batch_order import batch_order``.
"""

from __future__ import annotations

import random

import pytest
import trio._core._run as trio_run


class _FixedOrder(random.Random):
    """trio's scheduler randomness, fixed: every batch reversed (``value`` < 0.5) or not.

    trio reverses a batch when ``random()`` < 0.5; under pytest-trio (deterministic mode,
    with Hypothesis installed) it sorts the batch by task creation and ``shuffle``s it.
    """

    def __init__(self, value: float) -> None:
        super().__init__(0)
        self.value = value

    def random(self) -> float:
        return self.value

    def shuffle(self, x: list[object]) -> None:  # type: ignore[override]
        if self.value < 0.5:
            x.reverse()


@pytest.fixture(params=[0.0, 0.99], ids=["oldest-task-first", "newest-task-first"])
def batch_order(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> float:
    """Pin the order in which trio runs the tasks of one scheduler batch."""
    value = float(request.param)
    monkeypatch.setattr(trio_run, "_r", _FixedOrder(value))
    return value
