"""End to end on kind: the quick-start flows and the gateway's error answers (issue 9).

Every test drives the cluster the way a user does, through the ``krt`` CLI and ``kubectl``
as subprocesses, against the charts installed from this checkout with images built from
images/Dockerfile (fixtures in conftest.py, steps in kind_harness.py). The error cases the
CLI refuses to send (an oversized body, a UID that names no Run, a forged token) are posted
with krt's own HTTP client (:func:`krt.cli.invoking.post`) through the same port-forward.

Skipped, with the reason printed, where kind, kubectl, Docker or Helm is missing
(``make e2e`` runs pytest with ``-rs``); see docs/e2e.md.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import trio

from krt.cli.invoking import Invocation, InvokeResult, override_base, post

from .kind_harness import (
    INVOKER_SA,
    OUTSIDER_SA,
    REPO,
    RUNS_NAMESPACE,
    KindCluster,
    sh,
)

pytestmark = pytest.mark.slow

KRT = str(Path(sys.executable).with_name("krt"))
EXAMPLES = REPO / "examples"
KRM_FILE = EXAMPLES / "python" / "krm_labels.py"
KRM_INPUT = EXAMPLES / "python" / "resource_list.json"
GREET_FILE = EXAMPLES / "bash" / "greet.sh"
#: The quick start's KRM function (seed 004 interface) and its multi-document input.
QUICKSTART_KRM_FILE = EXAMPLES / "krm" / "main.py"
QUICKSTART_KRM_INPUT = EXAMPLES / "krm" / "resource-list.json"
QUICKSTART_TASK_FILE = EXAMPLES / "tasks" / "primes.py"
CLUSTER_SCOPED_KINDS = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
}

SLOW_FUNCTION = """\
import time


def invoke(request):
    time.sleep(float(request.get("seconds", 4)))
    return {"slept": request.get("seconds", 4)}
"""

TASK_SCRIPT = """\
import os
import sys

print("task stdout: hello from", sys.platform)
with open(os.environ["KRUNTIME_OUTPUTS"], "a") as outputs:
    outputs.write("answer=42\\n")
