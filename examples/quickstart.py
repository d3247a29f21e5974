"""The quick start (``make quickstart``): kruntimes on a local cluster, driven through ``krt``.

Every step is a real ``krt`` command against real components (localkube, the control plane,
runtimed, the Runtime Servers, the gateway), printed before it runs:

1. ``krt dev up --detach``: start localkube and install kruntimes from the charts; returns
   when the control plane, the gateway and the ``python`` and ``bash`` Runtimes are ready;
2. ``krt run --wait``: a task Run (``examples/tasks/primes.py``), with its outputs;
3. ``krt function create``: the KRM function ``examples/krm/main.py`` as a function Run;
4. ``krt invoke`` (``--invokes`` times) with the ResourceList built from
   ``examples/krm/manifests.yaml``: the transformed manifests, the validation results and
   the invoke latency (p50/p90 of what ``krt invoke`` measures: request sent to answer read);
5. ``krt function create`` + ``krt invoke`` of the Bash function ``examples/bash/greet.sh``;
6. the commands to try next, and ``krt dev down`` to stop.

The cluster keeps running afterwards. Exit status 0 only when every step worked.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent
REPO = EXAMPLES.parent
BIN = Path(sys.executable).parent
KRT = str(BIN / "krt") if (BIN / "krt").exists() else "krt"
KRM_FUNCTION = "krm-set-metadata"
BASH_FUNCTION = "greet"
LATENCY = re.compile(r"latency ([0-9.]+) ms")

sys.path.insert(0, str(EXAMPLES / "krm"))
import resource_list  # noqa: E402  (examples/krm/resource_list.py)


class StepFailed(Exception):
    """A command failed; the message says which and why."""


def banner(text: str) -> None:
    print(f"\n\033[1m== {text}\033[0m" if sys.stdout.isatty() else f"\n== {text}", flush=True)


def rel(path: Path) -> str:
    """``path`` relative to the working directory when it is below it (shorter to read)."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def show(argv: list[str]) -> None:
    shown = ["krt", *argv[1:]] if argv[0] == KRT else argv
    print("$ " + shlex.join(shown), flush=True)


