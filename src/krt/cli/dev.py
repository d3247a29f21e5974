"""``krt dev up|down|status``: a local cluster (localkube) for development and tests.

localkube is imported inside the commands only: the rest of krt never imports it.

State directory (``--state-dir``, default ``~/.krt/dev``; one per cluster, so several can
live side by side): the API server's SQLite store, PKI and ``kubeconfig``, the Pod roots
under ``node/``, ``krt-dev.pid`` (the cluster process), ``cluster.json`` (written once it
serves) and ``krt-dev.log`` (output of a ``--detach`` run).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import click

DEFAULT_STATE_DIR = Path("~/.krt/dev")
PID_FILE = "krt-dev.pid"
LOG_FILE = "krt-dev.log"
READY_FILE = "cluster.json"
#: Seconds ``up --detach`` waits for the API server to answer.
UP_WAIT_SECONDS = 30.0
#: Seconds ``down`` waits for the cluster process to exit after SIGTERM.
DOWN_WAIT_SECONDS = 15.0

state_dir_option = click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=DEFAULT_STATE_DIR,
    show_default=True,
    help="Directory holding this dev cluster's state.",
)


def _resolve(state_dir: Path) -> Path:
    return state_dir.expanduser().resolve()


def _read_pid(state: Path) -> dict[str, Any] | None:
    try:
        raw = json.loads((state / PID_FILE).read_text())
    except (OSError, ValueError):
        return None
    return raw if isinstance(raw, dict) and isinstance(raw.get("pid"), int) else None


def _running_pid(state: Path) -> int | None:
    """The pid of this state dir's live cluster process, or None."""
    from localkube.node.process import alive

    rec = _read_pid(state)
    if rec is None:
        return None
    pid = int(rec["pid"])
    return pid if alive(pid, rec.get("start_ticks")) else None


@click.group()
def dev() -> None:
    """Run a local Kubernetes (localkube) with the kruntimes images as local processes."""


@dev.command()
@state_dir_option
@click.option("--detach", is_flag=True, help="Run in the background; return once it serves.")
@click.option(
    "--port", default=0, type=click.IntRange(0, 65535), help="API server port (0: any free)."
)
@click.option(
    "--images",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="YAML/JSON image table overlay (image -> local command).",
)
@click.option("-v", "--verbose", is_flag=True, help="Log at debug level.")
def up(state_dir: Path, detach: bool, port: int, images: Path | None, verbose: bool) -> None:
    """Start the cluster (API server, controllers, node, Service proxy).

    Re-running on an existing state directory resumes its objects and restarts their Pods.
    """
    state = _resolve(state_dir)
    state.mkdir(parents=True, exist_ok=True)
    pid = _running_pid(state)
    if pid is not None:
        raise click.UsageError(
            f"a dev cluster is already running from {state} (pid {pid}); "
            f"stop it with: krt dev down --state-dir {state}"
        )
    if detach:
        _up_detached(state, port, images, verbose)
    else:
        _up_foreground(state, port, images, verbose)


def _print_access(state: Path, url: str, kubeconfig: str) -> None:
    click.echo(f"localkube is serving on {url} (state: {state})")
    click.echo(f"kubeconfig: {kubeconfig}")
    click.echo(f"export KUBECONFIG={kubeconfig}")


def _up_foreground(state: Path, port: int, images: Path | None, verbose: bool) -> None:
    import logging

    import trio

    from localkube.cluster import ClusterConfig, ClusterHandle, serve_cluster
    from localkube.images import ImageTableError
    from localkube.node.process import PidRecord, start_ticks

    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    me = os.getpid()
    pid_file = state / PID_FILE
    PidRecord(me, os.getpgid(0), start_ticks(me)).write(pid_file)

    async def run() -> None:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with trio.open_nursery() as nursery:
                handle: ClusterHandle = await nursery.start(
                    serve_cluster, ClusterConfig(state_dir=state, port=port, images_file=images)
                )
                _print_access(state, handle.apiserver.url, str(handle.apiserver.kubeconfig_path))
                sys.stdout.flush()
                async for signum in signals:
                    click.echo(f"received {signal.Signals(signum).name}: stopping", err=True)
                    nursery.cancel_scope.cancel()
                    break

    try:
        trio.run(run)
    except ImageTableError as exc:
        raise click.ClickException(str(exc)) from exc
    except OSError as exc:
        raise click.ClickException(f"cannot start localkube: {exc}") from exc
    finally:
        rec = _read_pid(state)
        if rec is not None and rec.get("pid") == me:
            pid_file.unlink(missing_ok=True)
    click.echo("localkube stopped", err=True)


def _api_answers(url: str) -> bool:
    import httpx

    try:
        # a liveness check of our own loopback server: any HTTP answer will do
        httpx.get(f"{url}/version", verify=False, timeout=1.0)
    except httpx.HTTPError:
        return False
    return True


