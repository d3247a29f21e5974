"""The usual mistakes of a new user (issue #9 acceptance), each with a message saying what to do.

Found by following the README on a fresh clone: an empty stdin in a script, ``python`` typed
after ``--`` for the python Runtime, an RBAC denial, no kubeconfig, no gateway URL outside the
cluster, a function that stays Pending because the pool is full, and a function handler's
prints that ``krt logs`` did not show.
"""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
import yaml
from click.testing import CliRunner, Result

from krt.api.crds import run_crd, runtime_crd
from krt.cli.credentials import ServiceAccountRef, request_token
from krt.cli.exitcodes import ExitCode
from krt.cli.failures import CommandFailed, describe_api_error
from krt.cli.function_cmd import without_traceback
from krt.cli.invoking import Invocation, post
from krt.cli.logs import parse_line
from krt.cli.main import krt
from krt.cli.waiting import Progress, stuck_summary, time_limit
from krt.kube.client import Kube, connect
from krt.kube.errors import ApiError
from krt.kube.resources import PODS, RUNS, SERVICEACCOUNTS
from localkube.apiserver import ApiServerConfig, ApiServerHandle, running_apiserver
from localkube.node.layout import PodPaths

from .conftest import CRDS, NS, durable_cluster, invoke_cli, set_status, task_manifest
from .test_cli_validation import UNREACHABLE_KUBECONFIG


@pytest.fixture
def unreachable(tmp_path: Path) -> Path:
    """A kubeconfig whose API server is unreachable: getting past validation is exit 6."""
    path = tmp_path / "kubeconfig"
    path.write_text(UNREACHABLE_KUBECONFIG)
    (tmp_path / "job.py").write_text("print('hi')\n")
    return path


def run(kubeconfig: Path, *args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(krt, list(args), env={"KRT_KUBECONFIG": str(kubeconfig)}, input=input)


# -- krt invoke without -d, stdin not a terminal and empty (a script, cron, CI) -----------


def test_invoke_with_nothing_on_stdin_sends_the_default_body(unreachable: Path) -> None:
    result = run(unreachable, "invoke", "f", input="")
    # Past validation ({} is valid JSON): the unreachable API server answers, not a JSON error.
    assert result.exit_code == ExitCode.UNREACHABLE, result.output
    assert "invalid JSON" not in result.stderr


def test_invoke_with_blank_stdin_sends_the_default_body(unreachable: Path) -> None:
    result = run(unreachable, "invoke", "f", input="\n  \n")
    assert result.exit_code == ExitCode.UNREACHABLE, result.output


def test_invoke_dash_with_empty_stdin_says_stdin_was_empty(unreachable: Path) -> None:
    result = run(unreachable, "invoke", "f", "-d", "-", input="")
    assert result.exit_code == ExitCode.USAGE, result.output
    assert "stdin was empty" in result.stderr
    assert "-d @FILE" in result.stderr


def test_invoke_still_rejects_bad_json_piped_in(unreachable: Path) -> None:
    result = run(unreachable, "invoke", "f", input="not json")
    assert result.exit_code == ExitCode.USAGE
    assert "stdin: invalid JSON" in result.stderr


# -- krt run --runtime python -- python ... -----------------------------------------------


@pytest.mark.parametrize("command", ["python", "python3", "/usr/bin/python3"])
def test_run_python_rejects_a_leading_python_command(unreachable: Path, command: str) -> None:
    result = run(
        unreachable, "run", "--runtime", "python", "--", command, "-c", "raise SystemExit(3)"
    )
    assert result.exit_code == ExitCode.USAGE, result.output
    assert "the python Runtime already runs python" in result.stderr
    assert "krt run --runtime python -- -c 'raise SystemExit(3)'" in result.stderr


@pytest.mark.parametrize(
    ("args", "suggestion"),
    [
        (["bash", "-c", "exit 3"], "krt run --runtime bash -- 'exit 3'"),
        (["echo", "a b", "c"], """krt run --runtime bash -- 'echo '"'"'a b'"'"' c'"""),
    ],
)
def test_run_bash_rejects_a_command_split_over_arguments(
    unreachable: Path, args: list[str], suggestion: str
) -> None:
    result = run(unreachable, "run", "--runtime", "bash", "--", *args)
    assert result.exit_code == ExitCode.USAGE, result.output
    assert f"got {len(args)} arguments" in result.stderr
    assert suggestion in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["--runtime", "python", "--", "-c", "print(1)"],
        ["--runtime", "bash", "--", "echo a; exit 3"],
        ["--runtime", "bash", "--file", "{dir}/job.py", "--", "a", "b"],  # script arguments
        ["--runtime", "python", "--file", "{dir}/job.py", "--", "python"],  # a script argument
        ["--runtime", "bash", "--", "python"],  # a Bash command line may start with python
    ],
)
def test_run_accepts_python_where_it_is_meant(unreachable: Path, args: list[str]) -> None:
    argv = [a.replace("{dir}", str(unreachable.parent)) for a in args]
    result = run(unreachable, "run", *argv)
    assert result.exit_code == ExitCode.UNREACHABLE, result.output


