"""The pure function-Run decision, rule by rule (seeds 000 and 002, issue 7)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from fn_builders import NOW, POD_UID, fn_dict, fn_run

from krt.api import Failure, FailureReason, Retry, Run, Terminal
from krt.api.patches import apply_merge_patch
from runtimed.functions.decisions import (
    AddFinalizer,
    Claim,
    Cleanup,
    CleanupKind,
    Fail,
    Ignore,
    LocalView,
    MarkReady,
    Register,
    Release,
    RemoveFinalizer,
    ResumeRetry,
    Serve,
    Wait,
    decide_function,
    failure_from_register_error,
    is_function_run,
)
from runtimed.functions.settings import FunctionSettings

SETTINGS = FunctionSettings(
    gateway_url="https://gw.example:8443", ca_bundle=b"-----BEGIN CERTIFICATE-----\nx\n"
)


def decide(run: Run, local: LocalView | None = None, *, now=NOW):  # type: ignore[no-untyped-def]
    return decide_function(
        run, pod_uid=POD_UID, local=local, endpoint=SETTINGS.endpoint(run), now=now
    )


def with_patch(run: Run, patch: dict) -> Run:  # type: ignore[type-arg]
    data = run.to_dict()
    data["status"] = apply_merge_patch(data.get("status"), patch)
    return Run.from_dict(data)


REGISTERED = LocalView(attempt=1, registered=True)


def test_dispatch_test_is_spec_mode_function() -> None:
    assert is_function_run(fn_dict())
    assert not is_function_run({"spec": {"mode": {"task": {}}}})
    assert not is_function_run({"spec": {}})


def test_tasks_and_other_pods_runs_are_ignored() -> None:
    task = Run.from_dict({**fn_dict(), "spec": {"runtime": "python", "mode": {"task": {}}}})
    assert isinstance(decide(task), Ignore)
    other = fn_run(pod_uid="another-pod")
    assert isinstance(decide(other), Ignore)
    # but local leftovers of a Run that moved away are released
    assert isinstance(decide(other, REGISTERED), Release)


def test_scheduled_is_claimed_with_start_time() -> None:
    action = decide(fn_run())
    assert isinstance(action, Claim)
    assert action.patch["phase"] == "Running"
    assert action.patch["startTime"].startswith("2026-11-29T09:00:00")


def test_finalizer_comes_before_registration() -> None:
    running = fn_run(phase="Running", start_time=NOW)
    assert isinstance(decide(running), AddFinalizer)
    with_finalizer = fn_run(phase="Running", start_time=NOW, finalizer=True)
    action = decide(with_finalizer)
    assert action == Register(attempt=1, adopt=False)


def test_registered_running_run_becomes_ready_with_the_endpoint() -> None:
    run = fn_run(phase="Running", start_time=NOW, finalizer=True)
    action = decide(run, REGISTERED)
    assert isinstance(action, MarkReady)
    assert action.patch["phase"] == "Ready"
    assert action.patch["endpoint"] == {
        "protocol": "HTTPS",
        "url": f"https://gw.example:8443/v1/namespaces/ns/runtimes/python/functions/{run.metadata.uid}:invoke",
        "caBundle": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCngK",
    }
    ready = next(c for c in action.patch["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("True", "FunctionRegistered")
    assert "registration" not in str(action.patch).lower().replace("functionregistered", "")


def test_ready_and_registered_serves_until_the_lifetime_deadline() -> None:
    run = fn_run(phase="Running", start_time=NOW, finalizer=True, timeout="10s")
    ready = with_patch(run, decide(run, REGISTERED).patch)  # type: ignore[union-attr]
    assert decide(ready, REGISTERED, now=NOW + timedelta(seconds=4)) == Serve(after=6.0)
    no_timeout = fn_run(phase="Running", start_time=NOW, finalizer=True)
    ready2 = with_patch(no_timeout, decide(no_timeout, REGISTERED).patch)  # type: ignore[union-attr]
    assert decide(ready2, REGISTERED) == Serve(after=None)


def test_ready_run_without_local_registration_is_re_adopted() -> None:
    run = fn_run(phase="Running", start_time=NOW, finalizer=True, attempt=3)
    ready = with_patch(run, decide(run, LocalView(attempt=3, registered=True)).patch)  # type: ignore[union-attr]
    assert decide(ready) == Register(attempt=3, adopt=True)
    # a registration of an older attempt is not the current one
    assert decide(ready, LocalView(attempt=2, registered=True)) == Register(attempt=3, adopt=True)


def test_registration_failure_goes_through_the_retry_engine() -> None:
    run = fn_run(phase="Running", start_time=NOW, finalizer=True, retry={"maxAttempts": 2})
    failure = Failure(FailureReason.REGISTRATION_FAILED, "ImportError: no module x", attempt=1)
    action = decide(run, LocalView(attempt=1, failure=failure))
    assert isinstance(action, Fail)
    assert isinstance(action.decision, Retry)
    assert action.decision.patch["attempt"] == 2
    assert action.decision.patch["phase"] == "Running"
    assert "ImportError: no module x" in action.decision.patch["message"]
    ready = next(c for c in action.decision.patch["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False"
    assert "ImportError" in ready["message"]
    # exhausted: Failed
    last = fn_run(
        phase="Running", start_time=NOW, finalizer=True, attempt=2, retry={"maxAttempts": 2}
    )
    action = decide(
        last,
        LocalView(attempt=2, failure=failure.__class__(failure.reason, failure.message, attempt=2)),
    )
    assert isinstance(action, Fail)
    assert isinstance(action.decision, Terminal)
    assert action.decision.patch["phase"] == "Failed"
    # a failure of an older attempt is not applied again
    assert isinstance(decide(last, LocalView(attempt=1, failure=failure)), Register)


def test_unimplemented_function_runtime_is_permanent() -> None:
    failure = failure_from_register_error("UNIMPLEMENTED", "method not found", attempt=1)
    assert failure is not None
    assert failure.reason is FailureReason.FUNCTION_UNIMPLEMENTED
    run = fn_run(phase="Running", start_time=NOW, finalizer=True, retry={"maxAttempts": 5})
    action = decide(run, LocalView(attempt=1, failure=failure))
    assert isinstance(action, Fail)
    assert isinstance(action.decision, Terminal)
    assert action.decision.why == "permanent"


@pytest.mark.parametrize("code", ["UNAVAILABLE", "DEADLINE_EXCEEDED", "CANCELLED"])
def test_transient_register_errors_are_not_failures(code: str) -> None:
    assert failure_from_register_error(code, "x", attempt=1) is None


def test_bad_handler_detail_is_in_the_failure() -> None:
    failure = failure_from_register_error(
        "FAILED_PRECONDITION", "registration reg_1 failed: ModuleNotFoundError: nope", attempt=1
    )
    assert failure is not None
    assert failure.reason is FailureReason.REGISTRATION_FAILED
    assert "ModuleNotFoundError: nope" in failure.message


def test_retry_backoff_waits_then_resumes() -> None:
    run = fn_run(
        phase="Running",
        start_time=NOW,
        finalizer=True,
        attempt=2,
        retry_after=NOW + timedelta(seconds=3),
    )
    assert decide(run, LocalView(attempt=1)) == Wait(3.0)
    action = decide(run, LocalView(attempt=1), now=NOW + timedelta(seconds=3))
    assert isinstance(action, ResumeRetry)
    assert action.patch["retryAfter"] is None


def test_cancel_cleans_up_then_cancels() -> None:
    run = fn_run(phase="Running", start_time=NOW, finalizer=True, cancel=True)
    action = decide(run, REGISTERED)
    assert isinstance(action, Cleanup)
    assert action.kind is CleanupKind.CANCEL
    assert action.patch is not None
    assert action.patch["phase"] == "Cancelled"
    assert not action.lookup
    # after a restart (nothing local) the registration ID must be looked up first
    after_restart = decide(run)
    assert isinstance(after_restart, Cleanup)
    assert after_restart.lookup
    # a Scheduled Run holds nothing on the server
    scheduled = decide(fn_run(cancel=True))
    assert isinstance(scheduled, Cleanup)
    assert not scheduled.lookup


def test_lifetime_expiry_ends_timeout_lifetime_exceeded() -> None:
    run = fn_run(phase="Running", start_time=NOW, finalizer=True, timeout="30s")
    ready = with_patch(run, decide(run, REGISTERED).patch)  # type: ignore[union-attr]
    action = decide(ready, REGISTERED, now=NOW + timedelta(seconds=30))
    assert isinstance(action, Cleanup)
    assert action.kind is CleanupKind.LIFETIME
    assert action.patch is not None
    assert (action.patch["phase"], action.patch["reason"]) == ("Timeout", "LifetimeExceeded")


def test_idle_expiry_ends_timeout_idle_timeout() -> None:
    run = fn_run(phase="Ready", start_time=NOW, finalizer=True, idle=10)
    action = decide(run, LocalView(attempt=1, registered=True, idle_expired=True))
    assert isinstance(action, Cleanup)
    assert action.kind is CleanupKind.IDLE
    assert action.patch is not None
    assert (action.patch["phase"], action.patch["reason"]) == ("Timeout", "IdleTimeout")


def test_deletion_runs_cleanup_then_removes_the_finalizer() -> None:
    run = fn_run(phase="Ready", start_time=NOW, finalizer=True, deleting=True)
    action = decide(run, REGISTERED)
    assert action == Cleanup(CleanupKind.DELETE, None, lookup=False)
    assert decide(run, LocalView(attempt=1, cleaned=True)) == RemoveFinalizer()
    # after a restart: look the registration up, then clean up
    assert decide(run) == Cleanup(CleanupKind.DELETE, None, lookup=True)
    gone = fn_run(phase="Ready", start_time=NOW, deleting=True)
    assert isinstance(decide(gone), Ignore)


def test_terminal_runs_release_then_drop_the_finalizer() -> None:
    run = fn_run(phase="Failed", start_time=NOW, finalizer=True)
    assert isinstance(decide(run, REGISTERED), Release)
    assert decide(run, LocalView(attempt=1, cleaned=True)) == RemoveFinalizer()
    assert decide(run) == RemoveFinalizer()
    assert isinstance(decide(fn_run(phase="Timeout", start_time=NOW)), Ignore)


def test_requeued_run_releases_its_old_registration() -> None:
    pending = fn_run(phase="Pending", pod_uid=None, attempt=2)
    assert isinstance(decide(pending, REGISTERED), Release)
    assert isinstance(decide(pending), Ignore)
