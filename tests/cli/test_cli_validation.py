"""Input validation happens before any API call: exit 2 with a message naming the flag.

Every command here points at a kubeconfig whose server is unreachable (127.0.0.1:1): had the
command got past validation, it would have failed with exit 6 (unreachable), not 2.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from krt.cli.exitcodes import ExitCode
from krt.cli.main import krt

UNREACHABLE_KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}
users:
- name: u
  user: {token: abc}
contexts:
- name: x
  context: {cluster: c, user: u, namespace: default}
current-context: x
"""


@pytest.fixture
def files(tmp_path: Path) -> Path:
    (tmp_path / "kubeconfig").write_text(UNREACHABLE_KUBECONFIG)
    (tmp_path / "main.py").write_text("def invoke(request):\n    return {}\n")
    (tmp_path / "broken.py").write_text("def invoke(request:\n")
    (tmp_path / "greet.sh").write_text("handle() {\n  echo hi\n}\n")
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "latin1.py").write_bytes(b"print('\xe9')\n")
    return tmp_path


def run(files: Path, *args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(
        krt, list(args), env={"KRT_KUBECONFIG": str(files / "kubeconfig")}, input=input
    )


def test_the_unreachable_kubeconfig_fails_with_exit_6(files: Path) -> None:
    """Control: a valid command against this kubeconfig is 'unreachable', not a usage error."""
    result = run(files, "get", "x")
    assert result.exit_code == ExitCode.UNREACHABLE, result.output
    assert result.stderr.startswith("error: cannot reach the Kubernetes API server")
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("args", "flag", "detail"),
    [
        (["run", "--runtime", "python", "--env", "NOEQUALS", "--", "x"], "--env", "NAME=VALUE"),
        (["run", "--runtime", "python", "--env", "1BAD=x", "--", "x"], "--env", "variable name"),
        (["run", "--runtime", "python", "-e", "A=1", "-e", "A=2", "--", "x"], "--env", "twice"),
        (
            ["run", "--runtime", "python", "--timeout", "5 minutes", "--", "x"],
            "--timeout",
            "Go duration",
        ),
        (["run", "--runtime", "python", "--timeout", "0", "--", "x"], "--timeout", "positive"),
        (
            ["run", "--runtime", "python", "--timeout", "1000000000h", "--", "x"],
            "--timeout",
            "at most 2562047h47m16.854775807s",
        ),
        (["run", "--runtime", "python", "--backoff", "-1s", "--", "x"], "--backoff", "duration"),
        (["run", "--runtime", "python", "--ttl", "1d", "--", "x"], "--ttl", "duration"),
        (
            ["run", "--runtime", "python", "--ttl", "600000h", "--", "x"],
            "--ttl",
            "longer than the limit of 2147483647 seconds",
        ),
        (["run", "--runtime", "python", "--ttl", "-1s", "--", "x"], "--ttl", "duration"),
        (["run", "--runtime", "python", "--retries", "100", "--", "x"], "--retries", "0<=x<=99"),
        (["run", "--runtime", "python", "--file", "missing.py"], "--file", "does not exist"),
        (["run", "--runtime", "python", "--file", "{dir}/latin1.py"], "--file", "UTF-8"),
        (["run", "Bad_Name", "--runtime", "python", "--", "x"], "NAME", "not a valid name"),
        (
            ["run", "--runtime", "python", "--entrypoint", "../x.py", "--", "x"],
            "--entrypoint",
            "..",
        ),
        (["run", "--runtime", "python"], "", "nothing to run"),
        (["run", "--", "x"], "--runtime", "Missing option"),
        (
            [
                "function",
                "create",
                "f",
                "--runtime",
                "python",
                "--handler",
                "invoke",
                "--file",
                "{dir}/main.py",
            ],
            "--handler",
            "module.function",
        ),
        (
            [
                "function",
                "create",
                "f",
                "--runtime",
                "python",
                "--handler",
                "app.invoke",
                "--file",
                "{dir}/main.py",
            ],
            "--handler",
            "--handler main.invoke",
        ),
        (
            [
                "function",
                "create",
                "f",
                "--runtime",
                "python",
                "--handler",
                "main.handle",
                "--file",
                "{dir}/main.py",
            ],
            "--handler",
            "no top-level function 'handle'",
        ),
        (
            [
                "function",
                "create",
                "f",
                "--runtime",
                "python",
                "--handler",
                "broken.invoke",
                "--file",
                "{dir}/broken.py",
            ],
            "--file",
            "does not parse",
        ),
        (
            [
                "function",
                "create",
                "f",
                "--runtime",
                "bash",
                "--handler",
                "greet.hello",
                "--file",
                "{dir}/greet.sh",
            ],
            "--handler",
            "no bash function 'hello'",
        ),
        (
            [
                "function",
                "create",
                "f",
                "--runtime",
                "python",
                "--handler",
                "main.invoke",
                "--file",
                "{dir}/main.py",
                "--idle-timeout",
                "soon",
            ],
            "--idle-timeout",
            "duration",
        ),
        (["invoke", "f", "-d", "{not json"], "-d/--data", "invalid JSON"),
        (["invoke", "f", "-d", "NaN"], "-d/--data", "NaN is not valid JSON"),
        (["invoke", "f", "-d", "@{dir}/bad.json"], "-d/--data", "invalid JSON"),
        (["invoke", "f", "-d", "@{dir}/none.json"], "-d/--data", "cannot read"),
        (
            ["invoke", "f", "-d", "{}", "--invocation-id", "has space"],
            "--invocation-id",
            "visible ASCII",
        ),
        (["invoke", "f", "-d", "{}", "--invocation-id", "x" * 129], "--invocation-id", "128"),
        (
            ["invoke", "f", "-d", "{}", "--gateway-url", "localhost:8443"],
            "--gateway-url",
            "absolute",
        ),
        (["invoke", "f", "-d", "{}", "--timeout", "fast"], "--timeout", "duration"),
        (["wait", "x", "--for", "phase=Done"], "--for", "phase=Done"),
        (["get", "x", "-o", "xml"], "--output", "xml"),
        (["cancel", "run/Not/A/Name"], "NAME", "not a valid name"),
        (["cancel", "Not/A/Name"], "", "is not a Run (NAME argument)"),
    ],
)
def test_bad_input_is_a_usage_error_naming_the_flag(
    files: Path, args: list[str], flag: str, detail: str
) -> None:
    argv = [a.replace("{dir}", str(files)) for a in args]
    result = run(files, *argv)
    assert result.exit_code == ExitCode.USAGE, result.output
    if flag:
        assert flag in result.stderr, result.stderr
    assert detail in result.stderr, result.stderr