# -- what to do about an RBAC denial or a missing kubeconfig -------------------------------


def test_a_forbidden_answer_names_the_permission_and_the_check() -> None:
    error = ApiError(
        403,
        "Forbidden",
        'runs.kruntimes.io "wc" is forbidden: User "system:serviceaccount:default:nobody" '
        'cannot get resource "runs" in API group "kruntimes.io" in the namespace "default"',
    )
    failure = describe_api_error(error)
    assert failure.code == ExitCode.FORBIDDEN
    assert "\n" not in failure.message
    assert "ask a cluster admin for a Role granting 'get' on runs.kruntimes.io -n default" in (
        failure.message
    )
    assert "kubectl auth can-i get runs.kruntimes.io -n default" in failure.message


def test_a_forbidden_answer_in_another_wording_still_says_what_to_do() -> None:
    failure = describe_api_error(ApiError(403, "Forbidden", "access denied"))
    assert failure.code == ExitCode.FORBIDDEN
    assert "ask a cluster admin" in failure.message
    assert "docs/security.md" in failure.message


async def test_forbidden_end_to_end_through_rbac(tmp_path: Path) -> None:
    """A ServiceAccount token without any RoleBinding: exit 5 and the can-i command."""
    async with running_apiserver(ApiServerConfig()) as handle:
        async with await connect(kubeconfig=handle.kubeconfig_path) as kube:
            for crd in (run_crd(), runtime_crd()):
                await kube.create(CRDS, crd)
            await kube.create(SERVICEACCOUNTS, {"metadata": {"name": "nobody", "namespace": NS}})
            token = await request_token(kube, ServiceAccountRef(NS, "nobody"))
        kubeconfig = tmp_path / "nobody.yaml"
        kubeconfig.write_text(_kubeconfig_with_token(handle, token))
        env = {"KRT_KUBECONFIG": str(kubeconfig), "KUBECONFIG": ""}
        for args in (["get", "wc"], ["invoke", "wc", "-d", "{}"]):
            with trio.fail_after(30):
                result = await trio.to_thread.run_sync(lambda a=args: invoke_cli(a, env=env))
            assert result.exit_code == ExitCode.FORBIDDEN, result.output
            assert len(result.stderr.strip().splitlines()) == 1
            assert "kubectl auth can-i get runs.kruntimes.io -n default" in result.stderr


def _kubeconfig_with_token(handle: ApiServerHandle, token: str) -> str:
    config = yaml.safe_load(Path(handle.kubeconfig_path).read_text())
    for user in config["users"]:
        user["user"] = {"token": token}
    return str(yaml.safe_dump(config))


