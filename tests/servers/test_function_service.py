"""FunctionService (seed 002) over a fake in-process adapter, on pytest-trio's autojump clock.

The fake worker sleeps, fails or echoes as its JSON payload says, so every timeout and
drain rule is checked against virtual time; the real Python worker is tested separately.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from servers.common.adapter import (
    FunctionWorker,
    InvalidInput,
    InvocationError,
    InvokeResult,
    RegistrationFailed,
)
from servers.common.errors import Code, ContractError
from servers.common.functions import FunctionService, InvokeRequest, RegisterRequest
from servers.common.registrations import RegistrationState

DIGEST = "a" * 64


class FakeWorker:
    def __init__(self, adapter: FakeAdapter) -> None:
        self._adapter = adapter
        self._alive = True
        self._closed = False
        self._reaped = False
        self.number = adapter.started

    @property
    def alive(self) -> bool:
        return self._alive

    async def invoke(
        self, payload: bytes, *, content_type: str, invocation_id: str
    ) -> InvokeResult:
        command: dict[str, Any] = json.loads(payload or b"{}")
        self._adapter.calls.append(invocation_id)
        try:
            if "advance_clock" in command and self._adapter.clock is not None:
                self._adapter.clock.advance(command["advance_clock"])
            if "sleep" in command:
                await trio.sleep(command["sleep"])
        except trio.Cancelled:
            self._alive = False  # like the real worker: a cancelled call kills the process
            raise
        if command.get("raise"):
            raise InvocationError("ValueError", command["raise"])
        if command.get("invalid"):
            raise InvalidInput("input is not valid JSON")
        body = json.dumps({"worker": self.number, "echo": command}).encode()
        return InvokeResult(output=body, content_type="application/json")

    async def reap(self) -> None:
        if not self._alive and not self._reaped:
            await trio.sleep(self._adapter.reap_seconds)  # a killed process slow to exit
            self._reaped = True
            self._adapter.reaped += 1

    async def aclose(self) -> None:
        if not self._closed:
            self._adapter.closed += 1
        self._closed = True
        self._alive = False


class FakeAdapter:
    name = "fake"

    def __init__(self, clock: Any = None) -> None:
        self.started = 0
        self.closed = 0
        self.start_delay = 0.0
        self.fail_with: str | None = None
        self.calls: list[str] = []
        self.clock = clock
        self.reap_seconds = 0.0
        self.reaped = 0

    def handler_error(self, handler: str) -> str | None:
        return None if "." in handler else f"handler {handler!r} must be module.function"

    async def start_worker(
        self, *, working_dir: Path, handler: str, env: Mapping[str, str], run_uid: str
    ) -> FunctionWorker:
        await trio.sleep(self.start_delay)
        if self.fail_with is not None:
            raise RegistrationFailed(self.fail_with)
        self.started += 1
        return FakeWorker(self)

    def task_argv(self, *, entrypoint: str, args: Sequence[str]) -> list[str]:
        return ["true"]


@pytest.fixture
async def service(
    tmp_path: Path, fake_clock: Any, autojump_clock: trio.testing.MockClock
) -> AsyncIterator[tuple[FunctionService, FakeAdapter]]:
    (tmp_path / "fn").mkdir()
    adapter = FakeAdapter(fake_clock)
    async with trio.open_nursery() as nursery:
        yield (
            FunctionService(adapter, work_dir=tmp_path, nursery=nursery, clock=fake_clock),
            adapter,
        )
        nursery.cancel_scope.cancel()


def request(tmp_path: Path, **overrides: Any) -> RegisterRequest:
    fields: dict[str, Any] = {
        "run_uid": "run-1",
        "registration_attempt": 1,
        "working_dir": str(tmp_path / "fn"),
        "handler": "handler.handle",
        "env": {},
        "idle_timeout_seconds": 0,
        "registration_digest": DIGEST,
    }
    fields.update(overrides)
    return RegisterRequest(**fields)


def invoke_request(reg_id: str, payload: Any = None, **overrides: Any) -> InvokeRequest:
    fields: dict[str, Any] = {
        "run_uid": "run-1",
        "registration_id": reg_id,
        "invocation_id": "",
        "input": json.dumps(payload or {}).encode(),
        "content_type": "application/json",
        "timeout_millis": 0,
    }
    fields.update(overrides)
    return InvokeRequest(**fields)


async def expect(code: Code, awaitable: Any) -> ContractError:
    with pytest.raises(ContractError) as excinfo:
        await awaitable
    assert excinfo.value.code is code, excinfo.value
    return excinfo.value


# -- registration ----------------------------------------------------------------------


async def test_register_is_ready_and_stamps_activity(
    autojump_clock: Any, service: Any, tmp_path: Path, fake_clock: Any
) -> None:
    svc, adapter = service
    reg = await svc.register(request(tmp_path))
    assert reg.state is RegistrationState.READY
    assert reg.registration_id.startswith("reg_")
    status = svc.status("run-1", reg.registration_id)
    assert status.last_activity_unix_nano == fake_clock.now
    assert status.in_flight == 0
    assert adapter.started == 1


async def test_repeated_register_resumes_without_reinitialising(
    autojump_clock: Any, service: Any, tmp_path: Path
) -> None:
    svc, adapter = service
    first = await svc.register(request(tmp_path))
    second = await svc.register(request(tmp_path))
    assert second.registration_id == first.registration_id
    assert adapter.started == 1


async def test_concurrent_registers_share_one_worker(
    autojump_clock: Any, service: Any, tmp_path: Path
) -> None:
    svc, adapter = service
    adapter.start_delay = 5
    ids: list[str] = []

    async def register() -> None:
        ids.append((await svc.register(request(tmp_path))).registration_id)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(register)
        nursery.start_soon(register)
    assert len(set(ids)) == 1
    assert adapter.started == 1


async def test_different_digest_is_already_exists(
    autojump_clock: Any, service: Any, tmp_path: Path
) -> None:
    svc, _ = service
    reg = await svc.register(request(tmp_path))
    await expect(Code.ALREADY_EXISTS, svc.register(request(tmp_path, registration_digest="b" * 64)))
    assert svc.status("run-1", reg.registration_id).state is RegistrationState.READY


async def test_lower_attempt_is_failed_precondition(
    autojump_clock: Any, service: Any, tmp_path: Path
) -> None:
    svc, _ = service
    await svc.register(request(tmp_path, registration_attempt=2))
    await expect(Code.FAILED_PRECONDITION, svc.register(request(tmp_path, registration_attempt=1)))


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"registration_attempt": 0}, "one-based"),
        ({"registration_attempt": -1}, "one-based"),
        ({"handler": ""}, "handler is required"),
        ({"handler": "nodot"}, "module.function"),
        ({"run_uid": ""}, "run_uid is required"),
        ({"run_uid": "../x"}, "run_uid"),
        ({"working_dir": "/etc"}, "not under the server's work dir"),
        ({"working_dir": "missing"}, "not an existing directory"),
        ({"working_dir": "a" * 5000}, "File name too long"),
        ({"working_dir": "fn/" + "a" * 300}, "File name too long"),
        ({"handler": "a." + "b" * 1023}, "1024 bytes"),
        ({"env": {"9X": "1"}}, "'9X'"),
        ({"idle_timeout_seconds": -5}, "idle_timeout_seconds"),
        ({"registration_digest": "NOPE"}, "registration_digest"),
    ],
)
async def test_register_validates_fields_and_keeps_no_state(
    autojump_clock: Any, service: Any, tmp_path: Path, overrides: dict[str, Any], fragment: str
) -> None:
    svc, adapter = service
    error = await expect(Code.INVALID_ARGUMENT, svc.register(request(tmp_path, **overrides)))
    assert fragment in error.message
    assert len(svc.table) == 0
    assert adapter.started == 0


async def test_failed_initialisation_is_failed_with_fatal_error(
    autojump_clock: Any, service: Any, tmp_path: Path
) -> None:
    svc, adapter = service
    adapter.fail_with = "ModuleNotFoundError: No module named 'handler'"
    error = await expect(Code.FAILED_PRECONDITION, svc.register(request(tmp_path)))
    assert "No module named 'handler'" in error.message
    (reg,) = svc.table.registrations()
    # F9: runtimed copies this detail into Run status; the opaque ID must not be in it
    assert error.message == f"registration attempt 1 failed: {adapter.fail_with}"
    assert reg.registration_id not in error.message
    status = svc.status("run-1", reg.registration_id)
    assert status.state is RegistrationState.FAILED
    assert status.fatal_error == adapter.fail_with
    # resuming the same registration does not re-run the import
    adapter.fail_with = None
    await expect(Code.FAILED_PRECONDITION, svc.register(request(tmp_path)))
    assert adapter.started == 0
    await expect(Code.FAILED_PRECONDITION, svc.invoke(invoke_request(reg.registration_id)))


async def test_higher_attempt_supersedes_cancels_old_work_and_stales_old_id(
    autojump_clock: Any, service: Any, tmp_path: Path
) -> None:
    svc, adapter = service
    old = await svc.register(request(tmp_path))
    errors: list[ContractError] = []

    async def long_call() -> None:
        try:
            await svc.invoke(invoke_request(old.registration_id, {"sleep": 100}))
        except ContractError as exc:
            errors.append(exc)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(long_call)
        await trio.sleep(1)
        new = await svc.register(
            request(tmp_path, registration_attempt=2, registration_digest="b" * 64)
        )
    assert new.registration_id != old.registration_id
    assert [e.code for e in errors] == [Code.CANCELLED]
    assert "superseded" in errors[0].message
    assert adapter.closed == 1
    for call in (
        svc.invoke(invoke_request(old.registration_id)),
        svc.unregister("run-1", old.registration_id, cancel_in_flight=True, drain_timeout_millis=0),
    ):
        await expect(Code.FAILED_PRECONDITION, call)
    with pytest.raises(ContractError) as excinfo:
        svc.status("run-1", old.registration_id)
    assert excinfo.value.code is Code.FAILED_PRECONDITION
    # the stale calls did not touch the new registration
    _, result = await svc.invoke(invoke_request(new.registration_id, {"n": 1}))
    assert json.loads(result.output)["echo"] == {"n": 1}


# -- invocation ------------------------------------------------------------------------


async def test_invocation_id_is_generated_when_empty_and_echoed(
    autojump_clock: Any, service: Any, tmp_path: Path
) -> None:
    svc, adapter = service
    reg = await svc.register(request(tmp_path))
    generated, _ = await svc.invoke(invoke_request(reg.registration_id))
    assert len(generated) == 32
    int(generated, 16)
    given, _ = await svc.invoke(invoke_request(reg.registration_id, invocation_id="trace-7"))
    assert given == "trace-7"
    assert adapter.calls == [generated, "trace-7"]
    other, _ = await svc.invoke(invoke_request(reg.registration_id))
    assert other != generated


async def test_invocation_id_longer_than_128_bytes_is_invalid(
    autojump_clock: Any, service: Any, tmp_path: Path
) -> None:
    svc, adapter = service
    reg = await svc.register(request(tmp_path))
    await svc.invoke(invoke_request(reg.registration_id, invocation_id="é" * 64))  # 128 bytes
    error = await expect(
        Code.INVALID_ARGUMENT,
        svc.invoke(invoke_request(reg.registration_id, invocation_id="x" * 129)),
    )
    assert "128 bytes" in error.message
    assert len(adapter.calls) == 1


async def test_timeout_is_deadline_exceeded_for_that_invocation_only(
    autojump_clock: Any, service: Any, tmp_path: Path
) -> None:
    svc, adapter = service
    reg = await svc.register(request(tmp_path))
    start = trio.current_time()
    error = await expect(
        Code.DEADLINE_EXCEEDED,
        svc.invoke(invoke_request(reg.registration_id, {"sleep": 100}, timeout_millis=1500)),
    )
    assert trio.current_time() - start == pytest.approx(1.5)
    assert "1500 ms" in error.message
    status = svc.status("run-1", reg.registration_id)
    assert status.state is RegistrationState.READY
    assert status.in_flight == 0
    # the next invocation works, on a fresh worker
    _, result = await svc.invoke(invoke_request(reg.registration_id, {"n": 2}))
    assert json.loads(result.output) == {"worker": 2, "echo": {"n": 2}}
    assert adapter.started == 2


async def test_a_cancelled_invocation_frees_the_slot_before_its_worker_is_reaped(
    autojump_clock: Any, service: Any, tmp_path: Path
) -> None:
    """Seed 000: a caller that goes away frees the slot at once; the next invocation does
    not wait for the stopped worker's process to exit, and the cancelled one is reaped."""
    svc, adapter = service
    adapter.reap_seconds = 3.0
    reg = await svc.register(request(tmp_path))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(svc.invoke, invoke_request(reg.registration_id, {"sleep": 100}))
        await trio.sleep(1)
        nursery.cancel_scope.cancel()  # the caller goes away
    # the cancelled call returned only once its worker was reaped ...
    assert adapter.reaped == 1
    start = trio.current_time()
    async with trio.open_nursery() as nursery:

        async def cancel_then_invoke() -> None:
            async with trio.open_nursery() as inner:
                inner.start_soon(svc.invoke, invoke_request(reg.registration_id, {"sleep": 100}))
                await trio.sleep(1)
                inner.cancel_scope.cancel()

        nursery.start_soon(cancel_then_invoke)
        await trio.sleep(1.5)  # cancelled at 1 s; its worker's reap lasts until 4 s
        # ... but the slot was free meanwhile
        assert svc.status("run-1", reg.registration_id).in_flight == 0
    assert trio.current_time() - start == pytest.approx(4.0)
    assert adapter.reaped == 2