def test_invoke_reads_bad_json_from_stdin(files: Path) -> None:
    result = run(files, "invoke", "f", input='{"a": 1,}')
    assert result.exit_code == ExitCode.USAGE
    assert "stdin: invalid JSON" in result.stderr


def test_invoke_rejects_a_body_over_one_mebibyte(files: Path) -> None:
    body = '{"a": "' + "x" * (1024 * 1024) + '"}'
    result = run(files, "invoke", "f", input=body)
    assert result.exit_code == ExitCode.USAGE
    assert "exceed the 1 MiB invoke limit" in result.stderr


def test_env_over_the_total_bound_is_a_usage_error_and_at_the_bound_is_sent(
    files: Path,
) -> None:
    """F22: the CRD's spec.env total, counted as the Runtime Servers count (UTF-8 bytes)."""
    from krt.api.limits import MAX_ENV_TOTAL_BYTES

    big = [arg for i in range(10) for arg in ("-e", f"V{i}={'x' * 32000}")]
    result = run(files, "run", "--runtime", "bash", *big, "--", "true")
    assert result.exit_code == ExitCode.USAGE, result.output
    assert "--env" in result.stderr
    assert f"the variables total 320040 bytes, over the limit of {MAX_ENV_TOTAL_BYTES}" in (
        result.stderr
    )
    # 8 values of 16,000 'é': 128,000 characters, 256,032 bytes
    wide = [arg for i in range(8) for arg in ("-e", f"V{i}={'é' * 16000}")]
    result = run(files, "run", "--runtime", "bash", *wide, "--", "true")
    assert result.exit_code == ExitCode.USAGE, result.output
    assert "total 256032 bytes" in result.stderr
    # exactly at the bound is sent (exit 6: the API server is unreachable); one byte more is not
    parts = [f"V{i}={'x' * 31000}" for i in range(8)]  # 8 x (2 + 31000 + 2) = 248032
    for extra, code in ((0, ExitCode.UNREACHABLE), (1, ExitCode.USAGE)):
        last = f"W={'x' * (MAX_ENV_TOTAL_BYTES - 248032 - 3 + extra)}"
        args = [arg for part in [*parts, last] for arg in ("-e", part)]
        result = run(files, "run", "--runtime", "bash", *args, "--", "true")
        assert result.exit_code == code, result.output


