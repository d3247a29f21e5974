"""Restart decisions and crash back-off for containers (pure; times in seconds).

Kubelet rules: ``restartPolicy`` ``Always`` restarts every exit, ``OnFailure`` only non-zero
exits, ``Never`` none. The first restart is immediate; further ones wait 10 s, doubling up to
300 s (the container shows waiting reason ``CrashLoopBackOff`` meanwhile); a container that
ran for at least ``reset_after`` seconds (600) starts a fresh back-off sequence.
"""

from __future__ import annotations

from dataclasses import dataclass


def should_restart(restart_policy: str, exit_code: int) -> bool:
    """Whether a container that exited with ``exit_code`` restarts under ``restart_policy``.

    Raises:
        ValueError: for a policy other than Always, OnFailure or Never.
    """
    if restart_policy == "Always":
        return True
    if restart_policy == "OnFailure":
        return exit_code != 0
    if restart_policy == "Never":
        return False
    raise ValueError(f"restartPolicy must be Always, OnFailure or Never, got {restart_policy!r}")


@dataclass
class CrashBackoff:
    """Back-off state of one container.

    Attributes:
        initial: delay in seconds before the second restart (10).
        cap: longest delay in seconds (300).
        reset_after: a run at least this long (seconds) resets the sequence (600).
        crashes: exits counted since the last reset.
    """

    initial: float = 10.0
    cap: float = 300.0
    reset_after: float = 600.0
    crashes: int = 0

    def next_delay(self, ran_for: float) -> float:
        """Record an exit after a run of ``ran_for`` seconds; return the delay before the
        restart, in seconds (0 for the first restart)."""
        if ran_for >= self.reset_after:
            self.crashes = 0
        self.crashes += 1
        if self.crashes == 1:
            return 0.0
        return float(min(self.cap, self.initial * 2 ** (self.crashes - 2)))