def krt(
    *args: str,
    env: dict[str, str],
    capture: bool = False,
    check: bool = True,
    quiet: bool = False,
    stdin: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``krt args...``; echo it first (unless ``quiet``); raise StepFailed on failure."""
    argv = [KRT, *args]
    if not quiet:
        show(argv)
    done = subprocess.run(
        argv,
        env=env,
        text=True,
        input=stdin,
        stdout=subprocess.PIPE if capture else None,
        stderr=subprocess.PIPE if capture else None,
        check=False,
    )
    if check and done.returncode != 0:
        detail = (done.stderr or "").strip() if capture else ""
        raise StepFailed(
            f"`krt {shlex.join(args)}` exited with {done.returncode}"
            + (f": {detail}" if detail else "")
        )
    return done


def read_env(state_dir: Path) -> dict[str, str]:
    """The environment ``krt dev up`` wrote to ``<state>/env`` (KUBECONFIG, KRT_GATEWAY_URL)."""
    env = dict(os.environ)
    for line in (state_dir / "env").read_text().splitlines():
        key, _, value = line.removeprefix("export ").partition("=")
        if key:
            env[key] = value
    env.setdefault("PATH", str(BIN))
    env["PATH"] = f"{BIN}{os.pathsep}{env['PATH']}"
    return env


def start_cluster(state_dir: Path) -> dict[str, str]:
    banner("1. Start localkube with kruntimes installed (krt dev up --detach)")
    args = ["dev", "up", "--detach"]
    if state_dir != Path("~/.krt/dev").expanduser():
        args += ["--state-dir", str(state_dir)]
    krt(*args, env=dict(os.environ))
    env = read_env(state_dir)
    krt("runtime", "list", env=env)
    return env


def run_task(env: dict[str, str]) -> None:
    banner("2. A task Run: count the primes below 2,000,000 on the warm python Runtime")
    name = "primes"
    krt(
        "delete", name, "--wait", "--timeout", "30s", env=env, capture=True, check=False, quiet=True
    )
    krt(
        "run",
        name,
        "--runtime",
        "python",
        "--file",
        rel(EXAMPLES / "tasks" / "primes.py"),
        "--wait",
        "--wait-timeout",
        "60s",
        "--",
        "2000000",
        env=env,
    )
    krt("logs", name, env=env)


def create_function(
    name: str, runtime: str, handler: str, source: Path, env: dict[str, str]
) -> None:
    krt(
        "delete", name, "--wait", "--timeout", "30s", env=env, capture=True, check=False, quiet=True
    )
    krt(
        "function",
        "create",
        name,
        "--runtime",
        runtime,
        "--handler",
        handler,
        "--file",
        rel(source),
        "--idle-timeout",
        "1h",
        "--wait-timeout",
        "60s",
        env=env,
    )


def published_ca_bundle(name: str, env: dict[str, str]) -> None:
    """Check that function ``name`` publishes ``status.endpoint.caBundle``: ``krt invoke``
    trusts the gateway through it alone (seed 000), with no trust root set up by hand.

    Raises:
        StepFailed: the endpoint carries no caBundle (runtimed was not given the gateway CA).
    """
    done = krt("get", name, "-o", "json", env=env, capture=True, quiet=True)
    endpoint = (json.loads(done.stdout).get("status") or {}).get("endpoint") or {}
    if not endpoint.get("caBundle"):
        raise StepFailed(
            f"function {name} publishes no status.endpoint.caBundle: the Runtime Pods' "
            "runtimed did not get the gateway CA (ConfigMap kruntimes-gateway-ca)"
        )


def invoke(name: str, data: str, env: dict[str, str], *, quiet: bool = False) -> tuple[str, float]:
    """Invoke once; return (output, latency in ms as krt invoke measured it)."""
    done = krt("invoke", name, "-d", data, env=env, capture=True, quiet=quiet)
    match = LATENCY.search(done.stderr)
    if match is None:
        raise StepFailed(f"krt invoke printed no latency: {done.stderr.strip()}")
    return done.stdout, float(match.group(1))


def run_krm(env: dict[str, str], invokes: int) -> None:
    banner("3. A function Run: the KRM function examples/krm/main.py (main.invoke)")
    create_function(KRM_FUNCTION, "python", "main.invoke", EXAMPLES / "krm" / "main.py", env)

    banner(f"4. Invoke it {invokes} times on examples/krm/manifests.yaml (11 objects)")
    published_ca_bundle(KRM_FUNCTION, env)
    with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="krm-input-", delete=False) as f:
        json.dump(resource_list.build(), f)
        input_file = f.name
    try:
        output, first = invoke(KRM_FUNCTION, f"@{input_file}", env)
        latencies = [first]
        for _ in range(invokes - 1):
            again, ms = invoke(KRM_FUNCTION, f"@{input_file}", env, quiet=True)
            if again != output:
                raise StepFailed("two invocations on the same input gave different outputs")
            latencies.append(ms)
    finally:
        os.unlink(input_file)
    transformed = json.loads(output)
    print("\nThe transformed manifests (namespace and labels set by the function):\n")
    print(resource_list.to_yaml(transformed))
    print("Validation results:")
    print(resource_list.format_results(transformed))
    ordered = sorted(latencies)
    p90 = ordered[math.ceil(0.9 * len(ordered)) - 1]  # nearest rank
    print(
        f"\nInvoke latency over {len(latencies)} invokes (client -> gateway -> runtimed -> "
        f"Python Runtime Server and back): p50 {statistics.median(latencies):.1f} ms, "
        f"p90 {p90:.1f} ms, min {ordered[0]:.1f} ms"
    )


def run_bash(env: dict[str, str]) -> None:
    banner("5. A Bash function: examples/bash/greet.sh (greet.hello)")
    create_function(BASH_FUNCTION, "bash", "greet.hello", EXAMPLES / "bash" / "greet.sh", env)
    published_ca_bundle(BASH_FUNCTION, env)
    output, ms = invoke(BASH_FUNCTION, '{"name": "kruntimes"}', env)
    print(output.rstrip())
    print(f"(latency {ms:.1f} ms)")


def next_steps(state_dir: Path, failed: bool) -> None:
    banner("The cluster keeps running. Try next:")
    state_arg = "" if state_dir == Path("~/.krt/dev").expanduser() else f" --state-dir {state_dir}"
    print(
        f"""  source .venv/bin/activate; source {state_dir / "env"}   # krt, KUBECONFIG, KRT_GATEWAY_URL
  krt get                          # every Run and its phase
  krt describe {KRM_FUNCTION}     # the function Run: endpoint, conditions, events
  krt invoke {KRM_FUNCTION} -d @examples/krm/resource-list.json \\
      | python examples/krm/resource_list.py show -
  krt invoke {BASH_FUNCTION} -d '{{"name": "you"}}'
  krt run --runtime bash --wait -- 'echo "bash=$BASH_VERSION" >> "$KRUNTIME_OUTPUTS"'
  krt runtime list; krt dev status{state_arg}
  kubectl get pods -A              # localkube speaks the Kubernetes API (if kubectl is installed)
Stop everything (every Pod process included):
  krt dev down{state_arg}"""
    )
    if failed:
        print(f"\nLogs of every Pod: {state_dir}/node/pods/<namespace>_<pod>_<uid>/logs/")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--state-dir", type=Path, default=Path("~/.krt/dev"), help="dev cluster state directory"
    )
    parser.add_argument("--invokes", type=int, default=20, help="KRM invocations to time")
    args = parser.parse_args(argv)
    if args.invokes < 1:
        parser.error("--invokes must be at least 1")
    state_dir = args.state_dir.expanduser().resolve()
    started = time.monotonic()
    try:
        env = start_cluster(state_dir)
        run_task(env)
    except StepFailed as exc:
        print(f"\nquick start failed: {exc}", file=sys.stderr)
        return 1
    failed = False
    try:
        run_krm(env, args.invokes)
        run_bash(env)
    except StepFailed as exc:
        failed = True
        krt("describe", KRM_FUNCTION, env=env, check=False)
        print(
            f"\nThe task Run worked, but the function part failed: {exc}\n"
            f"See `krt describe {KRM_FUNCTION}` and the runtimed logs under "
            f"{state_dir}/node/pods/default_runtime-python-*/logs/runtimed/.",
            file=sys.stderr,
        )
    next_steps(state_dir, failed)
    print(f"\n(quick start took {time.monotonic() - started:.0f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