def test_valid_input_gets_past_validation(files: Path) -> None:
    """The same commands with good values reach the (unreachable) API server: exit 6."""
    for args in (
        [
            "run",
            "--runtime",
            "python",
            "-e",
            "A=1",
            "--timeout",
            "5m",
            "--retries",
            "2",
            "--",
            "-c",
            "1",
        ],
        [
            "function",
            "create",
            "f",
            "--runtime",
            "python",
            "--handler",
            "main.invoke",
            "--file",
            str(files / "main.py"),
        ],
        [
            "function",
            "create",
            "g",
            "--runtime",
            "bash",
            "--handler",
            "greet.handle",
            "--file",
            str(files / "greet.sh"),
        ],
        ["invoke", "f", "-d", '{"ok": true}', "--invocation-id", "job-1", "--timeout", "10s"],
    ):
        result = run(files, *args)
        assert result.exit_code == ExitCode.UNREACHABLE, (args, result.output)


def test_no_kubeconfig_at_all_is_exit_6_with_a_hint(tmp_path: Path) -> None:
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
    assert result.stderr.startswith("error: no usable Kubernetes configuration: ")
    assert "KUBECONFIG" in result.stderr


def _no_cluster_env(tmp_path: Path, **env: str | None) -> dict[str, str | None]:
    return {
        "KRT_KUBECONFIG": None,
        "KUBECONFIG": None,
        "HOME": str(tmp_path),
        "KUBERNETES_SERVICE_HOST": None,
        **env,
    }


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("garbage: [\n", "invalid YAML (line 2, column 1): expected the node content"),
        ("[]\n", "not a kubeconfig (a YAML list where a mapping"),
        ("apiVersion: v1\nclusters: []\n", "no current-context is set"),
        ("", "is empty"),
    ],
    ids=["not-yaml", "a-list", "no-current-context", "empty"],
)
@pytest.mark.parametrize("how", ["KUBECONFIG", "KRT_KUBECONFIG", "--kubeconfig"])
def test_a_malformed_kubeconfig_is_one_line_and_exit_6(
    tmp_path: Path, text: str, problem: str, how: str
) -> None:
    """F6: these were Python tracebacks with exit 1."""
    path = tmp_path / "bad.kc"
    path.write_text(text)
    args = ["get", "--kubeconfig", str(path)] if how == "--kubeconfig" else ["get"]
    env = _no_cluster_env(tmp_path, **({} if how == "--kubeconfig" else {how: str(path)}))
    result = CliRunner().invoke(krt, args, env=env)
    assert result.exit_code == ExitCode.UNREACHABLE, result.output
    assert result.stderr.startswith(f"error: no usable Kubernetes configuration: {path}"), (
        result.stderr
    )
    assert problem in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.output


def test_kubeconfig_env_naming_a_missing_file_says_which(tmp_path: Path) -> None:
    missing = tmp_path / "nonexistent"
    result = CliRunner().invoke(
        krt, ["get"], env=_no_cluster_env(tmp_path, KUBECONFIG=str(missing))
    )
    assert result.exit_code == ExitCode.UNREACHABLE, result.output
    assert f"KUBECONFIG names {missing}, which does not exist" in result.stderr


@pytest.mark.parametrize("where", ["before", "after"])
def test_kubeconfig_flag_naming_a_missing_file_is_exit_6_like_the_env_form(
    tmp_path: Path, where: str
) -> None:
    """F6: --kubeconfig /nonexistent was a click usage error (exit 2)."""
    missing = str(tmp_path / "nonexistent")
    args = (
        ["--kubeconfig", missing, "get"] if where == "before" else ["get", "--kubeconfig", missing]
    )
    result = CliRunner().invoke(krt, args, env=_no_cluster_env(tmp_path))
    assert result.exit_code == ExitCode.UNREACHABLE, result.output
    assert result.stderr == (
        f"error: no usable Kubernetes configuration: kubeconfig {missing!r} does not exist "
        "(use --kubeconfig FILE or set KUBECONFIG; for a local cluster run krt dev up "
        "--detach, then source ~/.krt/dev/env)\n"
    )


def test_version_without_a_server_still_prints_the_client_version(files: Path) -> None:
    result = run(files, "version")
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0].startswith("Client Version: kruntimes ")
    assert lines[1].startswith("Server Version: unavailable (")
