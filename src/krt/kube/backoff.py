"""Exponential backoff with full jitter, measured in trio time by its callers.

One small value object shared by the informer (watch/list retries), the work queue (per-key
reconcile retries) and the Event recorder, so every retry loop in kruntimes backs off the
same way: delay ``n`` is drawn uniformly from ``[base * 2**n / 2, base * 2**n]`` (jitter
spreads many clients that failed together) and capped at ``maximum``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

__all__ = ["Backoff"]


@dataclass
class Backoff:
    """Exponential backoff state for one retry loop (or one key).

    Args:
        base: first delay ceiling, seconds (> 0).
        maximum: cap on any delay, seconds (>= base).
        jitter: fraction of each delay that is randomised, 0 (none) .. 1 (full).
        rng: random source (inject a seeded ``random.Random`` in tests).

    Raises:
        ValueError: a non-positive base, maximum below base, or jitter outside 0..1.
    """

    base: float = 0.1
    maximum: float = 30.0
    jitter: float = 0.5
    rng: random.Random = field(default_factory=random.Random, repr=False)
    failures: int = 0

    def __post_init__(self) -> None:
        if self.base <= 0:
            raise ValueError(f"backoff base must be > 0 seconds, got {self.base}")
        if self.maximum < self.base:
            raise ValueError(f"backoff maximum {self.maximum} s is below base {self.base} s")
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError(f"backoff jitter must be within 0..1, got {self.jitter}")

    def next_delay(self) -> float:
        """Record one more failure and return how long to wait before the next try (seconds)."""
        # Cap the exponent so 2**n never overflows a float for long outages.
        ceiling = min(self.maximum, self.base * 2.0 ** min(self.failures, 60))
        self.failures += 1
        return ceiling * (1.0 - self.jitter * self.rng.random())

    def reset(self) -> None:
        """Forget past failures (after a success)."""
        self.failures = 0
