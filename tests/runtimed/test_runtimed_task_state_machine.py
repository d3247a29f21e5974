"""A hypothesis state machine over the pure task decision, interleaving everything that can
happen around one Run: reconciliations, the start worker landing, the execution finishing,
Runtime Server restarts, runtimed restarts (local state lost, an in-flight start landed or
not), cancellation and time passing.

Invariants (seed 003 and issue 6):

* Execute is never sent while the Runtime Server still holds an execution for the Run UID;
* nothing is executed once the Run is terminal, and nothing during retry backoff;
* an attempt executes at most once, unless the only evidence of its execution was lost to
  both a runtimed restart and a Runtime Server restart (the accepted at-least-once case);
* ``status.attempt`` never exceeds ``maxAttempts``; every phase change is allowed by the
  lifecycle state machine; Cancelled/Timeout are written only when the server holds
  nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from runtimed_builders import NOW, POD_UID, make_run, patched

from krt.api import Retry, Run
from krt.api.phases import can_transition, is_terminal
from runtimed.task_decisions import (
    CancelExecution,
    Claim,
    End,
    ExecState,
    Fail,
    ForgetExecution,
    Ignore,
    LocalView,
    NeedStatus,
    Observe,
    Resume,
    ServerView,
    StartExecution,
    StartState,
    Succeed,
    Wait,
    decide_task,
)

MAX_ATTEMPTS = 3


@dataclass
class Execution:
    state: ExecState
    attempt: int


class TaskLifecycleMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.run: Run = make_run(
            phase="Scheduled",
            retry={"maxAttempts": MAX_ATTEMPTS, "backoff": "1s"},
            timeout="60s",
        )
        self.now = NOW
        self.local: LocalView | None = None
        self.execution: Execution | None = None
        self.worker_attempt: int | None = None  # an Execute in flight, for this attempt
        self.executions_per_attempt: dict[int, int] = {}
        self.ambiguous: set[int] = set()  # attempts whose execution evidence was lost twice
        self.restarted_during: set[int] = set()
        self.server_lost_during: set[int] = set()

    # -- helpers -----------------------------------------------------------------------------

    def _server_view(self) -> ServerView:
        if self.execution is None:
            return ServerView(ExecState.NOT_FOUND)
        if self.execution.state is ExecState.SUCCEEDED:
            return ServerView(ExecState.SUCCEEDED, outputs={})
        return ServerView(
            self.execution.state, exit_code=1 if self.execution.state is ExecState.FAILED else 0
        )

    def _apply(self, patch: dict[str, Any]) -> None:
        old = self.run.status.phase
        self.run = patched(self.run, patch)
        assert can_transition(old, self.run.status.phase), (old, self.run.status.phase)
        assert self.run.status.attempt <= MAX_ATTEMPTS

    # -- rules -------------------------------------------------------------------------------

    @rule()
    def reconcile(self) -> None:
        server: ServerView | None = None
        for _ in range(8):
            action = decide_task(
                self.run, pod_uid=POD_UID, local=self.local, server=server, now=self.now
            )
            attempt = max(1, self.run.status.attempt)
            if isinstance(action, NeedStatus):
                server = self._server_view()
                continue
            if isinstance(action, ForgetExecution):
                if self.execution is not None and self.execution.state.finished:
                    self.execution = None
                server = None
                continue
            if isinstance(action, (Ignore, Wait)):
                return
            if isinstance(action, Claim):
                self._apply(action.patch)
                self.local = LocalView(attempt=max(1, self.run.status.attempt), prepared=True)
                return
            if isinstance(action, StartExecution):
                assert not is_terminal(self.run.status.phase)
                assert self.run.status.retry_after is None, "started during backoff"
                assert self.worker_attempt is None, "a second start worker"
                view = (self.local or LocalView(attempt=attempt)).for_attempt(attempt)
                self.local = replace(view, prepared=True, start=StartState.IN_FLIGHT)
                self.worker_attempt = attempt
                return
            if isinstance(action, Observe):
                view = (self.local or LocalView(attempt=attempt)).for_attempt(attempt)
                self.local = replace(view, observed=True, start=StartState.NONE)
                return
            if isinstance(action, CancelExecution):
                if self.execution is not None and self.execution.state.active:
                    self.execution.state = ExecState.FAILED
                return
            if isinstance(action, End):
                assert self.execution is None, "Cancelled/Timeout written while the server holds it"
                self._apply(action.patch)
                return
            if isinstance(action, Succeed):
                self._apply(action.patch)
                self.execution = None  # forgotten
                self.local = None
                return
            if isinstance(action, Fail):
                self._apply(action.decision.patch)
                if action.forget and self.execution is not None and self.execution.state.finished:
                    self.execution = None
                if not isinstance(action.decision, Retry):
                    self.local = None
                return
            if isinstance(action, Resume):
                self.local = LocalView(attempt=attempt)
                self._apply(action.patch)
                return
            raise AssertionError(f"unexpected {action!r}")

    @precondition(lambda self: self.worker_attempt is not None)
    @rule(succeeds=st.booleans())
    def worker_reports(self, succeeds: bool) -> None:
        attempt = self.worker_attempt
        assert attempt is not None
        self.worker_attempt = None
        if succeeds:
            self._land_execute(attempt)
        view = self.local
        if view is not None and view.start is StartState.IN_FLIGHT:
            self.local = replace(
                view,
                start=StartState.SUCCEEDED if succeeds else StartState.FAILED,
                start_error="" if succeeds else "Execute failed",
            )

    def _land_execute(self, attempt: int) -> None:
        assert self.execution is None, "Execute sent while the server holds an execution"
        assert not is_terminal(self.run.status.phase), "executed after the Run ended"
        self.execution = Execution(ExecState.RUNNING, attempt)
        count = self.executions_per_attempt.get(attempt, 0) + 1
        self.executions_per_attempt[attempt] = count

    @precondition(lambda self: self.execution is not None and self.execution.state.active)
    @rule(succeeds=st.booleans())
    def execution_finishes(self, succeeds: bool) -> None:
        assert self.execution is not None
        self.execution.state = ExecState.SUCCEEDED if succeeds else ExecState.FAILED

    @rule()
    def runtime_server_restarts(self) -> None:
        if self.execution is not None:
            self.server_lost_during.add(self.execution.attempt)
        self.execution = None

    @rule(landed=st.booleans())
    def runtimed_restarts(self, landed: bool) -> None:
        if self.worker_attempt is not None:
            if landed and self.execution is None:
                self._land_execute(self.worker_attempt)
            self.worker_attempt = None
        self.restarted_during.add(max(1, self.run.status.attempt))
        self.local = None

    @rule()
    def cancel(self) -> None:
        data = self.run.to_dict()
        data["spec"]["cancelRequested"] = True
        self.run = Run.from_dict(data)

    @rule(seconds=st.sampled_from([0.5, 1.0, 2.0, 30.0]))
    def time_passes(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)

    # -- invariants ----------------------------------------------------------------------------

    @invariant()
    def each_attempt_executes_once(self) -> None:
        for attempt, count in self.executions_per_attempt.items():
            if count > 1:
                message = f"attempt {attempt} executed {count} times"
                assert attempt in self.restarted_during, message
                assert attempt in self.server_lost_during, message

    @invariant()
    def attempts_bounded(self) -> None:
        assert self.run.status.attempt <= MAX_ATTEMPTS


TaskLifecycleMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None
)
test_task_lifecycle_state_machine = TaskLifecycleMachine.TestCase
