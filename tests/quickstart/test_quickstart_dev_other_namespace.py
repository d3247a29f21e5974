"""End to end: a Runtime in a second namespace on ``krt dev up`` serves invokes.

Seed 000: ``Ready=True`` means the Run "can accept invokes", through the gateway, which
reaches runtimed over mTLS. Before ``krt dev`` wired other namespaces
(:mod:`krt.cli.dev_namespaces`), a function Run there went Ready but ``krt invoke`` failed
(no caBundle; with one, 503 RuntimeUnreachable: runtimed served plaintext).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from test_quickstart_flow import REPO, krt, state  # noqa: F401 - `state` is a fixture

pytestmark = pytest.mark.slow

NS = "team-a"
KUBECTL = shutil.which("kubectl")


def kubectl(state_dir: Path, *args: str, stdin: str = "") -> str:
    assert KUBECTL is not None
    done = subprocess.run(
        [KUBECTL, "--kubeconfig", str(state_dir / "kubeconfig"), *args],
        input=stdin,
        text=True,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
def test_a_function_in_a_second_namespace_is_invoked_through_the_gateway(
    state: Path,  # noqa: F811 - the fixture imported above
) -> None:
    up = krt("dev", "up", "--detach", "--state-dir", str(state), "--timeout", "90")
    assert up.returncode == 0, up.stdout + up.stderr
    kubectl(state, "create", "namespace", NS)
    runtime = json.loads(kubectl(state, "get", "runtime", "bash", "-n", "default", "-o", "json"))
    runtime["metadata"] = {"name": "bash", "namespace": NS}
    runtime.pop("status", None)
    kubectl(state, "create", "-f", "-", stdin=json.dumps(runtime))
    created = krt(
        "-n",
        NS,
        "function",
        "create",
        "greet",
        "--runtime",
        "bash",
        "--handler",
        "greet.hello",
        "--file",
        str(REPO / "examples" / "bash" / "greet.sh"),
        "--wait-timeout",
        "90s",
        state=state,
    )
    assert created.returncode == 0, created.stdout + created.stderr
    run = json.loads(kubectl(state, "get", "runs.kruntimes.io", "greet", "-n", NS, "-o", "json"))
    assert run["status"]["phase"] == "Ready"
    assert run["status"]["endpoint"].get("caBundle"), run["status"]["endpoint"]
    invoked = krt("-n", NS, "invoke", "greet", "-d", '{"name": "team-a"}', state=state)
    assert invoked.returncode == 0, invoked.stdout + invoked.stderr
    assert "team-a" in invoked.stdout
    log = (state / "krt-dev.log").read_text()
    assert f"namespace {NS}: secret/kruntimes-peer-tls created" in log
