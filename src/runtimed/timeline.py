"""Where one task Run's time goes on this Pod: a per-Run stage timeline (diagnostics).

Issue 6 asks for the latency of a task Run to be broken down by stage. The status
timestamps give only create, bind (``Scheduled``), claim (``startTime``) and completion; the
steps in between happen inside runtimed. The task lifecycle marks each step's wall-clock
time on the Run's :class:`Timeline` the first time it happens in the current attempt, and
logs the consecutive differences on the Run's terminal log line (fields ``stages_ms`` and
``seen_at``), which ``bench/task_runs.py`` reads back from the container logs.

The stages, in order (:data:`STAGES`):

* ``seen``: the Run informer delivered the Run assigned to this Pod (phase Scheduled);
* ``claimed``: the claim write (Scheduled -> Running, ``startTime``) returned;
* ``prepared``: the source was prepared in the working directory;
* ``start``: Status answered NOT_FOUND and the start worker was spawned (seed 003 step 4);
* ``executed``: the worker's Execute returned (the server accepted the execution);
* ``finished``: runtimed first learned that the execution finished (RLEG ``List`` or a
  reconciliation's ``Status``);
* ``completed``: the terminal status write returned.

A stage never marked (a failed preparation, a Run seen only after a runtimed restart) is
left out of the differences rather than guessed. Pure data; the clock reading is the
caller's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

__all__ = ["STAGES", "Timeline"]

#: The stages in the order a successful attempt passes them.
STAGES: Final = ("seen", "claimed", "prepared", "start", "executed", "finished", "completed")


@dataclass(slots=True)
class Timeline:
    """Wall-clock times (epoch seconds) of the stages one Run passed on this Pod.

    Attributes:
        marks: stage name -> epoch seconds of its first occurrence in this attempt.
    """

    marks: dict[str, float] = field(default_factory=dict)

    def mark(self, stage: str, at: float) -> None:
        """Record ``stage`` at ``at`` (epoch seconds) unless it is already recorded.

        Raises:
            ValueError: ``stage`` is not one of :data:`STAGES`.
        """
        if stage not in STAGES:
            raise ValueError(f"unknown timeline stage {stage!r}; expected one of {STAGES}")
        self.marks.setdefault(stage, at)

    def restart_attempt(self) -> None:
        """Forget the per-attempt stages (a retry starts over from ``prepared``).

        ``seen`` and ``claimed`` happen once per Run and are kept.
        """
        self.marks = {k: v for k, v in self.marks.items() if k in ("seen", "claimed")}

    def stages_ms(self) -> dict[str, float]:
        """Milliseconds from each marked stage to the next marked one, keyed ``a->b``.

        Stages not marked are skipped, so the keys name exactly the two ends measured;
        values are rounded to 0.1 ms and never negative (clock steps are clamped to 0).
        """
        present = [(s, self.marks[s]) for s in STAGES if s in self.marks]
        return {
            f"{a}->{b}": round(max(0.0, (tb - ta) * 1000.0), 1)
            for (a, ta), (b, tb) in zip(present, present[1:], strict=False)
        }