def test_no_kubeconfig_says_how_to_get_a_local_cluster(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        krt,
        ["get"],
        env={
            "KRT_KUBECONFIG": None,
            "KUBECONFIG": str(tmp_path / "none"),
            "HOME": str(tmp_path),
            "KUBERNETES_SERVICE_HOST": None,
        },
    )
    assert result.exit_code == ExitCode.UNREACHABLE, result.output
    assert "--kubeconfig FILE" in result.stderr
    assert "krt dev up --detach, then source ~/.krt/dev/env" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


# -- reaching the gateway from outside the cluster ----------------------------------------


def test_the_quick_tour_in_help_sources_the_dev_env() -> None:
    """``export KUBECONFIG`` alone leaves KRT_GATEWAY_URL unset, so the tour's invoke failed."""
    result = CliRunner().invoke(krt, ["--help"])
    assert result.exit_code == 0
    assert "source ~/.krt/dev/env" in result.stdout
    assert "export KUBECONFIG=~/.krt/dev/kubeconfig" not in result.stdout


async def test_an_unresolvable_gateway_points_at_the_dev_env() -> None:
    invocation = Invocation(
        url="https://runtime-gateway.kruntimes-system.svc.cluster.local.invalid/v1/x:invoke",
        body=b"{}",
        token="t",
    )
    with pytest.raises(CommandFailed) as info:
        await post(invocation)
    assert info.value.code == ExitCode.UNREACHABLE
    assert "--gateway-url" in info.value.message
    assert "source ~/.krt/dev/env, which sets KRT_GATEWAY_URL" in info.value.message


# -- a Run that stays Pending: why, and what would unblock it -----------------------------


def pending_function(reason: str, message: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "wc", "namespace": NS},
        "spec": {"runtime": "python", "mode": {"function": {"handler": "wc.count"}}},
        "status": {
            "phase": "Pending",
            "conditions": [
                {"type": "Scheduled", "status": "False", "reason": reason, "message": message}
            ],
        },
    }


FULL = 'no ready Pod of Runtime "python" has free capacity for runs=1'


def test_stuck_summary_gives_reason_message_and_advice() -> None:
    text = stuck_summary(pending_function("InsufficientCapacity", FULL))
    assert text.startswith(f"still Pending (InsufficientCapacity: {FULL}): ")
    assert "krt delete Runs you no longer need" in text
    assert "kubectl scale runtime python -n default --replicas=N" in text
    assert text.endswith("see krt describe wc")


def test_stuck_summary_of_a_run_past_pending_has_no_capacity_advice() -> None:
    obj = pending_function("InsufficientCapacity", FULL)
    obj["status"]["phase"] = "Running"
    assert "krt delete" not in stuck_summary(obj)


async def test_a_wait_timeout_says_where_the_run_is_stuck(
    autojump_clock: trio.testing.MockClock,
) -> None:
    progress = Progress("wc", stream=io.StringIO(), tty=False)
    progress.update(pending_function("InsufficientCapacity", FULL))
    started = trio.current_time()
    with pytest.raises(CommandFailed) as info:
        with time_limit(20, "function wc did not become Ready", progress=progress):
            await trio.sleep_forever()
    assert trio.current_time() - started == pytest.approx(20)
    assert info.value.code == ExitCode.TIMED_OUT
    assert info.value.message.startswith(
        "function wc did not become Ready within 20s; still Pending (InsufficientCapacity"
    )
    assert "or add Pods: kubectl scale runtime python" in info.value.message


@pytest.mark.parametrize("tty", [False, True])
def test_progress_says_once_what_would_unblock_a_pending_run(tty: bool) -> None:
    stream = io.StringIO()
    progress = Progress("wc", stream=stream, tty=tty)
    for _ in range(3):
        progress.update(pending_function("InsufficientCapacity", FULL))
    progress.update(pending_function("NoReadyPod", "no ready Pod"))
    advice = [line for line in stream.getvalue().splitlines() if "wc: " in line and ":" in line]
    full = [line for line in advice if "krt delete Runs you no longer need" in line]
    no_pod = [
        line
        for line in advice
        if "kubectl get pods -n default -l kruntimes.io/runtime=python" in line
    ]
    assert len(full) == 1
    assert len(no_pod) == 1


