"""``krt get|list|describe|cancel|delete|wait|run|function create`` against localkube.

The tests play the control plane and runtimed: they patch Run status (phases, outputs,
endpoint) while the command waits, through the real API server (CRD validation included).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
import yaml
from click.testing import Result

from krt.cli.exitcodes import ExitCode
from krt.kube.client import Kube
from krt.kube.errors import NotFound
from krt.kube.resources import EVENTS, RUNS
from localkube.apiserver import ApiServerConfig, ApiServerHandle, running_apiserver

from .conftest import NS, CliRun, eventually, set_status, task_manifest

UID = "2c24c1f0-9f8f-4f80-82d5-3dd16a12d1e6"


async def wait_created(kube: Kube, name: str | None = None) -> dict[str, Any]:
    """The first Run (or the one named) once it exists."""
    with trio.fail_after(10):
        while True:
            items, _ = await kube.list(RUNS, NS)
            for item in items:
                if name is None or item["metadata"]["name"] == name:
                    return item
            await trio.sleep(0.02)


class Background:
    """Run one CLI command in the background; ``await .result()`` for its Result."""

    def __init__(self, nursery: trio.Nursery, cli: CliRun, *args: str) -> None:
        self._done = trio.Event()
        self._result: Result | None = None
        nursery.start_soon(self._run, cli, args)

    async def _run(self, cli: CliRun, args: tuple[str, ...]) -> None:
        self._result = await cli(*args)
        self._done.set()

    async def result(self) -> Result:
        with trio.fail_after(20):
            await self._done.wait()
        assert self._result is not None
        return self._result


# -- get / list ----------------------------------------------------------------------------


async def test_get_one_run_in_each_format(kube: Kube, cli: CliRun) -> None:
    await kube.create(RUNS, task_manifest("one"))
    as_yaml = yaml.safe_load((await cli("get", "one", "-o", "yaml")).stdout)
    assert as_yaml["kind"] == "Run"
    assert as_yaml["metadata"]["name"] == "one"
    assert "managedFields" not in as_yaml["metadata"]
    as_json = json.loads((await cli("get", "one", "-o", "json")).stdout)
    assert as_json["spec"]["mode"] == {"task": {"args": ["-c", "print(1)"]}}
    assert (await cli("get", "one", "-o", "name")).stdout == "run.kruntimes.io/one\n"


async def test_list_all_namespaces_and_selector(kube: Kube, cli: CliRun) -> None:
    await kube.create(
        RUNS,
        {**task_manifest("a"), "metadata": {"name": "a", "namespace": NS, "labels": {"team": "x"}}},
    )
    await kube.create(RUNS, task_manifest("b"))
    listed = await cli("list")
    assert [line.split()[0] for line in listed.stdout.splitlines()] == ["NAME", "a", "b"]
    everywhere = await cli("get", "-A")
    assert everywhere.stdout.splitlines()[0].split()[:2] == ["NAMESPACE", "NAME"]
    assert everywhere.stdout.splitlines()[1].split()[:2] == ["default", "a"]
    selected = await cli("list", "-l", "team=x", "-o", "name")
    assert selected.stdout == "run.kruntimes.io/a\n"
    empty = await cli("list", "-n", "kube-system")
    assert empty.exit_code == 0
    assert empty.stdout == ""
    assert empty.stderr == "No Runs found in namespace kube-system.\n"


async def test_missing_run_is_exit_3_with_one_line(cli: CliRun) -> None:
    result = await cli("get", "nope")
    assert result.exit_code == ExitCode.NOT_FOUND
    assert (
        result.stderr
        == 'error: Run "nope" not found in namespace "default" (see krt list -n default)\n'
    )
    for args in (
        ("describe", "nope"),
        ("cancel", "nope"),
        ("delete", "nope"),
        ("wait", "nope"),
        ("logs", "nope"),
        ("invoke", "nope", "-d", "{}"),
        ("runtime", "get", "nope"),
    ):
        result = await cli(*args)
        assert result.exit_code == ExitCode.NOT_FOUND, (args, result.output)
        assert "not found" in result.stderr
        assert len(result.stderr.splitlines()) == 1


async def test_a_cluster_without_kruntimes_says_so(apiserver: ApiServerHandle, cli: CliRun) -> None:
    async with running_apiserver(ApiServerConfig()) as bare:
        result = await cli("get", env={"KRT_KUBECONFIG": str(bare.kubeconfig_path)})
    assert result.exit_code == ExitCode.NOT_FOUND
    assert "kruntimes is not installed" in result.stderr


async def test_runtime_list_and_get(kube: Kube, cli: CliRun) -> None:
    assert "No Runtimes found" in (await cli("runtime", "list", "-n", "kube-system")).stderr
    listed = await cli("runtime", "list")
    assert [line.split()[:4] for line in listed.stdout.splitlines()[1:]] == [
        ["bash", "0/2", "3", "runs/pod"],
        ["python", "0/2", "3", "runs/pod"],
    ]
    got = yaml.safe_load((await cli("runtime", "get", "python", "-o", "yaml")).stdout)
    assert got["spec"]["replicas"] == 2


async def test_version_prints_client_and_server(cli: CliRun) -> None:
    result = await cli("version")
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0].startswith("Client Version: kruntimes ")
    assert lines[1].startswith("Server Version: v")
    client_only = await cli("version", "--client", "-o", "json")
    assert set(json.loads(client_only.stdout)) == {"clientVersion"}


# -- describe ------------------------------------------------------------------------------


async def test_describe_shows_status_and_the_runs_events(kube: Kube, cli: CliRun) -> None:
    run = await kube.create(RUNS, task_manifest("d", timeout="5m"))
    await set_status(
        kube,
        "d",
        {"phase": "Scheduled", "attempt": 1, "assignedPod": "rt-1", "assignedPodUID": "p-1"},
    )
    involved = {
        "apiVersion": "kruntimes.io/v1alpha1",
        "kind": "Run",
        "name": "d",
        "namespace": NS,
        "uid": run["metadata"]["uid"],
    }
    for index, (uid_of, reason) in enumerate(
        ((involved, "Scheduled"), ({**involved, "uid": "other"}, "Unrelated"))
    ):
        await kube.create(
            EVENTS,
            {
                "metadata": {"name": f"d.{index}", "namespace": NS},
                "involvedObject": uid_of,
                "reason": reason,
                "message": f"{reason} message",
                "type": "Normal",
                "source": {"component": "kruntimes-scheduler"},
            },
        )
    result = await cli("describe", "d")
    assert result.exit_code == 0, result.stderr
    assert "Timeout:" in result.stdout
    assert "5m" in result.stdout
    assert "Assigned Pod:" in result.stdout
    assert "rt-1 (uid p-1)" in result.stdout
    assert "Scheduled message" in result.stdout
    assert "Unrelated" not in result.stdout


# -- cancel / delete -----------------------------------------------------------------------


async def test_cancel_sets_cancel_requested_and_is_idempotent(kube: Kube, cli: CliRun) -> None:
    await kube.create(RUNS, task_manifest("c"))
    result = await cli("cancel", "c")
    assert result.exit_code == 0
    assert result.stdout == "run.kruntimes.io/c cancel requested\n"
    assert (await kube.get(RUNS, "c", NS))["spec"]["cancelRequested"] is True
    assert (await cli("cancel", "c")).exit_code == 0
    await set_status(kube, "c", {"phase": "Cancelled", "reason": "Cancelled"})
    done = await cli("cancel", "c")
    assert done.stdout == "run.kruntimes.io/c already finished (Cancelled)\n"


async def test_cancel_wait_returns_when_terminal(kube: Kube, cli: CliRun) -> None:
    await kube.create(RUNS, task_manifest("cw"))
    async with trio.open_nursery() as nursery:
        job = Background(nursery, cli, "cancel", "cw", "--wait")

        async def requested() -> bool:
            return bool((await kube.get(RUNS, "cw", NS))["spec"].get("cancelRequested"))

        await eventually(requested)
        await set_status(kube, "cw", {"phase": "Cancelled", "reason": "Cancelled"})
        result = await job.result()
    assert result.exit_code == 0
    assert result.stdout.splitlines()[-1] == "run.kruntimes.io/cw Cancelled"


async def test_delete_and_delete_wait_for_finalizers(kube: Kube, cli: CliRun) -> None:
    await kube.create(RUNS, task_manifest("gone"))
    assert (await cli("delete", "gone")).stdout == 'run.kruntimes.io "gone" deleted\n'
    with pytest.raises(NotFound):
        await kube.get(RUNS, "gone", NS)
    manifest = task_manifest("held")
    manifest["metadata"]["finalizers"] = ["kruntimes.io/registration-cleanup"]
    await kube.create(RUNS, manifest)
    async with trio.open_nursery() as nursery:
        job = Background(nursery, cli, "delete", "held", "--wait")

        async def deleting() -> bool:
            return bool((await kube.get(RUNS, "held", NS))["metadata"].get("deletionTimestamp"))

        await eventually(deleting)
        await trio.sleep(0.2)
        assert not job._done.is_set()  # still waiting for the finalizer
        await kube.patch(RUNS, "held", NS, {"metadata": {"finalizers": None}})
        result = await job.result()
    assert result.exit_code == 0, result.output


# -- wait ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "phases", "code"),
    [
        ((), ["Scheduled", "Running", "Succeeded"], ExitCode.OK),
        ((), ["Running", "Failed"], ExitCode.RUN_UNSUCCESSFUL),
        (("--for", "phase=Running"), ["Scheduled", "Running"], ExitCode.OK),
        (("--for", "phase=Running"), ["Timeout"], ExitCode.RUN_UNSUCCESSFUL),
    ],
)
async def test_wait(
    kube: Kube, cli: CliRun, args: tuple[str, ...], phases: list[str], code: ExitCode
) -> None:
    await kube.create(RUNS, task_manifest("w"))
    async with trio.open_nursery() as nursery:
        job = Background(nursery, cli, "wait", "w", *args)
        await trio.sleep(0.1)
        for phase in phases:
            status: dict[str, Any] = {"phase": phase}
            if phase != "Pending":
                status.update(attempt=1, assignedPod="rt-1", assignedPodUID="p-1")
            await set_status(kube, "w", status)
        result = await job.result()
    assert result.exit_code == code, result.output
    assert result.stdout.splitlines()[-1].startswith(f"run.kruntimes.io/w {phases[-1]}")
    assert result.stderr.startswith("w: ")  # plain progress lines (not a terminal)


async def test_wait_for_delete(kube: Kube, cli: CliRun) -> None:
    await kube.create(RUNS, task_manifest("wd"))
    async with trio.open_nursery() as nursery:
        job = Background(nursery, cli, "wait", "wd", "--for", "delete")
        await trio.sleep(0.1)
        await kube.delete(RUNS, "wd", NS)
        result = await job.result()
    assert result.exit_code == 0
    assert "deleted" in result.stdout


@pytest.mark.parametrize("condition", ["ready", "phase=Ready"])
async def test_wait_for_ready_on_a_task_is_refused_at_once(
    kube: Kube, cli: CliRun, condition: str
) -> None:
    # F13: a task Run never becomes Ready; waiting would take its whole life, then exit 1
    await kube.create(RUNS, task_manifest("wr"))
    await set_status(
        kube, "wr", {"phase": "Running", "attempt": 1, "assignedPod": "rt-1", "assignedPodUID": "p"}
    )
    # (--timeout bounds the test when the refusal is missing: exit 7 after 3 s)
    result = await cli("wait", "wr", "--for", condition, "--timeout", "3s")
    assert result.exit_code == ExitCode.USAGE, result.output
    assert "wr is a task Run: it never becomes Ready; use --for finished" in result.stderr
    assert result.stdout == ""


async def test_wait_for_ready_needs_the_ready_condition_true(kube: Kube, cli: CliRun) -> None:
    # T3 F2: phase Ready with Ready=False (its Runtime Server is down) is not ready, as
    # kubectl wait --for=condition=Ready; krt invoke refuses it too
    await kube.create(
        RUNS,
        task_manifest("fr", mode={"function": {"handler": "main.invoke"}}),
    )
    assigned = {"attempt": 1, "assignedPod": "rt-1", "assignedPodUID": "p"}
    now = "2026-01-01T00:00:00Z"
    unavailable = {
        "type": "Ready",
        "status": "False",
        "reason": "Unavailable",
        "lastTransitionTime": now,
    }
    await set_status(kube, "fr", {"phase": "Ready", **assigned, "conditions": [unavailable]})
    down = await cli("wait", "fr", "--for", "ready", "--timeout", "0")
    assert down.exit_code == ExitCode.TIMED_OUT, down.output
    registered = {
        "type": "Ready",
        "status": "True",
        "reason": "FunctionRegistered",
        "lastTransitionTime": now,
    }
    await set_status(kube, "fr", {"phase": "Ready", **assigned, "conditions": [registered]})
    up = await cli("wait", "fr", "--for", "ready", "--timeout", "0")
    assert up.exit_code == 0, up.output


async def test_wait_timeout_zero_checks_once(kube: Kube, cli: CliRun) -> None:
    # F18: as kubectl wait --timeout=0: the condition now, no waiting
    await kube.create(RUNS, task_manifest("w0"))
    await set_status(
        kube, "w0", {"phase": "Running", "attempt": 1, "assignedPod": "rt-1", "assignedPodUID": "p"}
    )
    running = await cli("wait", "w0", "--timeout", "0")
    assert running.exit_code == ExitCode.TIMED_OUT, running.output
    assert "Run w0 has not reached finished (phase Running; --timeout 0)" in running.stderr
    assert (await cli("wait", "w0", "--for", "phase=Running", "--timeout", "0s")).exit_code == 0
    assert (await cli("wait", "w0", "--for", "delete", "--timeout", "0")).exit_code == (
        ExitCode.TIMED_OUT
    )
    await set_status(kube, "w0", {"phase": "Succeeded", "reason": "Succeeded"})
    done = await cli("wait", "w0", "--timeout", "0")
    assert done.exit_code == ExitCode.OK, done.output
    assert done.stdout.startswith("run.kruntimes.io/w0 Succeeded")


# -- run -----------------------------------------------------------------------------------


async def test_run_wait_prints_final_phase_and_outputs(
    kube: Kube, cli: CliRun, tmp_path: Any
) -> None:
    script = tmp_path / "job.py"
    script.write_text("print('hi')\n")
    async with trio.open_nursery() as nursery:
        job = Background(
            nursery,
            cli,
            "run",
            "--runtime",
            "python",
            "--file",
            str(script),
            "-e",
            "MODE=full",
            "--timeout",
            "90s",
            "--retries",
            "1",
            "--backoff",
            "2s",
            "--ttl",
            "1h",
            "--wait",
            "--",
            "--day",
            "1",
        )
        created = await wait_created(kube)
        name = created["metadata"]["name"]
        assert name.startswith("run-")
        assert created["spec"] == {
            "runtime": "python",
            "env": [{"name": "MODE", "value": "full"}],
            "timeout": "1m30s",
            "ttlSecondsAfterFinished": 3600,
            "retryPolicy": {"maxAttempts": 2, "backoff": "2s"},
            "source": {"inline": "print('hi')\n", "inlinePath": "job.py"},
            "mode": {"task": {"args": ["--day", "1"]}},
        } | {
            k: v
            for k, v in created["spec"].items()
            if k
            not in {
                "runtime",
                "env",
                "timeout",
                "ttlSecondsAfterFinished",
                "retryPolicy",
                "source",
                "mode",
            }
        }
        await set_status(
            kube,
            name,
            {"phase": "Running", "attempt": 1, "assignedPod": "rt-1", "assignedPodUID": "p-1"},
        )
        await set_status(
            kube,
            name,
            {
                "phase": "Succeeded",
                "reason": "Succeeded",
                "outputs": {"rows": "42", "file": "out.csv"},
            },
        )
        result = await job.result()
    assert result.exit_code == 0, result.output
    assert result.stdout == "file=out.csv\nrows=42\n"
    assert f"run.kruntimes.io/{name} Succeeded (attempt 1)" in result.stderr


async def test_run_wait_failure_is_exit_1_with_the_reason(kube: Kube, cli: CliRun) -> None:
    async with trio.open_nursery() as nursery:
        job = Background(nursery, cli, "run", "bad", "--runtime", "bash", "--wait", "--", "exit 3")
        await wait_created(kube, "bad")
        await set_status(
            kube,
            "bad",
            {
                "phase": "Failed",
                "reason": "ExecutionFailed",
                "message": "exit code 3",
                "attempt": 1,
            },
        )
        result = await job.result()
    assert result.exit_code == ExitCode.RUN_UNSUCCESSFUL
    assert "run.kruntimes.io/bad Failed (attempt 1; ExecutionFailed; exit code 3)" in result.stderr


async def test_run_without_wait_prints_the_name(kube: Kube, cli: CliRun) -> None:
    result = await cli("run", "--runtime", "bash", "-o", "name", "--", "echo hi")
    assert result.exit_code == 0
    name = result.stdout.strip().removeprefix("run.kruntimes.io/")
    obj = await kube.get(RUNS, name, NS)
    assert obj["spec"]["mode"] == {"task": {"args": ["echo hi"]}}
    plain = await cli("run", "named", "--runtime", "bash", "--", "echo hi")
    assert plain.stdout == "run.kruntimes.io/named created\n"


async def test_a_missing_runtime_is_named_before_anything_is_created(
    kube: Kube, cli: CliRun
) -> None:
    result = await cli("run", "--runtime", "pyhton", "--", "-c", "1")
    assert result.exit_code == ExitCode.NOT_FOUND, result.output
    assert result.stderr == (
        'error: Runtime "pyhton" not found in namespace "default" (Runtimes there: bash, python)\n'
    )
    assert (await kube.list(RUNS, NS))[0] == []


async def test_run_accepts_a_zero_ttl_and_backoff_as_the_api_does(kube: Kube, cli: CliRun) -> None:
    """F14: ``--ttl 0s`` (delete at once, like a Job's 0) and ``--backoff 0s`` (retry at
    once) were refused as "must be positive" although the CRD admits both."""
    result = await cli(
        "run", "z", "--runtime", "bash", "--ttl", "0s", "--retries", "1", "--backoff", "0s",
        "--", "true",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    spec = (await kube.get(RUNS, "z", NS))["spec"]
    assert spec["ttlSecondsAfterFinished"] == 0
    assert spec["retryPolicy"] == {"maxAttempts": 2, "backoff": "0s"}


async def test_run_rejected_by_the_api_server_names_the_field(cli: CliRun, tmp_path: Any) -> None:
    (tmp_path / "main.py").write_text("def invoke(r):\n    return r\n")
    result = await cli(
        "function",
        "create",
        "f",
        "--runtime",
        "python",
        "--handler",
        "main.invoke",
        "--file",
        str(tmp_path / "main.py"),
        "--idle-timeout",
        "1000000h",
    )
    assert result.exit_code == ExitCode.INVALID, result.output
    assert "spec.mode.function.idleTimeoutSeconds" in result.stderr
    assert len(result.stderr.splitlines()) == 1
    taken = await cli("run", "same", "--runtime", "bash", "--", "x")
    assert taken.exit_code == 0
    again = await cli("run", "same", "--runtime", "bash", "--", "x")
    assert again.exit_code == ExitCode.CONFLICT
    assert "omit NAME to generate one" in again.stderr


async def test_run_wait_timeout_is_exit_7(kube: Kube, cli: CliRun) -> None:
    result = await cli("run", "--runtime", "bash", "--wait", "--wait-timeout", "200ms", "--", "x")
    assert result.exit_code == ExitCode.TIMED_OUT
    assert "did not finish within 200ms" in result.stderr


# -- function create -----------------------------------------------------------------------


@pytest.fixture
def handler_file(tmp_path: Any) -> Any:
    path = tmp_path / "main.py"
    path.write_text("def invoke(request):\n    return {'outputs': {'ok': 'yes'}}\n")
    return path


async def test_function_create_waits_for_ready_and_prints_the_endpoint(
    kube: Kube, cli: CliRun, handler_file: Any
) -> None:
    async with trio.open_nursery() as nursery:
        job = Background(
            nursery,
            cli,
            "function",
            "create",
            "fn",
            "--runtime",
            "python",
            "--handler",
            "main.invoke",
            "--file",
            str(handler_file),
            "--idle-timeout",
            "10m",
            "--timeout",
            "1h",
        )
        created = await wait_created(kube, "fn")
        assert created["spec"]["mode"] == {
            "function": {"handler": "main.invoke", "idleTimeoutSeconds": 600}
        }
        assert created["spec"]["timeout"] == "1h"
        assert created["spec"]["source"]["inlinePath"] == "main.py"
        uid = created["metadata"]["uid"]
        await set_status(
            kube,
            "fn",
            {"phase": "Running", "attempt": 1, "assignedPod": "rt-1", "assignedPodUID": "p-1"},
        )
        url = f"https://runtime-gateway.kruntimes-system.svc/v1/namespaces/default/runtimes/python/functions/{uid}:invoke"
        await set_status(
            kube, "fn", {"phase": "Ready", "endpoint": {"protocol": "HTTPS", "url": url}}
        )
        result = await job.result()
    assert result.exit_code == 0, result.output
    assert result.stdout == url + "\n"
    assert "function fn is Ready" in result.stderr


async def test_function_create_reports_a_failed_registration(
    kube: Kube, cli: CliRun, handler_file: Any
) -> None:
    async with trio.open_nursery() as nursery:
        job = Background(
            nursery,
            cli,
            "function",
            "create",
            "broken",
            "--runtime",
            "python",
            "--handler",
            "main.invoke",
            "--file",
            str(handler_file),
        )
        await wait_created(kube, "broken")
        await set_status(
            kube,
            "broken",
            {
                "phase": "Failed",
                "reason": "RegistrationFailed",
                "message": "ImportError: no module named numpy",
            },
        )
        result = await job.result()
    assert result.exit_code == ExitCode.RUN_UNSUCCESSFUL
    assert result.stderr.splitlines()[-1] == (
        "error: function broken ended Failed instead of becoming Ready: RegistrationFailed; "
        "ImportError: no module named numpy (see krt describe broken and krt logs broken --runtimed)"
    )


async def test_run_wait_interrupted_says_the_run_keeps_running(
    kube: Kube, cli: CliRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    import krt.cli.run_cmd as run_cmd_module

    async def interrupted(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(run_cmd_module, "await_final", interrupted)
    result = await cli("run", "ctrlc", "--runtime", "bash", "--wait", "--", "x")
    assert result.exit_code == ExitCode.INTERRUPTED
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "error: interrupted; run.kruntimes.io/ctrlc keeps running (krt cancel ctrlc -n default "
    )
    assert "stops it, krt logs ctrlc -n default " in last
    assert last.endswith("shows it)")