async def test_zero_timeout_means_the_bounded_default(
    autojump_clock: Any, service: Any, tmp_path: Path
) -> None:
    svc, _ = service
    reg = await svc.register(request(tmp_path))
    start = trio.current_time()
    await expect(
        Code.DEADLINE_EXCEEDED, svc.invoke(invoke_request(reg.registration_id, {"sleep": 10_000}))
    )
    assert trio.current_time() - start == pytest.approx(30.0)


async def test_overlapping_invocation_is_resource_exhausted(
    autojump_clock: Any, service: Any, tmp_path: Path
) -> None:
    svc, _ = service
    reg = await svc.register(request(tmp_path))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(svc.invoke, invoke_request(reg.registration_id, {"sleep": 5}))
        await trio.sleep(1)
        assert svc.status("run-1", reg.registration_id).in_flight == 1
        await expect(Code.RESOURCE_EXHAUSTED, svc.invoke(invoke_request(reg.registration_id)))
    assert svc.status("run-1", reg.registration_id).in_flight == 0
    await svc.invoke(invoke_request(reg.registration_id))


async def test_last_activity_updates_at_start_and_end(
    autojump_clock: Any, service: Any, tmp_path: Path, fake_clock: Any
) -> None:
    svc, _ = service
    reg = await svc.register(request(tmp_path))
    ready_at = svc.status("run-1", reg.registration_id).last_activity_unix_nano
    fake_clock.advance(60)
    started_at = fake_clock.now
    seen: list[int] = []

    async def watch() -> None:
        await trio.sleep(1)
        seen.append(svc.status("run-1", reg.registration_id).last_activity_unix_nano)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch)
        await svc.invoke(invoke_request(reg.registration_id, {"sleep": 2, "advance_clock": 5}))
    assert seen == [started_at]
    assert started_at > ready_at
    assert (
        svc.status("run-1", reg.registration_id).last_activity_unix_nano == started_at + 5 * 10**9
    )