# -- krt logs of a function: what the handler printed, from the Runtime Server's log -------


def server_record(uid: str, ts: float, msg: str, **fields: Any) -> str:
    """A Runtime Server log line (``ts``/``msg`` keys, krt.logs.EPOCH_LINES)."""
    return json.dumps(
        {
            "ts": ts,
            "level": "info",
            "logger": "servers.python",
            "msg": msg,
            "run_uid": uid,
            **fields,
        }
    )


def runtimed_record(uid: str, time: str, message: str, **fields: Any) -> str:
    return json.dumps(
        {
            "time": time,
            "level": "info",
            "logger": "runtimed",
            "message": message,
            "run_uid": uid,
            **fields,
        }
    )


def test_parse_line_reads_the_runtime_servers_key_spelling() -> None:
    line = parse_line(
        server_record("u1", 1795951953.5, "hello", invocation_id="i1", stream="stdout"),
        "u1",
        source="runtime",
    )
    assert line is not None
    assert (line.text, line.stream, line.time) == ("hello", "stdout", 1795951953.5)
    failed = parse_line(
        server_record("u1", 1795951953.5, "invocation failed", error="ValueError: bad"),
        "u1",
        source="runtime",
    )
    assert failed is not None
    assert failed.stream == "runtimed"
    assert failed.text.startswith("[runtime info] 2026-")
    assert failed.text.endswith("invocation failed: ValueError: bad")


@pytest.fixture
async def stateful(tmp_path: Path) -> AsyncIterator[tuple[ApiServerHandle, Kube]]:
    async with durable_cluster(tmp_path / "state", "python") as cluster:
        yield cluster


async def pod_with_logs(kube: Kube, handle: ApiServerHandle, logs: dict[str, list[str]]) -> None:
    """Pod ``rt-1`` with a runtime and a runtimed container whose logs hold ``logs``."""
    pod = await kube.create(
        PODS,
        {
            "metadata": {"name": "rt-1", "namespace": NS},
            "spec": {
                "nodeName": "localkube",
                "containers": [
                    {"name": "runtime", "image": "kruntimes/python-runtime"},
                    {"name": "runtimed", "image": "kruntimes/runtimed"},
                ],
            },
        },
    )
    assert handle.state_dir is not None
    paths = PodPaths.for_pod(handle.state_dir, NS, "rt-1", pod["metadata"]["uid"])
    for container, lines in logs.items():
        log_dir = paths.log_dir / container
        log_dir.mkdir(parents=True)
        (log_dir / "0.log").write_text(
            "".join(f"2026-11-29T08:00:00.000000000Z stderr F {line}\n" for line in lines)
        )
        (log_dir / "0.exited").write_text("")


async def cli(handle: ApiServerHandle, *args: str) -> Result:
    env = {"KRT_KUBECONFIG": str(handle.kubeconfig_path), "KUBECONFIG": ""}
    with trio.fail_after(30):
        return await trio.to_thread.run_sync(lambda: invoke_cli(list(args), env=env))


