"""The function lifecycle over fakes on the virtual clock: issue 7's checklist, rule by rule."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio
from fn_builders import fn_dict
from fn_harness import GATEWAY, Harness, harness

from krt.api.constants import REGISTRATION_CLEANUP_FINALIZER
from runtimed.functions.client import FunctionRpcError, RegisterSpec
from runtimed.functions.lifecycle import FENCE_ATTEMPT
from runtimed.functions.registry import EntryState


def ready_condition(status: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == "Ready")


async def make_ready(h: Harness, **kwargs: Any) -> tuple[str, str]:
    obj = fn_dict(**kwargs)
    key = h.create(obj)
    status = await h.wait_phase(key, "Ready", "Failed")
    assert status["phase"] == "Ready", status
    return key, obj["metadata"]["uid"]


async def test_create_to_ready_with_endpoint_and_finalizer_first(
    autojump_clock: trio.abc.Clock, tmp_path: Path
) -> None:
    async with harness(tmp_path) as h:
        seen: list[Any] = []
        original = h.server.register

        async def register(spec: RegisterSpec) -> str:
            key = "ns/f1"
            seen.append(
                (
                    list(h.runs.objects[key]["metadata"].get("finalizers") or []),
                    h.runs.status(key).get("phase"),
                    (h.workspace.files(spec.run_uid).work / "main.py").read_text(),
                )
            )
            return await original(spec)

        h.server.register = register  # type: ignore[method-assign]
        key, uid = await make_ready(h, name="f1", idle=600)
        status = h.status(key)
        # claimed (Running + startTime) and the finalizer added before RegisterFunction
        assert seen == [
            (
                [REGISTRATION_CLEANUP_FINALIZER],
                "Running",
                "def invoke(request):\n    return {'ok': True}\n",
            )
        ]
        assert status["startTime"]
        assert status["endpoint"] == {
            "protocol": "HTTPS",
            "url": f"{GATEWAY}/v1/namespaces/ns/runtimes/python/functions/{uid}:invoke",
        }
        ready = ready_condition(status)
        assert (ready["status"], ready["reason"]) == ("True", "FunctionRegistered")
        # RegisterFunction got the Run UID, status.attempt and the server's working dir
        (call,) = [c for c in h.server.calls if c[0] == "RegisterFunction"]
        assert call[1] == uid
        assert call[2][0] == 1
        reg = h.server.registrations[uid]
        assert reg.working_dir == str(h.workspace.files(uid).work)
        # the registration ID lives in memory only
        entry = h.life.registry.accepting(uid)
        assert entry is not None
        assert entry.registration_id == reg.registration_id
        assert reg.registration_id not in str(h.runs.objects[key])
        # phases written: Running (claim), Ready
        assert [w["phase"] for w in h.runs.status_writes()] == ["Running", "Ready"]


async def test_bad_handler_fails_with_the_servers_error(
    autojump_clock: trio.abc.Clock, tmp_path: Path
) -> None:
    async with harness(tmp_path) as h:
        h.server.bad_handlers["main.nope"] = "AttributeError: module 'main' has no attribute 'nope'"
        key = h.create(fn_dict(name="bad", handler="main.nope"))
        status = await h.wait_phase(key, "Failed", "Ready")
        assert status["phase"] == "Failed"
        assert status["reason"] == "RegistrationFailed"
        assert "has no attribute 'nope'" in status["message"]
        ready = ready_condition(status)
        assert ready["status"] == "False"
        assert "has no attribute 'nope'" in ready["message"]
        # terminal: files removed, finalizer dropped, nothing held locally
        with trio.fail_after(10):
            while h.runs.objects[key]["metadata"].get("finalizers"):  # noqa: ASYNC110
                await trio.sleep(0.01)
        assert not h.workspace.files(h.runs.objects[key]["metadata"]["uid"]).root.exists()
        assert len(h.life.registry) == 0


async def test_registration_failure_retries_with_a_new_attempt(
    autojump_clock: trio.abc.Clock, tmp_path: Path
) -> None:
    async with harness(tmp_path) as h:
        h.server.bad_handlers["main.invoke"] = "ImportError: flaky"
        key = h.create(fn_dict(name="r", retry={"maxAttempts": 3, "backoff": "2s"}))
        with trio.fail_after(30):
            while h.status(key).get("attempt") != 2:  # noqa: ASYNC110
                await trio.sleep(0.01)
        assert h.status(key)["reason"] == "RegistrationFailed"
        del h.server.bad_handlers["main.invoke"]
        start = trio.current_time()
        status = await h.wait_phase(key, "Ready", "Failed")
        assert status["phase"] == "Ready"
        assert status["attempt"] == 2
        assert trio.current_time() - start >= 1.0  # the retry engine's backoff was honoured
        attempts = [c[2][0] for c in h.server.calls if c[0] == "RegisterFunction"]
        assert attempts == [1, 2]


async def test_unimplemented_function_runtime_is_permanent(
    autojump_clock: trio.abc.Clock, tmp_path: Path
) -> None:
    async with harness(tmp_path) as h:
        h.server.unimplemented = True
        key = h.create(fn_dict(name="u", retry={"maxAttempts": 5}))
        status = await h.wait_phase(key, "Failed", "Ready")
        assert status["reason"] == "FunctionUnimplemented"
        assert status["attempt"] == 1
        assert "permanent" in status["message"]


async def test_preparation_failure_follows_retry_policy(
    autojump_clock: trio.abc.Clock, tmp_path: Path
) -> None:
    async with harness(tmp_path) as h:
        key = h.create(fn_dict(name="p", inline="BROKEN-SOURCE"))
        status = await h.wait_phase(key, "Failed", "Ready")
        assert status["reason"] == "PreparationFailed"
        assert "disk full" in status["message"]
        assert "RegisterFunction" not in h.server.methods()


async def test_idle_timeout_fires_after_the_idle_period(
    autojump_clock: trio.abc.Clock, tmp_path: Path
) -> None:
    async with harness(tmp_path) as h:
        key, uid = await make_ready(h, name="idle", idle=10)
        ready_at = trio.current_time()
        files = h.workspace.files(uid)
        assert files.work.exists()
        status = await h.wait_phase(key, "Timeout", "Failed")
        elapsed = trio.current_time() - ready_at
        assert status["reason"] == "IdleTimeout"
        assert 9.98 <= elapsed <= 13, elapsed  # Ready is observed up to 10 ms late
        assert "UnregisterFunction" in h.server.methods(uid)
        assert uid not in h.server.registrations
        assert not files.root.exists()
        assert h.life.registry.get(uid) is None


async def test_idle_timeout_never_fires_during_a_long_invocation(
    autojump_clock: trio.abc.Clock, tmp_path: Path
) -> None:
    async with harness(tmp_path) as h:
        key, uid = await make_ready(h, name="busy", idle=10)
        start = trio.current_time()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(h.server.invoke, uid, 60.0)
            await trio.sleep(59)
            assert h.status(key)["phase"] == "Ready"
        status = await h.wait_phase(key, "Timeout")
        assert status["reason"] == "IdleTimeout"
        assert trio.current_time() - start >= 70


async def test_invocations_write_no_status(autojump_clock: trio.abc.Clock, tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        key, uid = await make_ready(h, name="hot", idle=30)
        writes = len(h.runs.status_writes())
        for _ in range(50):
            await h.server.invoke(uid, 0.5)
        await trio.sleep(5)
        assert h.status(key)["phase"] == "Ready"
        assert len(h.runs.status_writes()) == writes


async def test_lifetime_timeout_from_start_time(
    autojump_clock: trio.abc.Clock, tmp_path: Path
) -> None:
    async with harness(tmp_path) as h:
        start = trio.current_time()
        key, uid = await make_ready(h, name="life", timeout="20s")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(h.server.invoke, uid, 100.0)
            status = await h.wait_phase(key, "Timeout", "Failed")
            nursery.cancel_scope.cancel()
        assert status["reason"] == "LifetimeExceeded"
        assert 20 <= trio.current_time() - start <= 21
        (unregister,) = [c for c in h.server.calls if c[0] == "UnregisterFunction"]
        assert unregister[2][1] is True  # lifetime is a hard limit: in-flight work cancelled
        assert h.server.cancelled_invocations == 1


async def test_cancel_stops_invokes_first_then_unregisters_and_cancels(
    autojump_clock: trio.abc.Clock, tmp_path: Path
) -> None:
    async with harness(tmp_path) as h:
        key, uid = await make_ready(h, name="c")
        seen: list[Any] = []
        original = h.server.unregister

        async def unregister(run_uid: str, registration_id: str, **kw: Any) -> None:
            entry = h.life.registry.get(run_uid)
            seen.append((h.life.registry.accepting(run_uid), entry.state if entry else None))
            await original(run_uid, registration_id, **kw)

        h.server.unregister = unregister  # type: ignore[method-assign]
        h.runs.update_spec(key, cancelRequested=True)
        status = await h.wait_phase(key, "Cancelled", "Failed")
        assert seen == [(None, EntryState.TERMINATING)]
        assert status["reason"] == "Cancelled"
        assert uid not in h.server.registrations
        assert not h.workspace.files(uid).root.exists()
        with trio.fail_after(5):
            while h.runs.objects[key]["metadata"].get("finalizers"):  # noqa: ASYNC110
                await trio.sleep(0.01)
        assert len(h.life.registry) == 0


async def test_delete_drains_within_a_bound_then_removes_the_finalizer(
    autojump_clock: trio.abc.Clock, tmp_path: Path
) -> None:
    async with harness(tmp_path, drain=3.0) as h:
        key, uid = await make_ready(h, name="d")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(h.server.invoke, uid, 600.0)
            await trio.sleep(0.1)
            start = trio.current_time()
            h.runs.delete(key)
            with trio.fail_after(30):
                while key in h.runs.objects:  # noqa: ASYNC110
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
        # drained for 3 s (the bound), then cancelled; the object is gone with the finalizer
        assert 3 <= trio.current_time() - start <= 9
        assert h.server.cancelled_invocations == 1
        assert uid not in h.server.registrations
        assert h.runs.log[-1] == ("finalizers", [])
        assert not h.workspace.files(uid).root.exists()
        assert len(h.life.registry) == 0


async def test_restart_re_adopts_with_the_same_registration_id_and_no_status_write(
    autojump_clock: trio.abc.Clock, tmp_path: Path
) -> None:
    async with harness(tmp_path) as h:
        key, uid = await make_ready(h, name="a", idle=600)
        runs, server = h.runs, h.server
        first_id = server.registrations[uid].registration_id
    writes = len(runs.status_writes())
    async with harness(tmp_path, runs=runs, server=server) as h2:
        with trio.fail_after(10):
            while h2.life.registry.accepting(uid) is None:  # noqa: ASYNC110
                await trio.sleep(0.01)
        entry = h2.life.registry.accepting(uid)
        assert entry is not None
        assert entry.registration_id == first_id
        assert h2.life.stats.adoptions == 1
        await trio.sleep(5)
        assert len(runs.status_writes()) == writes
        assert [c[2] for c in server.calls if c[0] == "RegisterFunction"][-1][0] == 1
        # and a cancel after the restart still unregisters the adopted registration
        runs.update_spec(key, cancelRequested=True)
        await h2.wait_phase(key, "Cancelled")
        assert uid not in server.registrations


async def test_restart_of_runtimed_and_server_together_is_a_visible_registration_loss(
    autojump_clock: trio.abc.Clock, tmp_path: Path
) -> None:
    # seed 000: a lost registration makes the Run not ready and enters registration
    # recovery (retry engine: attempt + 1); re-adoption is only for a registration the
    # server still holds, never a silent fresh registration under the old attempt
    async with harness(tmp_path) as h:
        key, uid = await make_ready(h, name="both", retry={"maxAttempts": 2, "backoff": "1s"})
        runs, server = h.runs, h.server
        first_id = server.registrations[uid].registration_id
    server.lose_all()  # the Pod's containers restarted: both processes are new
    async with harness(tmp_path, runs=runs, server=server) as h2:
        with trio.fail_after(30):
            while h2.status(key).get("attempt") != 2:  # noqa: ASYNC110
                await trio.sleep(0.01)
        status = h2.status(key)
        assert status["reason"] == "RegistrationLost", status
        assert "no longer holds" in status["message"]
        assert h2.life.stats.adoptions == 0
        status = await h2.wait_phase(key, "Ready", "Failed")
        assert status["phase"] == "Ready", status
        assert status["attempt"] == 2
        assert server.registrations[uid].attempt == 2
        assert server.registrations[uid].registration_id != first_id
        # no RegisterFunction ever re-created the lost registration under attempt 1
        assert [c[2][0] for c in server.calls if c[0] == "RegisterFunction"] == [1, 2]


async def test_restart_together_without_retries_left_fails_registration_lost(
    autojump_clock: trio.abc.Clock, tmp_path: Path
) -> None:
    async with harness(tmp_path) as h:
        key, uid = await make_ready(h, name="both1")
        runs, server = h.runs, h.server
    server.lose_all()
    async with harness(tmp_path, runs=runs, server=server) as h2:
        status = await h2.wait_phase(key, "Failed")
        assert status["reason"] == "RegistrationLost"
        assert status["attempt"] == 1
        assert uid not in server.registrations
        assert h2.life.registry.accepting(uid) is None


async def test_an_unreadable_adoption_probe_answer_still_adopts(
    autojump_clock: trio.abc.Clock, tmp_path: Path
) -> None:
    # a server with stricter registration-ID rules refuses the probe: adopt as before
    async with harness(tmp_path) as h:
        key, uid = await make_ready(h, name="strict", idle=600)
        runs, server = h.runs, h.server
        first_id = server.registrations[uid].registration_id
    server.status_error = FunctionRpcError("FunctionStatus", "INVALID_ARGUMENT", "bad id")
    writes = len(runs.status_writes())
    async with harness(tmp_path, runs=runs, server=server) as h2:
        with trio.fail_after(10):
            while h2.life.registry.accepting(uid) is None:  # noqa: ASYNC110
                await trio.sleep(0.01)
        server.status_error = None
        assert h2.life.registry.accepting(uid).registration_id == first_id  # type: ignore[union-attr]
        assert h2.life.stats.adoptions == 1
        assert len(runs.status_writes()) == writes
        assert h2.status(key)["phase"] == "Ready"


async def test_a_transient_adoption_probe_answer_is_asked_again(
    autojump_clock: trio.abc.Clock, tmp_path: Path
) -> None:
    async with harness(tmp_path) as h:
        key, uid = await make_ready(h, name="busy", idle=600)
        runs, server = h.runs, h.server
    server.lose_all()
    server.status_error = FunctionRpcError("FunctionStatus", "UNAVAILABLE", "restarting")
    registers = server.methods(uid).count("RegisterFunction")
    probes = server.methods(uid).count("FunctionStatus")
    async with harness(tmp_path, runs=runs, server=server) as h2:
        await trio.sleep(3)
        assert server.methods(uid).count("FunctionStatus") >= probes + 2  # asked again
        assert server.methods(uid).count("RegisterFunction") == registers  # nothing blind
        assert h2.life.registry.accepting(uid) is None
        server.status_error = None
        status = await h2.wait_phase(key, "Failed")
        assert status["reason"] == "RegistrationLost"


async def test_cancel_after_restart_looks_the_registration_up(
    autojump_clock: trio.abc.Clock, tmp_path: Path
) -> None:
    async with harness(tmp_path) as h:
        key, uid = await make_ready(h, name="lk")
        runs, server = h.runs, h.server
    runs.update_spec(key, cancelRequested=True)
    async with harness(tmp_path, runs=runs, server=server) as h2:
        await h2.wait_phase(key, "Cancelled")
        assert uid not in server.registrations
        assert server.methods(uid)[-2:] == ["RegisterFunction", "UnregisterFunction"]


async def test_runtime_server_restart_re_registers_with_attempt_2(
    autojump_clock: trio.abc.Clock, tmp_path: Path
) -> None:
    async with harness(tmp_path) as h:
        key, uid = await make_ready(h, name="s", retry={"maxAttempts": 2, "backoff": "1s"})
        first_id = h.life.registry.accepting(uid).registration_id  # type: ignore[union-attr]
        h.server.lose_all()
        with trio.fail_after(30):
            while h.status(key).get("attempt") != 2:  # noqa: ASYNC110
                await trio.sleep(0.01)
        assert h.status(key)["reason"] == "RegistrationLost"
        assert h.life.registry.accepting(uid) is None  # not ready while recovering
        status = await h.wait_phase(key, "Ready", "Failed")
        assert status["phase"] == "Ready"
        assert status["attempt"] == 2
        entry = h.life.registry.accepting(uid)
        assert entry is not None
        assert entry.attempt == 2
        assert entry.registration_id != first_id
        assert status["endpoint"]["url"].endswith(f"/functions/{uid}:invoke")


async def test_registration_loss_without_retries_left_fails(
    autojump_clock: trio.abc.Clock, tmp_path: Path
) -> None:
    async with harness(tmp_path) as h:
        key, uid = await make_ready(h, name="nl")
        h.server.fail(uid, "worker exited with status 1")
        status = await h.wait_phase(key, "Failed")
        assert status["reason"] == "RegistrationFailed"
        assert "worker exited with status 1" in status["message"]


async def test_run_moved_to_another_pod_is_released(
    autojump_clock: trio.abc.Clock, tmp_path: Path
) -> None:
    async with harness(tmp_path) as h:
        key, uid = await make_ready(h, name="mv")
        h.runs.set_status(key, phase="Pending", assignedPod=None, assignedPodUID=None, attempt=2)
        with trio.fail_after(10):
            while h.life.registry.get(uid) is not None:  # noqa: ASYNC110
                await trio.sleep(0.01)
        assert uid not in h.server.registrations
        assert not h.workspace.files(uid).root.exists()


async def test_cleanup_fences_a_registration_whose_id_it_cannot_learn(
    autojump_clock: trio.abc.Clock, tmp_path: Path
) -> None:
    async with harness(tmp_path) as h:
        key, uid = await make_ready(h, name="fence")
        runs, server = h.runs, h.server
    # the server's registration no longer matches this runtimed's digest (e.g. a changed
    # default): an idempotent re-register is refused with ALREADY_EXISTS
    server.registrations[uid].digest = "0" * 64
    runs.update_spec(key, cancelRequested=True)
    async with harness(tmp_path, runs=runs, server=server) as h2:
        await h2.wait_phase(key, "Cancelled")
    attempts = [c[2][0] for c in server.calls if c[0] == "RegisterFunction"]
    assert attempts == [1, 1, FENCE_ATTEMPT]
    assert uid not in server.registrations  # superseded, then unregistered
    assert server.methods(uid)[-1] == "UnregisterFunction"


async def test_metrics_count_registrations_and_endings(
    autojump_clock: trio.abc.Clock, tmp_path: Path
) -> None:
    async with harness(tmp_path) as h:
        sample = h.life.metrics.registry.get_sample_value
        key, _ = await make_ready(h, name="m1")
        assert sample("runtimed_function_registrations_total", {"outcome": "registered"}) == 1
        assert sample("runtimed_function_registrations_accepting") == 1
        assert sample("runtimed_function_register_seconds_count") == 1
        h.runs.update_spec(key, cancelRequested=True)
        await h.wait_phase(key, "Cancelled")
        assert sample("runtimed_function_runs_ended_total", {"outcome": "Cancelled"}) == 1
        assert sample("runtimed_function_registrations_accepting") == 0
        h.server.bad_handlers["main.bad"] = "ImportError: x"
        bad = h.create(fn_dict(name="m2", handler="main.bad"))
        await h.wait_phase(bad, "Failed")
        assert sample("runtimed_function_registrations_total", {"outcome": "failed"}) == 1
        assert sample("runtimed_function_runs_ended_total", {"outcome": "Failed"}) == 1