"""


def krt(
    cluster: KindCluster,
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 240.0,
) -> subprocess.CompletedProcess[str]:
    """Run the ``krt`` CLI of this checkout against the cluster (exit code not checked)."""
    return sh([KRT, *args], env=cluster.env(**(env or {})), timeout=timeout, check=False)


def invoke_env(gateway_url: str, gateway_ca_file: Path, run: dict[str, Any]) -> dict[str, str]:
    """Environment for ``krt invoke`` from outside the cluster (docs/cli.md).

    ``KRT_GATEWAY_URL`` points at the port-forward; the token is a TokenRequest for the
    invoker ServiceAccount (kind's kubeconfig has client certificates only). The gateway CA
    reaches ``krt invoke`` only through the Run's published ``caBundle`` (the harness creates
    the ``kruntimes-gateway-ca`` ConfigMap runtimed publishes); its absence fails the test.
    """
    ca_bundle = (run.get("status", {}).get("endpoint") or {}).get("caBundle")
    assert ca_bundle, f"no status.endpoint.caBundle on {run['metadata']['name']}"
    assert ca_bundle.strip() == gateway_ca_file.read_text().strip()
    return {"KRT_GATEWAY_URL": gateway_url, "KRT_SERVICE_ACCOUNT": f"{RUNS_NAMESPACE}/{INVOKER_SA}"}


def get_run(cluster: KindCluster, name: str) -> dict[str, Any]:
    return cluster.get_json("run", name, "-n", RUNS_NAMESPACE)


def create_function(
    cluster: KindCluster, name: str, handler: str, file: Path, *extra: str
) -> dict[str, Any]:
    """``krt function create``; returns the Ready Run."""
    result = krt(
        cluster, "function", "create", name, "--runtime", _runtime_of(file),
        "--handler", handler, "--file", str(file), *extra,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    run = get_run(cluster, name)
    url = result.stdout.strip().splitlines()[-1]
    assert url == run["status"]["endpoint"]["url"]
    assert url.endswith(f"/functions/{run['metadata']['uid']}:invoke")
    return run


def _runtime_of(file: Path) -> str:
    return "bash" if file.suffix == ".sh" else "python"


def raw_post(
    run: dict[str, Any], gateway_url: str, ca_pem: bytes, *, token: str, body: bytes,
    uid: str | None = None,
) -> InvokeResult:  # fmt: skip
    """POST to a Run's endpoint through the port-forward with krt's HTTP client.

    ``uid`` replaces the Run UID in the path (a function that does not exist).
    """
    url = run["status"]["endpoint"]["url"]
    if uid is not None:
        url = url.replace(run["metadata"]["uid"], uid)
    target, server_name = override_base(url, gateway_url)
    invocation = Invocation(
        url=target, body=body, token=token, ca_bundle=ca_pem, tls_server_name=server_name
    )
    return trio.run(post, invocation)


def invoker_token(cluster: KindCluster, account: str = INVOKER_SA) -> str:
    return cluster.kubectl("create", "token", account, "-n", RUNS_NAMESPACE).strip()


# -- task Runs ---------------------------------------------------------------------------


def test_builtin_runtimes_are_available(kind_cluster: KindCluster) -> None:
    result = krt(kind_cluster, "runtime", "list")
    assert result.returncode == 0, result.stderr
    names = {line.split()[0] for line in result.stdout.splitlines()[1:] if line.strip()}
    assert {"python", "bash"} <= names


def test_python_task_run_succeeds_with_outputs_and_logs(
    kind_cluster: KindCluster, tmp_path: Path
) -> None:
    script = tmp_path / "job.py"
    script.write_text(TASK_SCRIPT)
    result = krt(
        kind_cluster, "run", "e2e-task-py", "--runtime", "python", "--file", str(script), "--wait"
    )
    assert result.returncode == 0, result.stderr
    assert "answer=42" in result.stdout.splitlines()
    assert "Succeeded" in result.stderr
    run = get_run(kind_cluster, "e2e-task-py")
    assert run["status"]["phase"] == "Succeeded"
    assert run["status"]["outputs"] == {"answer": "42"}
    # seed 000: output never enters Run.status; it is read from the Pod's log
    assert "hello from" not in json.dumps(run["status"])
    logs = krt(kind_cluster, "logs", "e2e-task-py")
    assert logs.returncode == 0, logs.stderr
    assert "task stdout: hello from" in logs.stdout


def test_quickstart_task_counts_primes(kind_cluster: KindCluster) -> None:
    """The quick start's task: examples/tasks/primes.py, outputs printed by --wait."""
    result = krt(
        kind_cluster, "run", "e2e-primes", "--runtime", "python",
        "--file", str(QUICKSTART_TASK_FILE), "--wait", "--", "1000",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    outputs = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    assert outputs["below"] == "1000"
    assert outputs["count"] == "168"
    assert outputs["largest"] == "997"
    assert get_run(kind_cluster, "e2e-primes")["status"]["outputs"]["count"] == "168"


def test_bash_task_run_succeeds(kind_cluster: KindCluster) -> None:
    result = krt(
        kind_cluster, "run", "e2e-task-sh", "--runtime", "bash", "--wait", "--", "echo e2e-bash-ok"
    )
    assert result.returncode == 0, result.stderr
    logs = krt(kind_cluster, "logs", "e2e-task-sh")
    assert "e2e-bash-ok" in logs.stdout


def test_failing_task_ends_failed_and_exits_1(kind_cluster: KindCluster) -> None:
    result = krt(
        kind_cluster, "run", "e2e-task-fail", "--runtime", "python", "--wait",
        "--", "-c", "raise SystemExit(3)",
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert get_run(kind_cluster, "e2e-task-fail")["status"]["phase"] == "Failed"


def test_missing_runtime_is_refused_before_anything_is_created(kind_cluster: KindCluster) -> None:
    result = krt(kind_cluster, "run", "e2e-no-runtime", "--runtime", "pyhton", "--", "-c", "1")
    assert result.returncode == 3
    assert 'Runtime "pyhton" not found' in result.stderr
    missing = kind_cluster.kubectl("get", "runs", "-n", RUNS_NAMESPACE, "-o", "name")
    assert "e2e-no-runtime" not in missing


# -- function Runs and invoke ------------------------------------------------------------


def test_krm_function_is_invoked_repeatedly_on_real_input(
    kind_cluster: KindCluster, gateway_url: str, gateway_ca_file: Path
) -> None:
    """The quick start's function: examples/krm/main.py on examples/krm/resource-list.json."""
    run = create_function(
        kind_cluster, "e2e-krm", "main.invoke", QUICKSTART_KRM_FILE, "--idle-timeout", "10m"
    )
    assert run["status"]["phase"] == "Ready"
    env = invoke_env(gateway_url, gateway_ca_file, run)
    request = json.loads(QUICKSTART_KRM_INPUT.read_text())
    config = request["functionConfig"]["spec"]
    for i in range(3):
        result = krt(
            kind_cluster, "invoke", "e2e-krm", "-d", f"@{QUICKSTART_KRM_INPUT}",
            "--invocation-id", f"e2e-{i}", env=env,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        output = json.loads(result.stdout)
        assert output["kind"] == "ResourceList"
        assert len(output["items"]) == len(request["items"])
        for item in output["items"]:
            assert config["labels"].items() <= item["metadata"]["labels"].items(), item
            if item["kind"] not in CLUSTER_SCOPED_KINDS:
                assert item["metadata"]["namespace"] == config["namespace"], item
        assert output["results"][0]["severity"] == "info"
        assert f"invocation e2e-{i}" in result.stderr
        assert "latency" in result.stderr
    # invocations leave no trace in Run.status (seed 000)
    after = get_run(kind_cluster, "e2e-krm")
    assert after["status"]["phase"] == "Ready"
    assert config["namespace"] not in json.dumps(after["status"])


def test_function_endpoint_publishes_the_gateway_ca(
    kind_cluster: KindCluster, gateway_ca_file: Path
) -> None:
    run = create_function(kind_cluster, "e2e-ca", "krm_labels.set_labels", KRM_FILE)
    endpoint = run["status"]["endpoint"]
    assert endpoint["protocol"] == "HTTPS"
    assert endpoint["url"].startswith("https://runtime-gateway.kruntimes-system.svc")
    assert base64.b64decode(endpoint["caBundle"]) == gateway_ca_file.read_bytes()


def test_bash_function_is_invoked(
    kind_cluster: KindCluster, gateway_url: str, gateway_ca_file: Path
) -> None:
    run = create_function(kind_cluster, "e2e-greet", "greet.hello", GREET_FILE)
    result = krt(
        kind_cluster,
        "invoke",
        "e2e-greet",
        "-d",
        '{"name": "Ada"}',
        env=invoke_env(gateway_url, gateway_ca_file, run),
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"message": "Hello, Ada!", "runtime": "bash"}


def test_wrong_handler_is_refused_by_the_cli(kind_cluster: KindCluster) -> None:
    result = krt(
        kind_cluster, "function", "create", "e2e-bad-handler", "--runtime", "python",
        "--handler", "app.set_labels", "--file", str(KRM_FILE),
    )  # fmt: skip
    assert result.returncode == 2
    assert "use --handler krm_labels.set_labels" in result.stderr


def test_deleted_function_is_unregistered_and_gone(
    kind_cluster: KindCluster, gateway_url: str, gateway_ca_file: Path
) -> None:
    run = create_function(kind_cluster, "e2e-deleted", "krm_labels.set_labels", KRM_FILE)
    deleted = krt(kind_cluster, "delete", "e2e-deleted", "--wait")
    assert deleted.returncode == 0, deleted.stderr
    again = krt(
        kind_cluster,
        "invoke",
        "e2e-deleted",
        "-d",
        "{}",
        env=invoke_env(gateway_url, gateway_ca_file, run),
    )
    assert again.returncode == 3
    # the old endpoint (its UID) now names no Run: the gateway answers 404 once the owner's
    # watch has seen the deletion (503 "terminating" until then)
    token = invoker_token(kind_cluster)
    deadline = time.monotonic() + 15
    while True:
        answer = raw_post(run, gateway_url, gateway_ca_file.read_bytes(), token=token, body=b"{}")
        if answer.status != 503 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert answer.status == 404, answer
    assert answer.error["reason"] == "FunctionNotFound"


# -- gateway error answers ---------------------------------------------------------------


@pytest.fixture(scope="module")
def krm_run(kind_cluster: KindCluster) -> dict[str, Any]:
    return create_function(kind_cluster, "e2e-errors", "krm_labels.set_labels", KRM_FILE)


def test_forged_token_gets_401(
    kind_cluster: KindCluster, krm_run: dict[str, Any], gateway_url: str, gateway_ca_file: Path
) -> None:
    answer = raw_post(
        krm_run, gateway_url, gateway_ca_file.read_bytes(), token="e2e-not-a-token", body=b"{}"
    )
    assert answer.status == 401
    assert answer.error["reason"] == "Unauthorized"
    assert answer.invocation_id


def test_missing_token_gets_401(
    kind_cluster: KindCluster, krm_run: dict[str, Any], gateway_url: str, gateway_ca_file: Path
) -> None:
    answer = raw_post(krm_run, gateway_url, gateway_ca_file.read_bytes(), token="", body=b"{}")
    assert answer.status == 401


def test_caller_without_get_on_the_run_gets_403(
    kind_cluster: KindCluster, krm_run: dict[str, Any], gateway_url: str, gateway_ca_file: Path
) -> None:
    env = invoke_env(gateway_url, gateway_ca_file, krm_run)
    env["KRT_SERVICE_ACCOUNT"] = f"{RUNS_NAMESPACE}/{OUTSIDER_SA}"
    result = krt(kind_cluster, "invoke", "e2e-errors", "-d", "{}", env=env)
    assert result.returncode == 5, result.stderr
    assert "403" in result.stderr


def test_unknown_function_uid_gets_404(
    kind_cluster: KindCluster, krm_run: dict[str, Any], gateway_url: str, gateway_ca_file: Path
) -> None:
    answer = raw_post(
        krm_run, gateway_url, gateway_ca_file.read_bytes(),
        token=invoker_token(kind_cluster), body=b"{}", uid=str(uuid.uuid4()),
    )  # fmt: skip
    assert answer.status == 404
    assert answer.error["reason"] == "FunctionNotFound"


def test_unknown_run_name_exits_3(
    kind_cluster: KindCluster, gateway_url: str, gateway_ca_file: Path
) -> None:
    result = krt(
        kind_cluster,
        "invoke",
        "e2e-no-such-function",
        "-d",
        "{}",
        env={"KRT_GATEWAY_URL": gateway_url},
    )
    assert result.returncode == 3
    assert "not found" in result.stderr


def test_body_over_1_mib_gets_413(
    kind_cluster: KindCluster, krm_run: dict[str, Any], gateway_url: str, gateway_ca_file: Path,
    tmp_path: Path,
) -> None:  # fmt: skip
    body = json.dumps({"pad": "x" * (1024 * 1024)}).encode()
    assert len(body) > 1024 * 1024
    answer = raw_post(
        krm_run,
        gateway_url,
        gateway_ca_file.read_bytes(),
        token=invoker_token(kind_cluster),
        body=body,
    )
    assert answer.status == 413
    assert answer.error["reason"] == "RequestTooLarge"
    assert answer.error["limitBytes"] == 1048576
    # the CLI refuses the same body before sending anything
    big = tmp_path / "big.json"
    big.write_bytes(body)
    env = invoke_env(gateway_url, gateway_ca_file, krm_run)
    result = krt(kind_cluster, "invoke", "e2e-errors", "-d", f"@{big}", env=env)
    assert result.returncode == 2
    assert "1 MiB" in result.stderr


def test_bad_json_is_refused_by_the_cli(kind_cluster: KindCluster, gateway_url: str) -> None:
    result = krt(
        kind_cluster,
        "invoke",
        "e2e-errors",
        "-d",
        "{bad json",
        env={"KRT_GATEWAY_URL": gateway_url},
    )
    assert result.returncode == 2
    assert "invalid JSON" in result.stderr


def test_overlapping_invocations_get_429(
    kind_cluster: KindCluster, gateway_url: str, gateway_ca_file: Path, tmp_path: Path
) -> None:
    source = tmp_path / "slow.py"
    source.write_text(SLOW_FUNCTION)
    run = create_function(kind_cluster, "e2e-slow", "slow.invoke", source)
    env = {**kind_cluster.env(**invoke_env(gateway_url, gateway_ca_file, run))}
    command = [KRT, "invoke", "e2e-slow", "-d", '{"seconds": 5}']
    first = subprocess.Popen(
        command, env=_full_env(env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    time.sleep(1.5)  # let the first invocation reach the Runtime Server
    second = krt(kind_cluster, "invoke", "e2e-slow", "-d", '{"seconds": 5}', env=env)
    out, err = first.communicate(timeout=60)
    codes = sorted([first.returncode, second.returncode])
    assert codes == [0, 9], (out, err, second.stderr)
    refused = second.stderr if second.returncode == 9 else err
    assert "429" in refused or "in flight" in refused


def _full_env(extra: dict[str, str]) -> dict[str, str]:
    return {**os.environ, **extra}
