"""F4: a Ready function Run says Ready=False while its Runtime Server fails health checks.

Seed 000: "Ready=True means the assigned runtimed has registered the Run UID with the local
Runtime Server and can accept invokes"; while that server fails its health checks runtimed
answers every invoke 503, so the Ready condition must say False (reason ``Unavailable``,
message = the health failure), written once per outage by the reconcile (no worker writes
status). The phase stays Ready (the registration is not known to be lost; no attempt is
used). Once the server answers, FunctionStatus confirms the registration before
``Ready=True`` is written back; a registration the server no longer holds is the
``RegistrationLost`` path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio
from fn_builders import NOW, POD_UID, fn_dict, fn_run
from fn_harness import Harness, harness

from runtimed.functions.decisions import (
    Confirm,
    LocalView,
    MarkReady,
    MarkUnavailable,
    Register,
    Serve,
    decide_function,
)
from runtimed.functions.settings import FunctionSettings
from runtimed.readiness import HealthState

DOWN = HealthState(False, "RuntimeServerUnreachable", "Health: connection refused")
UNHEALTHY = HealthState(False, "RuntimeServerUnhealthy", "worker pool exhausted")
UP = HealthState(True, "RuntimeServerHealthy", "ok")
SETTINGS = FunctionSettings(gateway_url="https://gw.example:8443")


def ready_condition(status: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == "Ready")


async def make_ready(h: Harness, **kwargs: Any) -> tuple[str, str]:
    obj = fn_dict(**kwargs)
    key = h.create(obj)
    status = await h.wait_phase(key, "Ready", "Failed")
    assert status["phase"] == "Ready", status
    return key, obj["metadata"]["uid"]


async def wait_ready_status(h: Harness, key: str, wanted: str) -> dict[str, Any]:
    with trio.fail_after(60):
        while ready_condition(h.status(key))["status"] != wanted:  # noqa: ASYNC110
            await trio.sleep(0.01)
    return h.status(key)


async def test_ready_false_while_the_server_is_down_then_true_once_confirmed(
    autojump_clock: trio.abc.Clock, tmp_path: Path
) -> None:
    async with harness(tmp_path) as h:
        key, uid = await make_ready(h, name="fecho")
        writes = len(h.runs.status_writes())
        h.server.down = True
        h.life.on_server_health(DOWN)
        status = await wait_ready_status(h, key, "False")
        ready = ready_condition(status)
        assert (status["phase"], ready["reason"], status["reason"]) == (
            "Ready",
            "Unavailable",
            "Unavailable",
        )
        assert "RuntimeServerUnreachable: Health: connection refused" in ready["message"]
        assert status["attempt"] == 1
        # once per outage: more failed probes and a changed health message write nothing
        h.life.on_server_health(UNHEALTHY)
        h.life.on_server_health(DOWN)
        await trio.sleep(30)
        assert len(h.runs.status_writes()) == writes + 1
        # the server answers again, still holding the registration: confirmed, then True
        h.server.down = False
        statuses_before = h.server.methods(uid).count("FunctionStatus")
        h.life.on_server_health(UP)
        status = await wait_ready_status(h, key, "True")
        assert (status["phase"], ready_condition(status)["reason"]) == (
            "Ready",
            "FunctionRegistered",
        )
        assert status["attempt"] == 1
        assert status.get("message") is None
        assert h.server.methods(uid).count("FunctionStatus") > statuses_before
        assert "RegisterFunction" not in h.server.methods(uid)[1:]  # no re-registration
        assert len(h.runs.status_writes()) == writes + 2
        assert h.life.registry.accepting(uid) is not None


async def test_a_registration_gone_after_the_outage_is_registration_lost(
    autojump_clock: trio.abc.Clock, tmp_path: Path
) -> None:
    async with harness(tmp_path, poll_max=60.0, poll_min=60.0) as h:
        key, uid = await make_ready(h, name="gone", retry={"maxAttempts": 1})
        h.server.down = True
        h.life.on_server_health(DOWN)
        await wait_ready_status(h, key, "False")
        h.server.lose_all()  # the server restarted: the registration is gone
        h.server.down = False
        h.life.on_server_health(UP)
        status = await h.wait_phase(key, "Failed", within=30)
        assert status["reason"] == "RegistrationLost"
        assert ready_condition(status)["status"] == "False"


async def test_a_flap_shorter_than_a_write_writes_nothing(
    autojump_clock: trio.abc.Clock, tmp_path: Path
) -> None:
    async with harness(tmp_path) as h:
        key, _ = await make_ready(h, name="flap")
        writes = len(h.runs.status_writes())
        h.life.on_server_health(DOWN)
        h.life.on_server_health(UP)  # before the worker ran
        await trio.sleep(5)
        assert ready_condition(h.status(key))["status"] == "True"
        assert len(h.runs.status_writes()) == writes


# --- the pure decision ------------------------------------------------------------------------


def decide(run: Any, local: LocalView | None, *, server_down: str | None) -> Any:
    return decide_function(
        run,
        pod_uid=POD_UID,
        local=local,
        endpoint=SETTINGS.endpoint(run),
        now=NOW,
        server_down=server_down,
    )


def ready_run() -> Any:
    running = fn_run(phase="Running", start_time=NOW, finalizer=True)
    action = decide(running, LocalView(attempt=1, registered=True), server_down=None)
    assert isinstance(action, MarkReady)
    return fn_run_with(running, action.patch)


def test_decision_marks_unavailable_once_then_serves() -> None:
    run = ready_run()
    local = LocalView(attempt=1, registered=True, unconfirmed=True)
    action = decide(run, local, server_down="RuntimeServerUnreachable: refused")
    assert isinstance(action, MarkUnavailable)
    assert "phase" not in action.patch  # the phase stays Ready
    (condition,) = [c for c in action.patch["conditions"] if c["type"] == "Ready"]
    assert (condition["status"], condition["reason"]) == ("False", "Unavailable")
    assert "RuntimeServerUnreachable: refused" in condition["message"]
    marked = fn_run_with(run, action.patch)
    assert isinstance(decide(marked, local, server_down="other text"), Serve)
    # healthy again: confirm first, then Ready=True
    assert isinstance(decide(marked, local, server_down=None), Confirm)
    confirmed = LocalView(attempt=1, registered=True)
    assert isinstance(decide(marked, confirmed, server_down=None), MarkReady)


def test_decision_after_a_restart_while_down_marks_unavailable_before_adopting() -> None:
    run = ready_run()
    assert isinstance(decide(run, None, server_down="down"), MarkUnavailable)
    marked = fn_run_with(run, decide(run, None, server_down="down").patch)
    assert isinstance(decide(marked, None, server_down="down"), Serve)
    assert decide(marked, None, server_down=None) == Register(attempt=1, adopt=True)


def test_decision_ignores_health_for_a_run_still_registering() -> None:
    running = fn_run(phase="Running", start_time=NOW, finalizer=True)
    assert decide(running, None, server_down="down") == Register(attempt=1, adopt=False)


def fn_run_with(run: Any, patch: dict[str, Any]) -> Any:
    from krt.api import Run
    from krt.api.patches import apply_merge_patch

    data = run.to_dict()
    data["status"] = apply_merge_patch(data.get("status"), patch)
    return Run.from_dict(data)
