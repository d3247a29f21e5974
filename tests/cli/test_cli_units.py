"""Pure parts of the CLI: exit codes, tables, manifests, body checks, log parsing, progress."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import trio
import yaml
from click.testing import CliRunner

from krt.api.run import Run
from krt.cli.describing import describe_run
from krt.cli.exitcodes import DESCRIPTIONS, ExitCode, for_http_status
from krt.cli.invoking import InvokeResult, check_body, failure_for, override_base
from krt.cli.logs import parse_line
from krt.cli.main import krt
from krt.cli.manifests import CommonSpec, function_run, task_run
from krt.cli.printing import OutputFormat, human_age, render_objects, render_table
from krt.cli.run_cmd import COMMAND_KEY, run_cmd
from krt.cli.waiting import Progress, describe_progress

NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
DOCS = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def ago(seconds: float) -> str:
    return (NOW - timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- exit codes ----------------------------------------------------------------------------


def test_every_exit_code_is_described_once_and_distinct() -> None:
    assert set(DESCRIPTIONS) == set(ExitCode)
    assert len({int(c) for c in ExitCode}) == len(ExitCode)


def test_help_epilog_and_docs_list_every_exit_code() -> None:
    text = CliRunner().invoke(krt, ["--help"]).output
    docs = DOCS.read_text()
    for code, description in DESCRIPTIONS.items():
        assert f"{int(code):>3}  {description}" in text
        assert f"| {int(code)} |" in docs, f"docs/cli.md lacks exit code {int(code)}"


@pytest.mark.parametrize(
    ("status", "reason", "code"),
    [
        (400, "InvalidJSON", ExitCode.INVALID),
        (401, "Unauthorized", ExitCode.UNAUTHENTICATED),
        (403, "Forbidden", ExitCode.FORBIDDEN),
        (404, "FunctionNotFound", ExitCode.NOT_FOUND),
        (409, "AlreadyExists", ExitCode.CONFLICT),
        (413, "RequestTooLarge", ExitCode.TOO_LARGE),
        (415, "UnsupportedMediaType", ExitCode.INVALID),
        (422, "Invalid", ExitCode.INVALID),
        (429, "TooManyRequests", ExitCode.TOO_MANY_REQUESTS),
        (500, "HandlerError", ExitCode.HANDLER_ERROR),
        (500, "InternalError", ExitCode.SERVER_ERROR),
        (502, "", ExitCode.SERVER_ERROR),
        (503, "FunctionUnavailable", ExitCode.UNAVAILABLE),
        (504, "InvocationTimeout", ExitCode.TIMED_OUT),
        (418, "", ExitCode.INVALID),
    ],
)
def test_http_status_to_exit_code(status: int, reason: str, code: ExitCode) -> None:
    assert for_http_status(status, reason) is code


def test_gateway_statuses_have_distinct_codes_except_the_two_malformed_request_ones() -> None:
    gateway = {400, 401, 403, 404, 413, 429, 503, 504}
    codes = [for_http_status(s) for s in sorted(gateway)]
    codes += [for_http_status(500, "HandlerError"), for_http_status(500, "InternalError")]
    assert len(set(codes)) == len(codes)


def error_answer(status: int, reason: str, message: str, retry_after: str | None) -> InvokeResult:
    """A gateway error answer as krt reads it (invocation ``inv-1``)."""
    return InvokeResult(
        status=status,
        body=b"",
        invocation_id="inv-1",
        outputs=None,
        latency_seconds=0.01,
        error={"code": status, "reason": reason, "message": message},
        retry_after=retry_after,
    )


def test_failure_message_is_one_line_with_reason_advice_and_invocation_id() -> None:
    result = error_answer(503, "FunctionUnavailable", "not ready\nyet", "2")
    failure = failure_for(result)
    assert failure.code is ExitCode.UNAVAILABLE
    assert "\n" not in failure.message
    assert failure.message.startswith("HTTP 503 FunctionUnavailable: not ready yet (")
    assert "Retry-After 2s" in failure.message
    assert failure.message.endswith("[invocation inv-1]")


def test_an_interrupted_invocation_says_it_may_have_run_not_retry_later() -> None:
    # seed 000: a connection that broke after dispatch has an unknown outcome
    status = 502
    result = error_answer(
        status,
        "InvocationInterrupted",
        "the connection to the local Runtime Server broke during the invocation"
        " (peer closed the connection); the invocation may have run and was not retried",
        "1",
    )
    failure = failure_for(result)
    assert failure.code is ExitCode.SERVER_ERROR  # not 8, which means "safe to retry later"
    assert failure.message.endswith(
        "may have run and was not retried (retry only if the handler is idempotent)"
        " [invocation inv-1]"
    )
    assert "retry later" not in failure.message
    assert "Retry-After" not in failure.message


def test_a_504_of_the_lifetime_points_at_the_runs_timeout_not_invoke_timeout() -> None:
    message = (
        "the function's lifetime (spec.timeout 5s) ended 3.6 s into the invocation; an "
        "invocation is bounded by the Run's remaining lifetime"
    )
    result = error_answer(504, "InvocationTimeout", message, None)
    failure = failure_for(result)
    assert "raise --timeout" not in failure.message
    assert "create it again with a longer --timeout" in failure.message


def test_a_503_without_retry_after_says_the_function_has_ended() -> None:
    result = error_answer(
        503,
        "FunctionUnavailable",
        "the Run has ended (Failed: RegistrationLost); it will not become Ready again",
        None,
    )
    failure = failure_for(result)
    assert "retry later" not in failure.message
    assert "create it again" in failure.message


@pytest.mark.parametrize(
    ("message", "advice"),
    [
        ("ValueError: boom", "the function's handler raised; what it printed: krt logs fn"),
        ("OutputTooLarge: the JSON output is 1048596 bytes", "more than the 1 MiB invoke output"),
        ("InvalidOutputs: key 'bad key!'", "outputs break the output rules"),
    ],
)
def test_handler_errors_that_are_not_a_raise_say_so(message: str, advice: str) -> None:
    result = InvokeResult(
        status=500,
        body=b"",
        invocation_id=None,
        outputs=None,
        latency_seconds=0.01,
        error={"code": 500, "reason": "HandlerError", "message": message},
    )
    failure = failure_for(result, name="fn")
    assert failure.code is ExitCode.HANDLER_ERROR
    assert advice in failure.message
    if not message.startswith("ValueError"):
        assert "raised" not in failure.message


# -- tables --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (-5, "0s"),
        (45, "45s"),
        (119, "119s"),
        (192, "3m12s"),
        (180, "3m"),
        (25 * 60, "25m"),
        (5 * 3600 + 180, "5h3m"),
        (20 * 3600, "20h"),
        (3 * 86400 + 4 * 3600, "3d4h"),
        (12 * 86400, "12d"),
        (800 * 86400, "2y"),
    ],
)
def test_human_age_rounds_like_kubectl(seconds: float, text: str) -> None:
    assert human_age(seconds) == text


def test_render_table_aligns_columns_without_trailing_spaces() -> None:
    text = render_table(("NAME", "PHASE"), [["a", "Running"], ["longer-name", "X"]])
    assert text.splitlines() == ["NAME          PHASE", "a             Running", "longer-name   X"]


def run_obj(name: str, **status: object) -> dict[str, object]:
    return {
        "apiVersion": "kruntimes.io/v1alpha1",
        "kind": "Run",
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": "u-1",
            "creationTimestamp": ago(90),
            "managedFields": [{"manager": "x"}],
        },
        "spec": {"runtime": "python", "mode": {"function": {"handler": "main.invoke"}}},
        "status": dict(status),
    }


def test_run_table_columns_and_wide() -> None:
    objs = [
        run_obj(
            "f",
            phase="Ready",
            assignedPod="rt-python-1",
            attempt=2,
            endpoint={"protocol": "HTTPS", "url": "https://gw/v1/x:invoke"},
        ),
        run_obj("p"),
    ]
    table = render_objects(objs, OutputFormat.TABLE, plural="runs", now=NOW, single=False)
    assert [line.split() for line in table.splitlines()] == [
        ["NAME", "PHASE", "RUNTIME", "POD", "ATTEMPT", "AGE"],
        ["f", "Ready", "python", "rt-python-1", "2", "90s"],
        ["p", "Pending", "python", "<none>", "0", "90s"],
    ]
    wide = render_objects(objs, OutputFormat.WIDE, plural="runs", now=NOW, single=False)
    assert wide.splitlines()[0].split()[6:] == ["MODE", "REASON", "ENDPOINT"]
    assert wide.splitlines()[1].split()[6:] == ["function", "<none>", "https://gw/v1/x:invoke"]


def test_json_yaml_and_name_output() -> None:
    objs = [run_obj("a"), run_obj("b")]
    one = json.loads(
        render_objects(objs[:1], OutputFormat.JSON, plural="runs", now=NOW, single=True)
    )
    assert one["metadata"]["name"] == "a"
    assert "managedFields" not in one["metadata"]
    many = yaml.safe_load(
        render_objects(objs, OutputFormat.YAML, plural="runs", now=NOW, single=False)
    )
    assert many["kind"] == "List"
    assert [i["metadata"]["name"] for i in many["items"]] == ["a", "b"]
    names = render_objects(objs, OutputFormat.NAME, plural="runs", now=NOW, single=False)
    assert names.splitlines() == ["run.kruntimes.io/a", "run.kruntimes.io/b"]
    assert objs[0]["metadata"]["managedFields"]  # type: ignore[index]  # input untouched


def test_runtime_table() -> None:
    runtime = {
        "metadata": {"name": "python", "creationTimestamp": ago(3600 * 30)},
        "spec": {
            "replicas": 2,
            "capacity": {"resources": {"runs": 4}},
            "template": {
                "spec": {"containers": [{"name": "runtime", "image": "kruntimes/python"}]}
            },
        },
        "status": {"readyReplicas": 1, "conditions": [{"type": "Available", "status": "True"}]},
    }
    table = render_objects([runtime], OutputFormat.WIDE, plural="runtimes", now=NOW, single=False)
    assert [line.split() for line in table.splitlines()] == [
        ["NAME", "READY", "CAPACITY", "AVAILABLE", "AGE", "IMAGES"],
        ["python", "1/2", "4", "runs/pod", "True", "30h", "kruntimes/python"],
    ]


# -- manifests -----------------------------------------------------------------------------


def test_task_run_manifest() -> None:
    common = CommonSpec(
        runtime="python",
        env=[{"name": "A", "value": "1"}],
        timeout_seconds=300,
        ttl_seconds=3600.5,
        retries=2,
        backoff_seconds=1.5,
    )
    obj = task_run(
        name=None,
        namespace="ns",
        common=common,
        source="print(1)",
        source_path="job.py",
        args=("--x",),
    )
    assert obj["metadata"] == {"namespace": "ns", "generateName": "run-"}
    assert obj["spec"] == {
        "runtime": "python",
        "env": [{"name": "A", "value": "1"}],
        "timeout": "5m",
        "ttlSecondsAfterFinished": 3601,
        "retryPolicy": {"maxAttempts": 3, "backoff": "1.5s"},
        "source": {"inline": "print(1)", "inlinePath": "job.py"},
        "mode": {"task": {"args": ["--x"]}},
    }
    parsed = Run.from_dict({**obj, "metadata": {"name": "x", "namespace": "ns"}})
    assert parsed.spec.effective_retry_policy.max_attempts == 3
    assert parsed.spec.timeout_seconds == 300


def test_function_run_manifest() -> None:
    obj = function_run(
        name="f",
        namespace="ns",
        common=CommonSpec(runtime="python"),
        source="def invoke(r): ...",
        source_path="main.py",
        handler="main.invoke",
        idle_timeout_seconds=0.2,
    )
    assert obj["metadata"] == {"namespace": "ns", "name": "f"}
    assert obj["spec"]["mode"] == {"function": {"handler": "main.invoke", "idleTimeoutSeconds": 1}}
    assert obj["spec"]["source"] == {"inline": "def invoke(r): ...", "inlinePath": "main.py"}
    assert "retryPolicy" not in obj["spec"]
    assert Run.from_dict(obj).spec.is_function


def test_run_keeps_name_and_command_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, object] = {}

    def fake_parse(self: object, ctx: object, args: list[str]) -> list[str]:
        raise AssertionError("unused")

    import click

    with click.Context(run_cmd) as ctx:
        run_cmd.parse_args(ctx, ["job", "--runtime", "bash", "--", "echo", "--not-an-option"])
        seen.update(ctx.params, command=ctx.meta[COMMAND_KEY])
    assert seen["name"] == "job"
    assert seen["command"] == ("echo", "--not-an-option")
    with click.Context(run_cmd) as ctx:
        run_cmd.parse_args(ctx, ["--runtime", "bash", "--", "echo hi"])
        assert ctx.params["name"] is None
        assert ctx.meta[COMMAND_KEY] == ("echo hi",)


# -- invoke helpers ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (b'{"a": 1}', None),
        (b"[1, 2.5e3, null]", None),
        (b"\xef\xbb\xbf{}", "byte order mark"),
        (b"{'a': 1}", "invalid JSON"),
        (b"Infinity", "Infinity is not valid JSON"),
        (b"\xff", "not UTF-8"),
        (b"[" * 100_000, "JSON"),
    ],
)
def test_check_body(body: bytes, error: str | None) -> None:
    if error is None:
        assert check_body(body, "-d") == body
    else:
        with pytest.raises(ValueError, match=error):
            check_body(body, "-d")


def test_gateway_url_override_keeps_path_and_checks_tls_against_the_endpoint_host() -> None:
    url = "https://runtime-gateway.kruntimes-system.svc/v1/namespaces/d/runtimes/python/functions/u:invoke"
    new, server_name = override_base(url, "https://127.0.0.1:8443")
    assert new == "https://127.0.0.1:8443/v1/namespaces/d/runtimes/python/functions/u:invoke"
    assert server_name == "runtime-gateway.kruntimes-system.svc"
    same, none = override_base(url, "https://runtime-gateway.kruntimes-system.svc:9443/")
    assert same.startswith("https://runtime-gateway.kruntimes-system.svc:9443/v1/")
    assert none is None
    with pytest.raises(ValueError, match=r"https://host\[:port\] only"):
        override_base(url, "https://127.0.0.1:8443/prefix")


# -- logs ----------------------------------------------------------------------------------


def test_parse_line_keeps_only_the_runs_records() -> None:
    out = json.dumps({"message": "hello", "run_uid": "u1", "attempt": 2, "stream": "stdout"})
    err = json.dumps({"message": "oops", "run_uid": "u1", "attempt": 1, "stream": "stderr"})
    sys_line = json.dumps(
        {"message": "execution started", "run_uid": "u1", "level": "info", "time": "T"}
    )
    other = json.dumps({"message": "x", "run_uid": "u2", "stream": "stdout"})
    assert parse_line(out, "u1") == parse_line(out, "u1")
    parsed = parse_line(out, "u1")
    assert parsed is not None
    assert (parsed.text, parsed.stream, parsed.attempt) == ("hello", "stdout", 2)
    parsed_err = parse_line(err, "u1")
    assert parsed_err is not None
    assert parsed_err.stream == "stderr"
    parsed_sys = parse_line(sys_line, "u1")
    assert parsed_sys is not None
    assert parsed_sys.stream == "runtimed"
    assert parsed_sys.text == "[runtimed info] T execution started"
    assert parse_line(other, "u1") is None
    assert parse_line("not json", "u1") is None
    assert parse_line("[1]", "u1") is None


# -- progress ------------------------------------------------------------------------------


def test_progress_prints_one_line_per_change_when_not_a_terminal() -> None:
    stream = io.StringIO()
    progress = Progress("job", stream=stream, tty=False)
    progress.update({"status": {}})
    progress.update({"status": {}})
    progress.update({"status": {"phase": "Running", "attempt": 1, "assignedPod": "p"}})
    progress.update({"status": {"phase": "Failed", "attempt": 1, "reason": "ExecutionFailed"}})
    assert stream.getvalue().splitlines() == [
        "job: Pending",
        "job: Running (attempt 1, pod p)",
        "job: Failed (attempt 1, ExecutionFailed)",
    ]


async def test_progress_spinner_redraws_on_a_terminal(
    autojump_clock: trio.testing.MockClock,
) -> None:
    stream = io.StringIO()
    progress = Progress("job", stream=stream, tty=True)
    progress.update({"status": {"phase": "Scheduled"}})
    assert stream.getvalue() == ""  # no plain lines on a terminal
    with trio.move_on_after(1.05):
        await progress.spin()
    frames = [f for f in stream.getvalue().split("\r") if f.strip("\x1b[2K")]
    assert len(frames) == 11  # one frame per 0.1 s
    assert "job: Scheduled [1s]" in frames[-1]
    assert stream.getvalue().endswith("\r\x1b[2K")  # the line is cleared at the end


def test_describe_progress_names_the_pending_reason() -> None:
    text = describe_progress(
        {
            "status": {
                "conditions": [{"type": "Scheduled", "status": "False", "reason": "NoReadyPod"}]
            }
        }
    )
    assert text == "Pending (NoReadyPod)"


# -- describe ------------------------------------------------------------------------------


def test_describe_shows_spec_status_conditions_and_events() -> None:
    run = run_obj(
        "f",
        phase="Ready",
        attempt=1,
        assignedPod="rt-1",
        assignedPodUID="pod-uid",
        endpoint={"protocol": "HTTPS", "url": "https://gw/x:invoke", "caBundle": "QUJD"},
        conditions=[
            {
                "type": "Ready",
                "status": "True",
                "reason": "FunctionRegistered",
                "lastTransitionTime": ago(30),
                "message": "registered",
            }
        ],
        outputs={"b": "2", "a": "1"},
    )
    run["spec"]["env"] = [{"name": "A", "value": "1"}]  # type: ignore[index]
    events = [
        {
            "type": "Warning",
            "reason": "StartFailed",
            "message": "boom\nagain",
            "lastTimestamp": ago(10),
            "source": {"component": "runtimed"},
            "count": 3,
            "firstTimestamp": ago(100),
        },
        {
            "type": "Normal",
            "reason": "Scheduled",
            "message": "bound to rt-1",
            "lastTimestamp": ago(60),
            "source": {"component": "kruntimes-scheduler"},
        },
    ]
    text = describe_run(run, events, NOW)
    lines = text.splitlines()
    assert lines[0].split() == ["Name:", "f"]
    assert "  Handler:" in text
    assert "main.invoke" in text
    assert "  Env:" in text
    assert "A=1" in text
    assert "Endpoint:" in text
    assert "https://gw/x:invoke (HTTPS, with CA bundle)" in text
    assert "    a: 1" in text
    assert text.index("    a: 1") < text.index("    b: 2")
    assert any(line.split()[:4] == ["Ready", "True", "FunctionRegistered", "30s"] for line in lines)
    events_at = lines.index("Events:")
    assert lines[events_at + 1].split() == ["Type", "Reason", "Age", "From", "Message"]
    assert lines[events_at + 2].split()[:2] == ["Normal", "Scheduled"]  # oldest first
    assert "(x3 over 100s)" in lines[events_at + 3]
    assert "boom again" in lines[events_at + 3]


def test_describe_without_status_or_events() -> None:
    run = run_obj("t")
    run["spec"] = {"runtime": "bash", "mode": {"task": {"args": ["echo hi"]}}}
    text = describe_run(run, [], NOW)
    assert "Phase:" in text
    assert "Pending" in text
    assert "'echo hi'" in text
    assert text.splitlines()[-1] == "  <none>"


def test_wait_summary_line_does_not_repeat_the_phase_as_reason() -> None:
    from krt.cli.runs_cmd import _final_line

    def run(**status: str) -> dict[str, Any]:
        return {"metadata": {"name": "r"}, "status": status}

    assert _final_line(run(phase="Succeeded", reason="Succeeded")) == "run.kruntimes.io/r Succeeded"
    assert (
        _final_line(run(phase="Failed", reason="TaskFailed", message="exit code 1"))
        == "run.kruntimes.io/r Failed: TaskFailed - exit code 1"
    )
    assert _final_line(run()) == "run.kruntimes.io/r Pending"


def test_the_ctrl_c_note_repeats_the_connection_flags() -> None:
    from krt.cli.connection import KubeTarget
    from krt.cli.run_cmd import keeps_running_note

    target = KubeTarget(kubeconfig=Path("/k/my config"), context="kind-a", namespace=None)
    note = keeps_running_note(target, [("r", "team-a")], stop="delete", output="describe")
    flags = "-n team-a --context kind-a --kubeconfig '/k/my config'"
    assert note == (
        f"run.kruntimes.io/r keeps running (krt delete r {flags} stops it, "
        f"krt describe r {flags} shows it)"
    )
    assert keeps_running_note(target, [], stop="cancel", output="logs") is None


def test_waiting_for_a_ready_function_to_finish_says_how_long_that_may_be() -> None:
    from krt.cli.runs_cmd import _function_wait_hint

    ready_function = {
        "metadata": {"name": "fn"},
        "spec": {"mode": {"function": {"handler": "m.f"}}},
        "status": {"phase": "Ready"},
    }
    assert "fn is a Ready function Run" in _function_wait_hint(ready_function, "finished")
    assert _function_wait_hint(ready_function, "ready") == ""
    task = {
        "metadata": {"name": "t"},
        "spec": {"mode": {"task": {}}},
        "status": {"phase": "Running"},
    }
    assert _function_wait_hint(task, "finished") == ""
