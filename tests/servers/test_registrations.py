"""The registration table (seed 002 rules), tested synchronously and as a state machine."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from servers.common.errors import Code, ContractError
from servers.common.registrations import (
    RegisterOutcome,
    RegistrationID,
    RegistrationSpec,
    RegistrationState,
    RegistrationTable,
    RunUID,
)

A = "sha256:" + "a" * 64
B = "sha256:" + "b" * 64


class Clock:
    def __init__(self) -> None:
        self.now = 1_000

    def __call__(self) -> int:
        self.now += 1
        return self.now


def spec(attempt: int = 1, digest: str = A, run_uid: str = "run-1") -> RegistrationSpec:
    return RegistrationSpec(
        run_uid=RunUID(run_uid),
        attempt=attempt,
        digest=digest,
        working_dir=Path("/w"),
        handler="m.f",
    )


def ready_table(attempt: int = 1) -> tuple[RegistrationTable, str, Clock]:
    clock = Clock()
    table = RegistrationTable(clock=clock)
    decision = table.register(spec(attempt), RegistrationID("reg-1"))
    table.mark_ready(decision.registration.registration_id)
    return table, decision.registration.registration_id, clock


def code_of(excinfo: pytest.ExceptionInfo[ContractError]) -> Code:
    return excinfo.value.code


def test_first_register_creates_a_registering_registration() -> None:
    table = RegistrationTable(clock=Clock())
    decision = table.register(spec(), RegistrationID("reg-1"))
    assert decision.outcome is RegisterOutcome.CREATED
    assert decision.registration.state is RegistrationState.REGISTERING
    assert decision.registration.registration_id == "reg-1"
    assert decision.superseded is None


def test_same_attempt_and_digest_is_idempotent() -> None:
    table, reg_id, _ = ready_table()
    again = table.register(spec(), RegistrationID("reg-2"))
    assert again.outcome is RegisterOutcome.EXISTING
    assert again.registration.registration_id == reg_id
    assert again.registration.state is RegistrationState.READY


def test_same_attempt_other_digest_is_already_exists_and_changes_nothing() -> None:
    table, reg_id, _ = ready_table()
    with pytest.raises(ContractError) as excinfo:
        table.register(spec(digest=B), RegistrationID("reg-2"))
    assert code_of(excinfo) is Code.ALREADY_EXISTS
    current = table.resolve("run-1", reg_id)
    assert current.spec.digest == A
    assert current.state is RegistrationState.READY


def test_higher_attempt_supersedes_and_stales_the_old_id() -> None:
    table, old_id, _ = ready_table()
    decision = table.register(spec(attempt=2, digest=B), RegistrationID("reg-2"))
    assert decision.outcome is RegisterOutcome.CREATED
    assert decision.superseded is not None
    assert decision.superseded.registration_id == old_id
    assert decision.registration.registration_id == "reg-2"
    for operation in (
        lambda: table.resolve("run-1", old_id),
        lambda: table.begin_invocation("run-1", old_id, "inv"),
        lambda: table.begin_unregister("run-1", old_id),
    ):
        with pytest.raises(ContractError) as excinfo:
            operation()
        assert code_of(excinfo) is Code.FAILED_PRECONDITION
        assert "stale" in excinfo.value.message
    # the newer registration is untouched by the stale calls
    assert table.resolve("run-1", "reg-2").state is RegistrationState.REGISTERING


def test_lower_attempt_is_failed_precondition() -> None:
    table, reg_id, _ = ready_table(attempt=3)
    with pytest.raises(ContractError) as excinfo:
        table.register(spec(attempt=2), RegistrationID("reg-2"))
    assert code_of(excinfo) is Code.FAILED_PRECONDITION
    assert table.resolve("run-1", reg_id).spec.attempt == 3


def test_unknown_run_is_not_found_and_unknown_id_is_failed_precondition() -> None:
    table, _, _ = ready_table()
    with pytest.raises(ContractError) as excinfo:
        table.resolve("run-2", "reg-1")
    assert code_of(excinfo) is Code.NOT_FOUND
    with pytest.raises(ContractError) as excinfo:
        table.resolve("run-1", "reg-other")
    assert code_of(excinfo) is Code.FAILED_PRECONDITION


def test_ready_stamps_last_activity_and_invocations_update_it() -> None:
    table, reg_id, clock = ready_table()
    ready_at = table.resolve("run-1", reg_id).last_activity_unix_nano
    assert ready_at > 0
    reg = table.begin_invocation("run-1", reg_id, "inv-1")
    started = reg.last_activity_unix_nano
    assert started > ready_at
    assert reg.in_flight == 1
    table.end_invocation(RegistrationID(reg_id))
    assert reg.last_activity_unix_nano > started
    assert reg.in_flight == 0
    assert clock.now == reg.last_activity_unix_nano


def test_registering_registration_has_no_activity_yet() -> None:
    table = RegistrationTable(clock=Clock())
    reg = table.register(spec(), RegistrationID("reg-1")).registration
    assert reg.last_activity_unix_nano == 0


def test_second_invocation_while_one_is_in_flight_is_resource_exhausted() -> None:
    table, reg_id, _ = ready_table()
    table.begin_invocation("run-1", reg_id, "inv-1")
    with pytest.raises(ContractError) as excinfo:
        table.begin_invocation("run-1", reg_id, "inv-2")
    assert code_of(excinfo) is Code.RESOURCE_EXHAUSTED
    table.end_invocation(RegistrationID(reg_id))
    table.begin_invocation("run-1", reg_id, "inv-3")


@pytest.mark.parametrize("state", ["registering", "failed", "draining"])
def test_invoke_requires_ready(state: str) -> None:
    table = RegistrationTable(clock=Clock())
    reg_id = table.register(spec(), RegistrationID("reg-1")).registration.registration_id
    if state == "failed":
        table.mark_failed(reg_id, "boom")
    elif state == "draining":
        table.mark_ready(reg_id)
        table.begin_unregister("run-1", reg_id)
    with pytest.raises(ContractError) as excinfo:
        table.begin_invocation("run-1", reg_id, "inv")
    assert code_of(excinfo) is Code.FAILED_PRECONDITION
    assert state.upper() in excinfo.value.message


def test_mark_failed_bounds_fatal_error() -> None:
    table = RegistrationTable(clock=Clock())
    reg_id = table.register(spec(), RegistrationID("reg-1")).registration.registration_id
    reg = table.mark_failed(reg_id, "x" * 100_000)
    assert reg is not None
    assert reg.state is RegistrationState.FAILED
    assert len(reg.fatal_error.encode()) <= 4096
    assert reg.fatal_error.endswith("[truncated]")


def test_failed_registration_is_resumed_not_reinitialised() -> None:
    table = RegistrationTable(clock=Clock())
    reg_id = table.register(spec(), RegistrationID("reg-1")).registration.registration_id
    table.mark_failed(reg_id, "ImportError")
    again = table.register(spec(), RegistrationID("reg-2"))
    assert again.outcome is RegisterOutcome.EXISTING
    assert again.registration.state is RegistrationState.FAILED


def test_register_while_draining_is_failed_precondition() -> None:
    table, reg_id, _ = ready_table()
    table.begin_unregister("run-1", reg_id)
    with pytest.raises(ContractError) as excinfo:
        table.register(spec(), RegistrationID("reg-2"))
    assert code_of(excinfo) is Code.FAILED_PRECONDITION


def test_unregister_absent_succeeds_and_remove_forgets_the_run() -> None:
    table, reg_id, _ = ready_table()
    assert table.begin_unregister("run-9", "reg-x") is None
    reg = table.begin_unregister("run-1", reg_id)
    assert reg is not None
    assert reg.state is RegistrationState.DRAINING
    assert table.remove(RegistrationID(reg_id))
    assert table.begin_unregister("run-1", reg_id) is None
    assert len(table) == 0


def test_stale_end_invocation_does_not_touch_the_newer_registration() -> None:
    table, old_id, _ = ready_table()
    table.begin_invocation("run-1", old_id, "inv-1")
    table.register(spec(attempt=2), RegistrationID("reg-2"))
    table.mark_ready(RegistrationID("reg-2"))
    new = table.begin_invocation("run-1", "reg-2", "inv-2")
    table.end_invocation(RegistrationID(old_id))
    assert new.in_flight == 1
    assert not table.remove(RegistrationID(old_id))
    assert table.resolve("run-1", "reg-2") is new


_R = TypeVar("_R")


def _outcome(operation: Callable[[], _R]) -> tuple[_R | None, Code | None]:
    """Run ``operation``; return (result, None) or (None, the ContractError's code)."""
    try:
        return operation(), None
    except ContractError as exc:
        return None, exc.code


class RegistrationMachine(RuleBasedStateMachine):
    """Random sequences of calls keep the seed 002 invariants for one Run UID."""

    def __init__(self) -> None:
        super().__init__()
        self.table = RegistrationTable(clock=Clock())
        self.issued: list[str] = []
        self.current: str | None = None
        self.attempt = 0
        self.digest = A
        self.counter = 0
        self.last_activity = 0

    def _new_id(self) -> RegistrationID:
        self.counter += 1
        return RegistrationID(f"reg-{self.counter}")

    @rule(attempt=st.integers(1, 4), digest=st.sampled_from([A, B]))
    def register(self, attempt: int, digest: str) -> None:
        decision, code = _outcome(
            lambda: self.table.register(spec(attempt, digest), self._new_id())
        )
        if code is not None:
            assert self.current is not None
            if attempt < self.attempt:
                assert code is Code.FAILED_PRECONDITION
            elif digest != self.digest:
                assert code is Code.ALREADY_EXISTS
            else:
                assert code is Code.FAILED_PRECONDITION  # draining
            return
        assert decision is not None
        if decision.outcome is RegisterOutcome.EXISTING:
            assert decision.registration.registration_id == self.current
            assert (attempt, digest) == (self.attempt, self.digest)
        else:
            assert self.current is None or attempt > self.attempt
            self.issued.append(decision.registration.registration_id)
            self.current = decision.registration.registration_id
            self.attempt, self.digest = attempt, digest

    @precondition(lambda self: self.current is not None)
    @rule(ok=st.booleans())
    def settle(self, ok: bool) -> None:
        assert self.current is not None
        if ok:
            self.table.mark_ready(RegistrationID(self.current))
        else:
            self.table.mark_failed(RegistrationID(self.current), "import failed")

    @precondition(lambda self: bool(self.issued))
    @rule(data=st.data())
    def invoke(self, data: st.DataObject) -> None:
        reg_id = data.draw(st.sampled_from(self.issued))
        current = self.table.get(RegistrationID(reg_id))
        reg, code = _outcome(lambda: self.table.begin_invocation("run-1", reg_id, "inv"))
        if code is not None:
            if reg_id != self.current:
                assert code in (Code.FAILED_PRECONDITION, Code.NOT_FOUND)
            else:
                assert current is not None
                assert (current.state is not RegistrationState.READY) or current.in_flight
            return
        assert reg is not None
        assert reg_id == self.current
        assert reg.in_flight == 1

    @precondition(lambda self: self.current is not None)
    @rule()
    def finish(self) -> None:
        assert self.current is not None
        self.table.end_invocation(RegistrationID(self.current))

    @precondition(lambda self: bool(self.issued))
    @rule(data=st.data())
    def unregister(self, data: st.DataObject) -> None:
        reg_id = data.draw(st.sampled_from(self.issued))
        reg, code = _outcome(lambda: self.table.begin_unregister("run-1", reg_id))
        if code is not None:
            assert reg_id != self.current
            assert code is Code.FAILED_PRECONDITION
            return
        if reg is None:
            assert self.current is None
            return
        assert reg_id == self.current
        assert self.table.remove(RegistrationID(reg_id))
        self.current = None
        self.attempt = 0

    @invariant()
    def only_the_current_id_resolves(self) -> None:
        for reg_id in self.issued:
            if reg_id == self.current:
                assert self.table.resolve("run-1", reg_id).registration_id == reg_id
            else:
                with pytest.raises(ContractError):
                    self.table.resolve("run-1", reg_id)

    @invariant()
    def ready_registrations_have_activity(self) -> None:
        if self.current is not None:
            reg = self.table.resolve("run-1", self.current)
            assert reg.in_flight in (0, 1)
            if reg.state is RegistrationState.READY:
                assert reg.last_activity_unix_nano > 0


TestRegistrationMachine = RegistrationMachine.TestCase