async def test_handler_error_is_unknown_and_registration_stays_ready(
    autojump_clock: Any, service: Any, tmp_path: Path
) -> None:
    svc, _ = service
    reg = await svc.register(request(tmp_path))
    error = await expect(
        Code.UNKNOWN, svc.invoke(invoke_request(reg.registration_id, {"raise": "nope"}))
    )
    assert error.message == "ValueError: nope"
    assert svc.status("run-1", reg.registration_id).state is RegistrationState.READY
    await svc.invoke(invoke_request(reg.registration_id))


async def test_invalid_input_is_invalid_argument(
    autojump_clock: Any, service: Any, tmp_path: Path
) -> None:
    svc, _ = service
    reg = await svc.register(request(tmp_path))
    await expect(
        Code.INVALID_ARGUMENT, svc.invoke(invoke_request(reg.registration_id, {"invalid": 1}))
    )


async def test_invoke_field_validation(autojump_clock: Any, service: Any, tmp_path: Path) -> None:
    svc, _ = service
    reg = await svc.register(request(tmp_path))
    await expect(
        Code.INVALID_ARGUMENT, svc.invoke(invoke_request(reg.registration_id, timeout_millis=-1))
    )
    await expect(Code.INVALID_ARGUMENT, svc.invoke(invoke_request("")))
    await expect(
        Code.INVALID_ARGUMENT,
        svc.invoke(invoke_request(reg.registration_id, input=b"x" * (1024 * 1024 + 1))),
    )
    await expect(Code.NOT_FOUND, svc.invoke(invoke_request(reg.registration_id, run_uid="run-2")))