async def test_logs_of_a_function_show_what_its_handler_printed(
    stateful: tuple[ApiServerHandle, Kube],
) -> None:
    handle, kube = stateful
    function = task_manifest("wc")
    function["spec"]["mode"] = {"function": {"handler": "wc.count"}}
    function["spec"]["source"] = {"inline": "def count(e):\n    return e\n", "inlinePath": "wc.py"}
    uid = (await kube.create(RUNS, function))["metadata"]["uid"]
    base = 1795951950.0  # 2026-11-29T08:12:30Z
    await pod_with_logs(
        kube,
        handle,
        {
            "runtimed": [runtimed_record(uid, "2026-11-29T08:12:30.000000Z", "function ready")],
            "runtime": [
                server_record(uid, base + 1, "first print", invocation_id="i1", stream="stdout"),
                server_record(uid, base + 2, "a warning", invocation_id="i1", stream="stderr"),
                server_record("other-run", base + 2, "not mine", stream="stdout"),
                server_record(uid, base + 3, "invocation failed", error="ValueError: bad"),
                server_record(uid, base + 4, "second print", invocation_id="i2", stream="stdout"),
            ],
        },
    )
    await set_status(
        kube,
        "wc",
        {"phase": "Ready", "attempt": 1, "assignedPod": "rt-1", "assignedPodUID": "p-1"},
    )
    result = await cli(handle, "logs", "wc")
    assert result.exit_code == 0, result.output
    assert result.stdout == "first print\nsecond print\n"
    assert result.stderr == "a warning\n"
    verbose = await cli(handle, "logs", "wc", "--runtimed")
    lines = verbose.stdout.splitlines()
    assert lines[0].startswith("[runtimed info] 2026-11-29T08:12:30")
    assert "function ready" in lines[0]
    assert lines[1] == "first print"
    assert lines[2].startswith("[runtime info] ")
    assert lines[2].endswith("invocation failed: ValueError: bad")
    assert lines[3] == "second print"


async def test_logs_of_a_task_read_only_runtimed(stateful: tuple[ApiServerHandle, Kube]) -> None:
    """A task's output is runtimed's to log: the server's container is not read (no doubles)."""
    handle, kube = stateful
    uid = (await kube.create(RUNS, task_manifest("job")))["metadata"]["uid"]
    await pod_with_logs(
        kube,
        handle,
        {
            "runtimed": [runtimed_record(uid, "2026-11-29T08:00:00Z", "hello", stream="stdout")],
            "runtime": [server_record(uid, 1795951950.0, "hello", stream="stdout")],
        },
    )
    await set_status(
        kube,
        "job",
        {"phase": "Running", "attempt": 1, "assignedPod": "rt-1", "assignedPodUID": "p"},
    )
    result = await cli(handle, "logs", "job")
    assert result.exit_code == 0, result.output
    assert result.stdout == "hello\n"


# -- a handler that cannot be imported: the exception, not a flattened traceback ----------


def test_a_failed_registration_message_keeps_the_exception_and_drops_the_frames() -> None:
    message = (
        "RegistrationFailed; attempt 1 of 1 failed (RegistrationFailed): RegisterFunction "
        "FAILED_PRECONDITION: cannot load handler imp.run: ModuleNotFoundError: No module "
        "named 'notapackage_xyz' Traceback (most recent call last, innermost frames): File "
        '"/w/imp.py", line 1, in <module> import notapackage_xyz; no attempts left'
    )
    short = without_traceback(message)
    assert short.endswith("No module named 'notapackage_xyz' [traceback left out]")
    assert "File " not in short
    assert without_traceback("RegistrationFailed: no traceback here") == (
        "RegistrationFailed: no traceback here"
    )


def test_the_traceback_cut_matches_the_newline_the_runtime_server_writes() -> None:
    """F9: status.message carries the server's text with a newline before "Traceback"."""
    message = (
        "RegistrationFailed; attempt 1 of 1 failed (RegistrationFailed): RegisterFunction "
        "FAILED_PRECONDITION: registration attempt 1 failed: cannot load handler bad.invoke: "
        "ModuleNotFoundError: No module named 'nosuchmod'\nTraceback (most recent call last, "
        'innermost frames):\n  File "/w/bad.py", line 1, in <module>\n    import nosuchmod\n'
        "; no attempts left"
    )
    short = without_traceback(message)
    assert short.endswith("No module named 'nosuchmod' [traceback left out]")
    assert "\n" not in short
    assert "File " not in short


