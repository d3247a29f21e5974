"""Running hypothesis properties against servers that live in the test's trio run.

pytest-trio runs every example of an ``async`` ``@given`` test in a fresh ``trio.run``, with
its fixtures set up again each time: starting a gateway, an API server or a Runtime Server
per example would dominate the suite's time. Instead each property here is a synchronous
``@given`` function run by :func:`run_property` in one worker thread (hypothesis's engine is
synchronous: that is what forces the thread), and every example calls back into the test's
trio run with :func:`on_trio`, where the server under test keeps running across examples.
Shrinking works as usual: a failing example is an ``AssertionError`` raised in the thread.

Reproducibility: :func:`fuzz_settings` derandomizes hypothesis (examples depend only on the
test's source), uses no example database, and bounds ``max_examples``. ``KRT_FUZZ_SCALE``
(a positive number, default 1) multiplies every bound for a longer local run, e.g.
``KRT_FUZZ_SCALE=20 .venv/bin/python -m pytest tests/fuzz``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar

import trio
from hypothesis import HealthCheck, settings

_T = TypeVar("_T")

#: how long one example's trio-side work may take before it counts as a hang (seconds).
EXAMPLE_SECONDS: Final = 20.0


def _scale() -> float:
    raw = os.environ.get("KRT_FUZZ_SCALE", "1")
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"KRT_FUZZ_SCALE={raw!r} is not a number") from None
    if value <= 0:
        raise ValueError(f"KRT_FUZZ_SCALE={raw!r} must be positive")
    return value


def fuzz_settings(max_examples: int) -> settings:
    """Reproducible, bounded hypothesis settings for one property.

    Args:
        max_examples: examples per run at scale 1 (multiplied by ``KRT_FUZZ_SCALE``).
    """
    return settings(
        max_examples=max(1, int(max_examples * _scale())),
        deadline=None,
        derandomize=True,
        database=None,
        print_blob=True,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.large_base_example,
            HealthCheck.filter_too_much,
        ],
    )


def on_trio(fn: Callable[..., Awaitable[_T]], *args: Any) -> _T:
    """From a property's thread: run ``await fn(*args)`` in the test's trio run.

    The call is bounded by :data:`EXAMPLE_SECONDS` (``trio.TooSlowError`` when a server
    hangs instead of answering).
    """

    async def bounded() -> _T:
        with trio.fail_after(EXAMPLE_SECONDS):
            return await fn(*args)

    return trio.from_thread.run(bounded)


async def run_property(test: Callable[[], None]) -> None:
    """Run a synchronous ``@given`` property in a worker thread of the current trio run.

    INFO and DEBUG log records are dropped meanwhile: the servers log every rejected request
    at INFO, and pytest capturing thousands of such records triples the suite's time.
    Warnings and errors (e.g. "internal error" tracebacks) are still captured.
    """
    previous = logging.root.manager.disable
    logging.disable(logging.INFO)
    try:
        await trio.to_thread.run_sync(test)
    finally:
        logging.disable(previous)