async def test_failed_worker_restart_fails_the_registration(
    autojump_clock: Any, service: Any, tmp_path: Path
) -> None:
    svc, adapter = service
    reg = await svc.register(request(tmp_path))
    await expect(
        Code.DEADLINE_EXCEEDED,
        svc.invoke(invoke_request(reg.registration_id, {"sleep": 100}, timeout_millis=100)),
    )
    adapter.fail_with = "SyntaxError: invalid syntax (handler.py, line 1)"
    error = await expect(Code.FAILED_PRECONDITION, svc.invoke(invoke_request(reg.registration_id)))
    assert "SyntaxError" in error.message
    status = svc.status("run-1", reg.registration_id)
    assert status.state is RegistrationState.FAILED
    assert "SyntaxError" in status.fatal_error


# -- unregistration --------------------------------------------------------------------


async def test_unregister_drains_in_flight_work(
    autojump_clock: Any, service: Any, tmp_path: Path
) -> None:
    svc, adapter = service
    reg = await svc.register(request(tmp_path))
    results: list[Any] = []
    rejected: list[ContractError] = []

    async def call() -> None:
        results.append(await svc.invoke(invoke_request(reg.registration_id, {"sleep": 10})))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(call)
        await trio.sleep(1)
        start = trio.current_time()

        async def probe() -> None:
            await trio.sleep(1)
            assert svc.status("run-1", reg.registration_id).state is RegistrationState.DRAINING
            rejected.append(
                await expect(
                    Code.FAILED_PRECONDITION, svc.invoke(invoke_request(reg.registration_id))
                )
            )

        nursery.start_soon(probe)
        await svc.unregister(
            "run-1", reg.registration_id, cancel_in_flight=False, drain_timeout_millis=60_000
        )
        assert trio.current_time() - start == pytest.approx(9.0)
    assert len(results) == 1
    assert "DRAINING" in rejected[0].message
    assert adapter.closed == 1
    with pytest.raises(ContractError) as excinfo:
        svc.status("run-1", reg.registration_id)
    assert excinfo.value.code is Code.NOT_FOUND