def test_help_tells_exit_1_and_exit_8_apart() -> None:
    """1 is final (the Run ended); 8 is "not Ready yet, retry": the help must not blur them."""
    text = CliRunner().invoke(krt, ["--help"]).output
    assert text.count("function not Ready") == 1
    assert "  1  Run ended Failed/Timeout/Cancelled (function: before Ready)" in text
    assert "  8  function not Ready / unavailable (503); retry later" in text


# -- krt function create: a file the built-in Runtime cannot load ------------------------


@pytest.mark.parametrize(
    ("runtime", "file", "handler", "expected"),
    [
        (
            "bash",
            "wc.py",
            "wc.count",
            "the bash Runtime loads a handler from a .sh file, not wc.py"
            " (use a wc.sh, or --runtime python for a .py file)",
        ),
        (
            "python",
            "greet.sh",
            "greet.hello",
            "the python Runtime loads a handler from a .py file,"
            " not greet.sh (use a greet.py, or --runtime bash for a .sh file)",
        ),
    ],
)
def test_function_create_rejects_a_file_of_the_other_runtime(
    unreachable: Path, runtime: str, file: str, handler: str, expected: str
) -> None:
    (unreachable.parent / "wc.py").write_text("def count(event):\n    return event\n")
    (unreachable.parent / "greet.sh").write_text("hello() {\n  echo hi\n}\n")
    result = run(
        unreachable,
        "function",
        "create",
        "f",
        "--runtime",
        runtime,
        "--handler",
        handler,
        "--file",
        str(unreachable.parent / file),
    )
    assert result.exit_code == ExitCode.USAGE, result.output
    assert expected in " ".join(result.stderr.split())


async def test_a_taken_function_name_says_to_delete_it_not_to_omit_it(
    cli: Any, tmp_path: Path
) -> None:
    """A function needs its name (it is how it is invoked): no 'omit NAME' advice."""
    source = tmp_path / "wc.py"
    source.write_text("def count(event):\n    return event\n")
    args = ["function", "create", "wc", "--runtime", "python", "--handler", "wc.count"]
    args += ["--file", str(source), "--no-wait"]
    assert (await cli(*args)).exit_code == 0
    again = await cli(*args)
    assert again.exit_code == ExitCode.CONFLICT, again.output
    assert "delete the old Run first: krt delete wc" in again.stderr
    assert "omit NAME" not in again.stderr


# -- kubectl's habit: connection flags before the command ---------------------------------


async def test_namespace_before_the_command_is_used(cli: Any, kube: Kube) -> None:
    await kube.create(RUNS, task_manifest("job"))
    found = await cli("-n", NS, "get", "job")
    assert found.exit_code == 0, found.output
    assert "job" in found.stdout
    elsewhere = await cli("-n", "other", "get", "job")
    assert elsewhere.exit_code == ExitCode.NOT_FOUND, elsewhere.output
    assert 'in namespace "other"' in elsewhere.stderr
    # the command's own flag wins over the one before it
    own = await cli("-n", "other", "get", "job", "-n", NS)
    assert own.exit_code == 0, own.output


async def test_kubeconfig_before_the_command_beats_the_environment(
    cli: Any, tmp_path: Path, apiserver: ApiServerHandle
) -> None:
    broken = tmp_path / "unreachable.yaml"
    broken.write_text(UNREACHABLE_KUBECONFIG)
    # the environment names the unreachable cluster; the flag before `get` the real one
    result = await cli(
        "--kubeconfig",
        str(apiserver.kubeconfig_path),
        "get",
        env={"KRT_KUBECONFIG": str(broken)},
    )
    assert result.exit_code == 0, result.output
    unreachable = await cli("get", env={"KRT_KUBECONFIG": str(broken)})
    assert unreachable.exit_code == ExitCode.UNREACHABLE
