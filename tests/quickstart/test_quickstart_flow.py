"""The quick start end to end: `krt dev up` installs kruntimes, real Runs, `krt dev down`.

Real processes throughout (localkube, the control plane, runtimed, Runtime Servers, the
gateway), each test on its own temporary state directory; every test ends with
`krt dev down` and checks that no process of the cluster is left.
"""

from __future__ import annotations

import os
import re
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
KRT = str(BIN / "krt")


def krt(
    *args: str, state: Path | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KRT_", "KUBECONFIG"))}
    if state is not None and (state / "env").exists():
        for line in (state / "env").read_text().splitlines():
            key, _, value = line.removeprefix("export ").partition("=")
            env[key] = value
    return subprocess.run(
        [KRT, *args],
        env=env,
        text=True,
        capture_output=True,
        timeout=timeout,
        check=False,
        cwd=REPO,
    )


def processes_of(state: Path) -> list[str]:
    """Live processes started for this cluster: cwd below it or its path in the command line."""
    found = []
    root = str(state)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if cwd.startswith(root) or root in cmdline:
            found.append(f"{entry.name}: {cmdline[:200]}")
    return found


@pytest.fixture
def state(tmp_path: Path) -> Iterator[Path]:
    """A state directory; the cluster started on it is stopped, and nothing may be left."""
    directory = tmp_path / "dev"
    yield directory
    down = krt("dev", "down", "--state-dir", str(directory))
    assert down.returncode == 0, down.stderr
    assert not (directory / "env").exists()
    left = processes_of(directory)
    assert not left, f"processes left after krt dev down: {left}"


def test_dev_up_installs_kruntimes_idempotently_and_a_task_run_succeeds(state: Path) -> None:
    up = krt("dev", "up", "--detach", "--state-dir", str(state), "--timeout", "90")
    assert up.returncode == 0, up.stdout + up.stderr
    out = up.stdout
    assert "kruntimes applied (20 created, 0 configured, 0 unchanged)" in out
    assert re.search(r"waiting for Runtime (python|bash): 0/1 ready", out), out
    match = re.search(
        r"Ready: kruntimes is installed \(control plane, gateway (https://[0-9.]+:443)", out
    )
    assert match, out
    assert "python 1 ready, bash 1 ready" in out
    env = (state / "env").read_text()
    assert f"export KRT_GATEWAY_URL={match.group(1)}\n" in env
    assert f"export KUBECONFIG={state / 'kubeconfig'}\n" in env

    again = krt("dev", "up", "--detach", "--state-dir", str(state))
    assert again.returncode == 0, again.stdout + again.stderr
    assert "localkube is already running" in again.stdout
    assert "kruntimes applied (0 created, 0 configured, 20 unchanged)" in again.stdout
    assert "Ready: kruntimes is installed" in again.stdout

    runtimes = krt("runtime", "list", state=state)
    assert re.search(r"^python\s+1/1\s", runtimes.stdout, re.M), runtimes.stdout
    assert re.search(r"^bash\s+1/1\s", runtimes.stdout, re.M), runtimes.stdout
    task = krt(
        "run",
        "primes",
        "--runtime",
        "python",
        "--file",
        "examples/tasks/primes.py",
        "--wait",
        "--wait-timeout",
        "60s",
        "--",
        "1000",
        state=state,
    )
    assert task.returncode == 0, task.stdout + task.stderr
    assert "count=168\n" in task.stdout
    assert "largest=997\n" in task.stdout
    # the chart's gateway serves HTTPS with the dev CA's certificate, which covers the
    # Service's ClusterIP (what KRT_GATEWAY_URL dials); no token: 401 before any routing
    context = ssl.create_default_context(cafile=str(state / "kruntimes" / "gateway-ca" / "ca.crt"))
    answer = httpx.post(
        f"{match.group(1)}/v1/namespaces/default/runtimes/python/functions/x:invoke",
        content=b"{}",
        headers={"content-type": "application/json"},
        verify=context,
        timeout=10,
    )
    assert answer.status_code == 401


def test_no_install_gives_a_bare_cluster_and_a_crashing_component_is_reported_with_its_log(
    state: Path, tmp_path: Path
) -> None:
    images = tmp_path / "images.yaml"
    images.write_text(
        "images:\n"
        "  kruntimes/controlplane:\n"
        "    entrypoint: ['{python}', '-c', 'import sys; sys.exit(\"boom: no controller today\")']\n"
    )
    up = krt(
        "dev", "up", "--detach", "--no-install", "--state-dir", str(state), "--images", str(images)
    )
    assert up.returncode == 0, up.stdout + up.stderr
    assert "installing kruntimes" not in up.stdout
    crds = krt("runtime", "list", "--kubeconfig", str(state / "kubeconfig"))
    assert crds.returncode != 0  # no Runtime CRD: nothing installed

    failed = krt("dev", "up", "--detach", "--state-dir", str(state), "--timeout", "60")
    assert failed.returncode == 1, failed.stdout + failed.stderr
    error = failed.stderr
    assert re.search(
        r"control plane: container controlplane of Pod kruntimes-system/krt-kruntimes-controlplane-\S+ "
        r"keeps exiting",
        error,
    ), error
    log = re.search(r"^log: (\S+)$", error, re.M)
    assert log, error
    assert "boom: no controller today" in Path(log.group(1)).read_text()
    assert "boom: no controller today" in error
    assert f"krt dev down --state-dir {state}" in error


def test_the_quick_start_runs_the_task_and_the_functions_end_to_end(state: Path) -> None:
    done = subprocess.run(
        [sys.executable, "examples/quickstart.py", "--state-dir", str(state), "--invokes", "3"],
        cwd=REPO,
        text=True,
        capture_output=True,
        timeout=300,
        check=False,
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "count=148933\n" in out  # the task Run's outputs
    assert "  namespace: shop-prod\n" in out  # the transformed manifests
    assert "    environment: prod\n" in out
    assert re.search(
        r"^ERROR\s+Deployment/order-worker\s+spec\.template\.spec\.containers\[0\]\.image",
        out,
        re.M,
    )
    assert re.search(r"Invoke latency over 3 invokes .*: p50 [0-9.]+ ms", out), out
    assert '{"message": "Hello, kruntimes!", "runtime": "bash"}' in out
    assert f"krt dev down --state-dir {state}" in out


def test_a_component_that_never_gets_ready_is_named_with_its_log_when_time_runs_out(
    state: Path, tmp_path: Path
) -> None:
    images = tmp_path / "images.yaml"
    images.write_text(
        "images:\n"
        "  kruntimes/gateway:\n"
        "    entrypoint: ['{python}', '-c', 'import time; print(\"stuck\", flush=True); time.sleep(600)']\n"
    )
    up = krt(
        "dev", "up", "--detach", "--no-install", "--state-dir", str(state), "--images", str(images)
    )
    assert up.returncode == 0, up.stdout + up.stderr
    failed = krt("dev", "up", "--detach", "--state-dir", str(state), "--timeout", "4")
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "waiting for the gateway: 0/1 Pods ready ..." in failed.stdout
    error = failed.stderr
    assert "kruntimes was not ready after 4 s:" in error
    pending = re.search(r"^  waiting for the gateway: 0/1 Pods ready \(log: (\S+)\)$", error, re.M)
    assert pending, error
    assert Path(pending.group(1)).read_text().rstrip().endswith("stuck")
    assert f"cluster log: {state / 'krt-dev.log'}" in error