async def test_unregister_cancels_after_the_drain_timeout(
    autojump_clock: Any, service: Any, tmp_path: Path
) -> None:
    svc, _ = service
    reg = await svc.register(request(tmp_path))
    errors: list[ContractError] = []

    async def call() -> None:
        errors.append(
            await expect(
                Code.CANCELLED, svc.invoke(invoke_request(reg.registration_id, {"sleep": 100}))
            )
        )

    async with trio.open_nursery() as nursery:
        nursery.start_soon(call)
        await trio.sleep(1)
        start = trio.current_time()
        await svc.unregister(
            "run-1", reg.registration_id, cancel_in_flight=False, drain_timeout_millis=2500
        )
        assert trio.current_time() - start == pytest.approx(2.5)
    assert "unregistered" in errors[0].message


async def test_unregister_with_cancel_in_flight_does_not_wait(
    autojump_clock: Any, service: Any, tmp_path: Path
) -> None:
    svc, _ = service
    reg = await svc.register(request(tmp_path))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            expect, Code.CANCELLED, svc.invoke(invoke_request(reg.registration_id, {"sleep": 100}))
        )
        await trio.sleep(1)
        start = trio.current_time()
        await svc.unregister(
            "run-1", reg.registration_id, cancel_in_flight=True, drain_timeout_millis=60_000
        )
        assert trio.current_time() == start
    assert len(svc.table) == 0


async def test_unregister_absent_succeeds_and_stale_is_rejected(
    autojump_clock: Any, service: Any, tmp_path: Path
) -> None:
    svc, adapter = service
    await svc.unregister("run-9", "reg_x", cancel_in_flight=False, drain_timeout_millis=0)
    old = await svc.register(request(tmp_path))
    new = await svc.register(request(tmp_path, registration_attempt=2))
    await expect(
        Code.FAILED_PRECONDITION,
        svc.unregister("run-1", old.registration_id, cancel_in_flight=True, drain_timeout_millis=0),
    )
    assert svc.status("run-1", new.registration_id).state is RegistrationState.READY
    await expect(
        Code.INVALID_ARGUMENT,
        svc.unregister(
            "run-1", new.registration_id, cancel_in_flight=False, drain_timeout_millis=-1
        ),
    )
    await svc.unregister(
        "run-1", new.registration_id, cancel_in_flight=False, drain_timeout_millis=0
    )
    await svc.unregister(
        "run-1", new.registration_id, cancel_in_flight=False, drain_timeout_millis=0
    )
    assert adapter.closed == 2


