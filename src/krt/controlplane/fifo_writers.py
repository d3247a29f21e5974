"""A fixed set of writer tasks that start queued jobs strictly in submission order.

Issue 6 (first come, first bound): the scheduler decides in queue order and hands each
status write to a pool of :data:`~krt.controlplane.scheduler_loop.MAX_CONCURRENT_BINDS`
writers. Trio's memory channels do not keep that order across several receivers: a
receiver takes its item and then passes a scheduling checkpoint, and the receivers of one
scheduler batch resume in random order, so the requests went out shuffled. Here a writer
takes the oldest job and starts it with no checkpoint in between, so jobs start (and send
their request) in submission order; only their completions may interleave.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable

import trio

Job = Callable[[], Awaitable[None]]
"""A write to perform: an async callable taking no arguments."""


class FifoWriters:
    """Runs submitted jobs on ``workers`` tasks, starting them in submission order.

    Args:
        workers: how many jobs may run at once (>= 1).

    Raises:
        ValueError: ``workers`` < 1.
    """

    def __init__(self, workers: int) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        self.workers = workers
        self._jobs: deque[Job] = deque()
        self._idle = trio.lowlevel.ParkingLot()

    def __len__(self) -> int:
        """Jobs submitted and not started yet."""
        return len(self._jobs)

    def submit(self, job: Job) -> None:
        """Queue ``job`` behind every job submitted before it; never blocks."""
        self._jobs.append(job)
        self._idle.unpark()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the writers until cancelled; ``started()`` once they wait for jobs.

        A job that raises crashes the writers (and this call): jobs handle their own
        expected errors. Jobs still queued when this is cancelled are dropped.
        """
        async with trio.open_nursery() as nursery:
            for _ in range(self.workers):
                nursery.start_soon(self._writer)
            task_status.started()

    async def _writer(self) -> None:
        while True:
            if not self._jobs:
                await self._idle.park()
                continue
            await self._jobs.popleft()()
