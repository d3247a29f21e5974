"""``krt dev up|down|status``: a local cluster (localkube) with kruntimes installed.

``krt dev up`` starts localkube and installs kruntimes from the charts (the rendered
manifest set of :mod:`krt.cli.dev_apply`: CRDs, control plane, gateway with a generated CA,
peer mTLS Secret, the built-in ``python`` and ``bash`` Runtimes in ``default``), then waits
until everything is ready (:mod:`krt.cli.dev_install`); ``--no-install`` gives a bare
cluster. With ``--detach`` the cluster runs in the background and the command returns once
kruntimes is ready; in the foreground it prints ``Ready`` and serves until Ctrl-C. Re-running
``up --detach`` on a running cluster re-applies the install (idempotent) and returns. Every
object is reported kubectl style; the built-in Runtimes are created only when missing, so
edits to them survive a re-run (:mod:`krt.cli.dev_install`), while a TLS Secret changed by
hand is put back with a warning (:func:`krt.cli.dev_apply.replaced_secret_warning`).

While it serves, the cluster process also wires every other namespace that gets a Runtime
(:mod:`krt.cli.dev_namespaces`): that namespace gets the gateway CA ConfigMap and a peer TLS
Secret from the dev CAs, so its function Runs can be invoked through the gateway as in
``default``.

localkube is imported inside the commands only: the rest of krt never imports it.

State directory (``--state-dir``, default ``~/.krt/dev``; one per cluster, so several can
live side by side): the API server's SQLite store, PKI and ``kubeconfig``, the Pod roots
under ``node/``, ``krt-dev.pid`` (the cluster process), ``cluster.json`` (written once it
serves), ``krt-dev.log`` (output of a ``--detach`` run), ``kruntimes/`` (the generated CAs)
and ``env`` (``export KUBECONFIG=... KRT_GATEWAY_URL=...`` once kruntimes is ready).
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import click

from krt.gc_tuning import freeze_startup_heap
from krt.kube.http11_errors import describe_failure

DEFAULT_STATE_DIR = Path("~/.krt/dev")
PID_FILE = "krt-dev.pid"
LOG_FILE = "krt-dev.log"
READY_FILE = "cluster.json"
ENV_FILE = "env"
#: Seconds ``up --detach`` waits for the API server to answer.
UP_WAIT_SECONDS = 30.0
#: Seconds ``down`` waits for the cluster process to exit after SIGTERM.
DOWN_WAIT_SECONDS = 15.0
#: Default seconds ``up`` waits for kruntimes to be ready after installing it.
INSTALL_WAIT_SECONDS = 120.0

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


def other_installation(pid: int) -> str | None:
    """The bin directory a running ``krt dev up`` process was started from, if not ours.

    localkube runs every Pod's processes from its own interpreter's bin directory, so a
    cluster started from another checkout runs that checkout's code.

    Args:
        pid: the cluster process.

    Returns:
        Its interpreter's directory when it differs from this process's, else None (also
        when it cannot be read).
    """
    try:
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0].decode()
    except (OSError, UnicodeDecodeError):
        return None
    if not argv0 or not os.path.isabs(argv0):
        return None
    theirs, ours = Path(argv0).parent, Path(sys.executable).parent
    if os.path.realpath(theirs) == os.path.realpath(ours):
        return None
    return str(theirs)


@click.group()
def dev() -> None:
    """Run a local Kubernetes (localkube) with the kruntimes images as local processes."""


@dev.command()
@state_dir_option
@click.option("--detach", is_flag=True, help="Run in the background; return once it serves.")
@click.option(
    "--port",
    default=0,
    type=click.IntRange(0, 65535),
    help="API server port (0: the state directory's previous port if free, else any free).",
)
@click.option(
    "--images",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="YAML/JSON image table overlay (image -> local command).",
)
@click.option(
    "--no-install",
    is_flag=True,
    help="A bare cluster: do not install kruntimes (CRDs, control plane, gateway, Runtimes).",
)
@click.option(
    "--timeout",
    "wait_seconds",
    type=click.FloatRange(min=1.0),
    default=INSTALL_WAIT_SECONDS,
    show_default=True,
    help="Seconds to wait for kruntimes to be ready.",
)
@click.option("-v", "--verbose", is_flag=True, help="Log at debug level.")
def up(
    state_dir: Path,
    detach: bool,
    port: int,
    images: Path | None,
    no_install: bool,
    wait_seconds: float,
    verbose: bool,
) -> None:
    """Start the cluster and install kruntimes; ready when it returns (--detach) or prints Ready.

    Re-running on an existing state directory resumes its objects and restarts their Pods;
    re-running with --detach while the cluster runs re-applies the install and returns.

    Each object of the install is reported as kubectl apply reports it (created,
    configured, unchanged). The system parts (CRDs, RBAC, control plane, gateway) are
    applied like kubectl apply: an edit of them is put back ("configured"). The built-in
    Runtimes python and bash are created only when missing: edits to them (kubectl edit
    runtime bash) are kept ("kept"); delete one to get its default back. The TLS Secrets
    (runtime-gateway-tls, kruntimes-peer-tls) hold certificates of the dev CAs, the only
    ones the dev cluster trusts: one changed by hand is put back, with a warning line.

    \b
    Examples:
      krt dev up --detach && source ~/.krt/dev/env
      krt dev up --detach --state-dir /tmp/krt-a --no-install   # a bare localkube
      krt dev up                                                # foreground, Ctrl-C stops
    """
    state = _resolve(state_dir)
    state.mkdir(parents=True, exist_ok=True)
    pid = _running_pid(state)
    if pid is not None:
        if not detach:
            raise click.UsageError(
                f"a dev cluster is already running from {state} (pid {pid}); "
                f"stop it with: krt dev down --state-dir {state}"
            )
        click.echo(f"localkube is already running (pid {pid}, state: {state})")
        other = other_installation(pid)
        if other is not None:
            click.echo(
                f"warning: that dev cluster was started from another installation ({other}); "
                f"its Pods run that installation's code. To run this one's: "
                f"krt dev down --state-dir {state}, then krt dev up again",
                err=True,
            )
        ready = _ready_record(state)
        if ready is None:
            raise click.ClickException(
                f"the dev cluster (pid {pid}) has not finished starting; see {state / LOG_FILE}"
            )
        _print_access(state, ready["url"], ready["kubeconfig"])
        if not no_install:
            _install_or_fail(state, Path(ready["kubeconfig"]), wait_seconds)
        return
    (state / ENV_FILE).unlink(missing_ok=True)  # rewritten once kruntimes is ready
    if port == 0:
        # a resumed cluster keeps its address, so clients still running (krt wait, kubectl
        # get -w, a copied kubeconfig) reconnect to it instead of retrying a dead port
        port = previous_port(state)
    if detach:
        _up_detached(state, port, images, verbose)
        if not no_install:
            ready = _ready_record(state)
            assert ready is not None  # _up_detached returned: the record was there
            _install_or_fail(state, Path(ready["kubeconfig"]), wait_seconds)
    else:
        _up_foreground(state, port, images, verbose, None if no_install else wait_seconds)


def previous_port(state: Path) -> int:
    """The API server port this state directory last served on, if it can be bound now.

    Read from ``<state>/kubeconfig`` (written by localkube on every start). The port is
    probed on 127.0.0.1 with ``SO_REUSEADDR``, as localkube's listener binds it, so
    connections of the stopped server still in TIME_WAIT do not count as taken.

    Args:
        state: the dev cluster's state directory.

    Returns:
        The previous port (1-65535), or 0 (any free port) when there is no readable
        kubeconfig, its server has no port, or something else holds the port.
    """
    import socket
    from urllib.parse import urlsplit

    import yaml

    try:
        cfg = yaml.safe_load((state / "kubeconfig").read_text())
        port = urlsplit(str(cfg["clusters"][0]["cluster"]["server"])).port
    except (OSError, KeyError, IndexError, TypeError, ValueError, yaml.YAMLError):
        return 0
    if not port:
        return 0
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return 0
    return port


def _ready_record(state: Path) -> dict[str, Any] | None:
    try:
        ready = json.loads((state / READY_FILE).read_text())
    except (OSError, ValueError):
        return None
    return ready if isinstance(ready, dict) else None


def _print_access(state: Path, url: str, kubeconfig: str) -> None:
    click.echo(f"localkube is serving on {url} (state: {state})")
    click.echo(f"kubeconfig: {kubeconfig}")
    click.echo(f"export KUBECONFIG={kubeconfig}")


def _up_foreground(
    state: Path, port: int, images: Path | None, verbose: bool, wait_seconds: float | None
) -> None:
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
                freeze_startup_heap()  # the cluster's long-lived state exists now
                _print_access(state, handle.apiserver.url, str(handle.apiserver.kubeconfig_path))
                sys.stdout.flush()
                nursery.start_soon(
                    _wire_runtime_namespaces, state, Path(handle.apiserver.kubeconfig_path)
                )
                if wait_seconds is not None:
                    nursery.start_soon(
                        _install_in_foreground,
                        state,
                        Path(handle.apiserver.kubeconfig_path),
                        wait_seconds,
                    )
                async for signum in signals:
                    click.echo(f"received {signal.Signals(signum).name}: stopping", err=True)
                    nursery.cancel_scope.cancel()
                    break

    try:
        trio.run(run)
    except (ImageTableError, OSError, BaseExceptionGroup) as exc:
        # trio reports a failed start inside exception groups: find the cause
        cause = _startup_cause(exc)
        if isinstance(cause, ImageTableError):
            raise click.ClickException(str(cause)) from exc
        if isinstance(cause, OSError):
            hint = (
                " (choose another --port, or 0 for any)" if cause.errno == errno.EADDRINUSE else ""
            )
            raise click.ClickException(
                f"cannot start localkube: {describe_failure(cause)}{hint}"
            ) from exc
        raise
    finally:
        rec = _read_pid(state)
        if rec is not None and rec.get("pid") == me:
            pid_file.unlink(missing_ok=True)
    click.echo("localkube stopped", err=True)


def _child_error(output: str) -> str:
    """The last click error a ``krt dev up`` child printed (``Error: ...`` to its end), or ''."""
    start = 0 if output.startswith("Error: ") else output.rfind("\nError: ") + 1
    if start == 0 and not output.startswith("Error: "):
        return ""
    message = output[start + len("Error: ") :].rstrip("\n")
    return message.removesuffix("localkube stopped").rstrip("\n")


def _startup_cause(exc: BaseException) -> BaseException | None:
    """The first OSError or image-table error in ``exc`` (groups searched depth first)."""
    from krt.exception_groups import first_leaf
    from localkube.images import ImageTableError

    return first_leaf(exc, (ImageTableError, OSError))


def _progress(line: str) -> None:
    click.echo(line)
    sys.stdout.flush()


async def _install(state: Path, kubeconfig: Path, wait_seconds: float) -> None:
    """Install kruntimes with the admin kubeconfig and wait for it.

    Raises:
        click.ClickException: the install failed or was not ready within ``wait_seconds``
            (the message names what and where its logs are).
    """
    import trio

    from krt.cli.dev_install import InstallError, ReadinessTracker, install
    from krt.kube.client import connect
    from krt.kube.errors import KubeError
    from localkube.node.layout import pods_dir

    tracker = ReadinessTracker(pods_dir=pods_dir(state))
    _progress(f"installing kruntimes (waiting up to {wait_seconds:g} s for it to be ready)")
    try:
        kube = await connect(kubeconfig=kubeconfig)
        async with kube:
            with trio.fail_after(wait_seconds):
                installed = await install(
                    kube, state_dir=state, tracker=tracker, progress=_progress
                )
    except trio.TooSlowError:
        raise click.ClickException(
            f"kruntimes was not ready after {wait_seconds:g} s:\n{tracker.summary()}\n"
            f"cluster log: {state / LOG_FILE}"
        ) from None
    except InstallError as exc:
        raise click.ClickException(str(exc)) from exc
    except KubeError as exc:
        raise click.ClickException(f"cannot install kruntimes: {exc}") from exc
    env = state / ENV_FILE
    env.write_text(
        f"export KUBECONFIG={kubeconfig}\nexport KRT_GATEWAY_URL={installed.gateway_url}\n"
    )
    runtimes = ", ".join(f"{name} {count} ready" for name, count in installed.runtimes.items())
    click.echo(
        f"Ready: kruntimes is installed (control plane, gateway {installed.gateway_url}, "
        f"Runtimes in namespace default: {runtimes})"
    )
    click.echo(f"export KUBECONFIG={kubeconfig}")
    click.echo(f"export KRT_GATEWAY_URL={installed.gateway_url}")
    click.echo(f"(both are in {env}: source it)")
    sys.stdout.flush()


def _install_or_fail(state: Path, kubeconfig: Path, wait_seconds: float) -> None:
    import trio

    try:
        trio.run(_install, state, kubeconfig, wait_seconds)
    except click.ClickException as exc:
        raise click.ClickException(
            f"{exc.message}\nthe cluster keeps running for inspection; stop it with: "
            f"krt dev down --state-dir {state}"
        ) from exc


async def _install_in_foreground(state: Path, kubeconfig: Path, wait_seconds: float) -> None:
    try:
        await _install(state, kubeconfig, wait_seconds)
    except click.ClickException as exc:
        click.echo(f"Error: {exc.message}", err=True)
        click.echo("the cluster keeps running for inspection; Ctrl-C stops it", err=True)


async def _wire_runtime_namespaces(state: Path, kubeconfig: Path) -> None:
    """Give Runtimes outside ``default`` their runtimed TLS wiring (:mod:`.dev_namespaces`)."""
    from krt.cli.dev_namespaces import serve_runtime_namespaces
    from krt.kube.client import connect
    from krt.kube.errors import KubeError

    try:
        kube = await connect(kubeconfig=kubeconfig)
        async with kube:
            await serve_runtime_namespaces(kube, state_dir=state, progress=_progress)
    except (KubeError, OSError) as exc:  # an add-on: the cluster keeps serving without it
        click.echo(f"warning: Runtimes outside default get no peer TLS: {exc}", err=True)


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
    # the child only serves the cluster; this process installs kruntimes as a client
    argv += ["--port", str(port), "--no-install"]
    if images is not None:
        argv += ["--images", str(images.resolve())]
    if verbose:
        argv.append("--verbose")
    with open(state / LOG_FILE, "ab") as log:
        log_start = log.seek(0, os.SEEK_END)  # the log is shared with earlier runs
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
            with open(state / LOG_FILE, "rb") as log_file:
                log_file.seek(log_start)
                output = log_file.read().decode(errors="replace")
            message = _child_error(output)
            if message:  # the child's own error says it all
                raise click.ClickException(message)
            raise click.ClickException(
                f"localkube exited with code {child.returncode} while starting; "
                f"log ({state / LOG_FILE}):\n{output[-2000:]}"
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
    if (state / ENV_FILE).exists():
        click.echo(f"kruntimes was installed: source {state / ENV_FILE} (KRT_GATEWAY_URL too)")
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
    except OSError as exc:
        return [f"(cannot read {kubeconfig}: {describe_failure(exc)})"]
    except (KeyError, IndexError, TypeError, ValueError, yaml.YAMLError):
        return [
            f"(cannot read {kubeconfig}: not a kubeconfig with a user token and "
            "certificate-authority-data)"
        ]
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
        except httpx.HTTPError as exc:
            return [f"(cannot list Pods: {describe_failure(exc)})"]
        except ValueError:
            return [f"(cannot list Pods: the answer (HTTP {r.status_code}) is not JSON)"]
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
    (state / ENV_FILE).unlink(missing_ok=True)
    if left:
        raise click.ClickException(f"process groups still alive after SIGKILL: {left}")
    if pid is None:
        click.echo(f"localkube was not running (state: {state})")
    else:
        click.echo(f"localkube stopped (pid {pid})")
    if killed:
        click.echo(f"killed {len(killed)} leftover Pod process group(s)")