async def test_unregister_during_registration_abandons_the_worker(
    autojump_clock: Any, service: Any, tmp_path: Path
) -> None:
    svc, adapter = service
    adapter.start_delay = 10
    async with trio.open_nursery() as nursery:
        nursery.start_soon(expect, Code.FAILED_PRECONDITION, svc.register(request(tmp_path)))
        await trio.sleep(1)
        (reg,) = svc.table.registrations()
        assert reg.state is RegistrationState.REGISTERING
        start = trio.current_time()
        await svc.unregister(
            "run-1", reg.registration_id, cancel_in_flight=True, drain_timeout_millis=0
        )
        assert trio.current_time() == start
    assert adapter.started == 0
    assert len(svc.table) == 0


async def test_concurrent_unregisters_both_return_after_removal(
    autojump_clock: Any, service: Any, tmp_path: Path
) -> None:
    svc, _ = service
    reg = await svc.register(request(tmp_path))
    done: list[float] = []

    async def unregister() -> None:
        await svc.unregister(
            "run-1", reg.registration_id, cancel_in_flight=False, drain_timeout_millis=5000
        )
        done.append(trio.current_time())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(svc.invoke, invoke_request(reg.registration_id, {"sleep": 3}))
        await trio.sleep(0.5)
        nursery.start_soon(unregister)
        nursery.start_soon(unregister)
    assert len(done) == 2
    assert len(svc.table) == 0


async def test_superseding_a_registration_that_is_still_starting(
    autojump_clock: Any, service: Any, tmp_path: Path
) -> None:
    svc, adapter = service
    adapter.start_delay = 10
    errors: list[ContractError] = []

    async def first() -> None:
        errors.append(await expect(Code.FAILED_PRECONDITION, svc.register(request(tmp_path))))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(first)
        await trio.sleep(1)
        new = await svc.register(request(tmp_path, registration_attempt=2))
    assert new.state is RegistrationState.READY
    assert errors[0].message == (
        "registration attempt 1 was superseded or unregistered while it was starting"
    )
    assert adapter.started == 1  # the first start was cancelled before it finished
    assert [r.registration_id for r in svc.table.registrations()] == [new.registration_id]


async def test_unregister_whose_caller_gives_up_still_completes(
    autojump_clock: Any, service: Any, tmp_path: Path
) -> None:
    # the caller's RPC is cancelled (client gone, grpc-timeout) in the middle of the drain:
    # the registration must not stay DRAINING for ever; the drain finishes in the background.
    svc, adapter = service
    reg = await svc.register(request(tmp_path))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            expect, Code.CANCELLED, svc.invoke(invoke_request(reg.registration_id, {"sleep": 100}))
        )
        await trio.sleep(1)
        with trio.move_on_after(1) as gave_up:
            await svc.unregister(
                "run-1", reg.registration_id, cancel_in_flight=False, drain_timeout_millis=5000
            )
        assert gave_up.cancelled_caught
        assert svc.status("run-1", reg.registration_id).state is RegistrationState.DRAINING
        await trio.sleep(4.5)  # past the 5 s drain deadline
    await expect(Code.NOT_FOUND, _status(svc, reg.registration_id))
    assert adapter.closed == 1
    again = await svc.register(request(tmp_path))
    assert again.state is RegistrationState.READY


async def _status(svc: FunctionService, registration_id: str) -> Any:
    return svc.status("run-1", registration_id)


@pytest.mark.parametrize(
    ("run_uid", "registration_id", "field"),
    [("", None, "registration.run_uid"), ("run-1", "", "registration.registration_id")],
)
async def test_references_need_both_run_uid_and_registration_id(
    autojump_clock: Any,
    service: Any,
    tmp_path: Path,
    run_uid: str,
    registration_id: str | None,
    field: str,
) -> None:
    # seed 002: a Runtime Server always requires a non-empty registration ID; an empty
    # reference is a caller bug, never "absent" (an unregister must not silently succeed).
    svc, adapter = service
    reg = await svc.register(request(tmp_path))
    reg_id = reg.registration_id if registration_id is None else registration_id
    with pytest.raises(ContractError) as excinfo:
        svc.status(run_uid, reg_id)
    assert excinfo.value.code is Code.INVALID_ARGUMENT
    assert f"{field} is required" in excinfo.value.message
    error = await expect(
        Code.INVALID_ARGUMENT,
        svc.unregister(run_uid, reg_id, cancel_in_flight=True, drain_timeout_millis=0),
    )
    assert f"{field} is required" in error.message
    error = await expect(Code.INVALID_ARGUMENT, svc.invoke(invoke_request(reg_id, run_uid=run_uid)))
    assert f"{field} is required" in error.message
    assert svc.status("run-1", reg.registration_id).state is RegistrationState.READY
    assert adapter.closed == 0