def _up_detached(state: Path, port: int, images: Path | None, verbose: bool) -> None:
    (state / READY_FILE).unlink(missing_ok=True)
    argv = [sys.executable, "-m", "krt.cli.main", "dev", "up", "--state-dir", str(state)]
    argv += ["--port", str(port)]
    if images is not None:
        argv += ["--images", str(images.resolve())]
    if verbose:
        argv.append("--verbose")
    with open(state / LOG_FILE, "ab") as log:
        child = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            cwd=str(state),
        )
    deadline = time.monotonic() + UP_WAIT_SECONDS
    while time.monotonic() < deadline:
        if child.poll() is not None:
            tail = (state / LOG_FILE).read_text(errors="replace")[-2000:]
            raise click.ClickException(
                f"localkube exited with code {child.returncode} while starting; "
                f"log ({state / LOG_FILE}):\n{tail}"
            )
        try:
            ready = json.loads((state / READY_FILE).read_text())
        except (OSError, ValueError):
            ready = None
        if ready and ready.get("pid") == child.pid and _api_answers(ready["url"]):
            click.echo(f"localkube started in the background (pid {child.pid})")
            _print_access(state, ready["url"], ready["kubeconfig"])
            return
        time.sleep(0.1)
    child.terminate()
    raise click.ClickException(
        f"localkube did not answer within {UP_WAIT_SECONDS:g} s; see {state / LOG_FILE}"
    )


@dev.command()
@state_dir_option
def status(state_dir: Path) -> None:
    """Show whether the cluster runs, where, and its Pods."""
    state = _resolve(state_dir)
    pid = _running_pid(state)
    if pid is None:
        click.echo(f"localkube is not running (state: {state})")
        sys.exit(3)
    try:
        ready = json.loads((state / READY_FILE).read_text())
    except (OSError, ValueError):
        click.echo(f"localkube is starting (pid {pid}, state: {state})")
        return
    click.echo(f"localkube is running (pid {pid}) on {ready['url']} (state: {state})")
    click.echo(f"export KUBECONFIG={ready['kubeconfig']}")
    for line in _pod_lines(ready["url"], Path(ready["kubeconfig"])):
        click.echo(line)


def _pod_lines(url: str, kubeconfig: Path) -> list[str]:
    import base64
    import ssl
    import tempfile

    import httpx
    import yaml

    try:
        cfg = yaml.safe_load(kubeconfig.read_text())
        token = cfg["users"][0]["user"]["token"]
        ca = base64.b64decode(cfg["clusters"][0]["cluster"]["certificate-authority-data"])
    except (OSError, KeyError, IndexError, TypeError, ValueError, yaml.YAMLError) as exc:
        return [f"(cannot read {kubeconfig}: {exc})"]
    with tempfile.NamedTemporaryFile("wb", suffix=".crt") as ca_file:
        ca_file.write(ca)
        ca_file.flush()
        ctx = ssl.create_default_context(cafile=ca_file.name)
        try:
            r = httpx.get(
                f"{url}/api/v1/pods",
                headers={"Authorization": f"Bearer {token}"},
                verify=ctx,
                timeout=5.0,
            )
            pods = r.json().get("items", [])
        except (httpx.HTTPError, ValueError) as exc:
            return [f"(cannot list Pods: {exc})"]
    lines = [f"{len(pods)} pod(s)"]
    for p in pods:
        st = p.get("status") or {}
        lines.append(
            f"  {p['metadata']['namespace']}/{p['metadata']['name']}: "
            f"{st.get('phase', '?')} {st.get('podIP', '')}"
        )
    return lines


@dev.command()
@state_dir_option
def down(state_dir: Path) -> None:
    """Stop the cluster and every Pod process it started (verified by pid)."""
    from localkube.node.layout import pods_dir
    from localkube.node.process import alive, group_members, kill_leftover_groups

    state = _resolve(state_dir)
    pid = _running_pid(state)
    if pid is not None:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + DOWN_WAIT_SECONDS
        while alive(pid, None) and time.monotonic() < deadline:
            time.sleep(0.05)
        if alive(pid, None):
            os.kill(pid, signal.SIGKILL)
            click.echo(f"localkube (pid {pid}) did not stop in time: killed", err=True)
    killed = kill_leftover_groups(pods_dir(state))
    deadline = time.monotonic() + 5.0
    while any(group_members(g) for g in killed) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = [g for g in killed if group_members(g)]
    (state / PID_FILE).unlink(missing_ok=True)
    if left:
        raise click.ClickException(f"process groups still alive after SIGKILL: {left}")
    if pid is None:
        click.echo(f"localkube was not running (state: {state})")
    else:
        click.echo(f"localkube stopped (pid {pid})")
    if killed:
        click.echo(f"killed {len(killed)} leftover Pod process group(s)")
