"""``runtimed``: the command line of the sidecar (a thin click command, then one ``trio.run``).

Every identity and configuration value has a flag and an environment variable; the Runtime
controller's Deployment sets the variables (``POD_NAME``, ``POD_NAMESPACE``, ``POD_UID``,
``POD_IP`` through the downward API, ``RUNTIME_NAME``, ``RUNTIME_SERVER_ADDRESS``,
``WORKSPACE_DIR``, ``RUNTIMED_PORT`` for the invoke proxy's gRPC Service port, and
``RUNTIMED_PEER_TLS_DIR`` for the peer mTLS Secret, ``RUNTIMED_GATEWAY_URL`` and
``RUNTIMED_GATEWAY_CA_FILE`` for the published endpoint). ``--path-root`` (``KRT_POD_ROOT``)
prefixes absolute container paths (the workspace, the mounted material), for nodes that run
containers as plain processes.

The CA file and the peer TLS directory come from ``optional: true`` volumes, so they may be
empty at start (ConfigMap or Secret not created yet). runtimed then starts anyway, with a
warning naming what is off and how to turn it on (restart the Pod once the object exists):
no ``caBundle`` in new endpoints, or a plaintext Service port without peer hops. Material
that is present but broken (a Secret missing one of its keys, a CA file without a
certificate) stops runtimed with a usage error instead.
"""

from __future__ import annotations

import logging
import signal
import sys
from pathlib import Path

import click
import trio

from krt import logs
from krt.exception_groups import first_leaf
from krt.gc_tuning import freeze_startup_heap
from runtimed.daemon import DaemonConfig, serve_daemon
from runtimed.dataplane.app import DataplaneSettings
from runtimed.dataplane.peer import (
    PeerTLSAppeared,
    PeerTLSError,
    load_peer_tls,
    peer_tls_present,
)
from runtimed.functions.settings import (
    DEFAULT_GATEWAY_URL,
    FunctionSettings,
    load_optional_ca_bundle,
)
from runtimed.identity import PodIdentity
from runtimed.runtime_client import parse_address
from runtimed.sources import Workspace

#: Libraries kept at WARNING and above (hpack logs raw headers, tokens included, at DEBUG).
QUIET_LIBRARIES = ("httpx", "httpcore", "hpack", "purerpc", "hypercorn")

log = logging.getLogger("runtimed")


def _under_root(path: Path, root: Path | None) -> Path:
    if root is None or not path.is_absolute():
        return path
    return root / path.relative_to(path.anchor)


async def _run_until_signal(config: DaemonConfig) -> None:
    async with trio.open_nursery() as nursery:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            await nursery.start(serve_daemon, config)
            async for signum in signals:
                log.info("stopping", extra={"signal": signal.Signals(signum).name})
                nursery.cancel_scope.cancel()
                break


@click.command(
    name="runtimed",
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog="Logs are JSON lines on stderr; task stdout/stderr are logged keyed by run_uid and attempt.",
)
@click.option("--pod-name", envvar="POD_NAME", required=True, help="This Pod's name.")
@click.option(
    "--pod-namespace", envvar="POD_NAMESPACE", required=True, help="This Pod's namespace."
)
@click.option("--pod-uid", envvar="POD_UID", required=True, help="This Pod's UID.")
@click.option("--pod-ip", envvar="POD_IP", default="", show_default=True, help="This Pod's IP.")
@click.option("--runtime-name", envvar="RUNTIME_NAME", default="", help="The Runtime's name.")
@click.option(
    "--runtime-server",
    envvar="RUNTIME_SERVER_ADDRESS",
    required=True,
    metavar="HOST:PORT",
    help="The local Runtime Server's gRPC address.",
)
@click.option(
    "--workspace-dir",
    envvar="WORKSPACE_DIR",
    default="/workspace",
    show_default=True,
    type=click.Path(path_type=Path),
    help="The workspace shared with the Runtime Server.",
)
@click.option(
    "--server-workspace-dir",
    envvar="RUNTIME_SERVER_WORKSPACE_DIR",
    default=None,
    type=click.Path(path_type=Path),
    help="The workspace as the Runtime Server sees it (default: the path runtimed uses).",
)
@click.option(
    "--path-root",
    envvar="KRT_POD_ROOT",
    default=None,
    type=click.Path(path_type=Path),
    help="Prefix of absolute container paths (nodes running containers as processes).",
)
@click.option(
    "--http-host",
    envvar="RUNTIMED_HTTP_HOST",
    default=None,
    help="Address of /healthz and /metrics (default: the Pod IP, else 0.0.0.0).",
)
@click.option(
    "--http-port",
    envvar="RUNTIMED_HTTP_PORT",
    default=8081,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="Port of /healthz and /metrics.",
)
@click.option(
    "--runtimed-port",
    envvar="RUNTIMED_PORT",
    default=9090,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="gRPC Service port of the FunctionRuntime invoke proxy (on the Pod IP).",
)
@click.option(
    "--peer-tls-dir",
    envvar="RUNTIMED_PEER_TLS_DIR",
    default=None,
    type=click.Path(path_type=Path),
    help="Directory with tls.crt, tls.key, ca.crt for peer mTLS (unset or empty: plaintext, "
    "no hops).",
)
@click.option(
    "--gateway-url",
    envvar="RUNTIMED_GATEWAY_URL",
    default=None,
    help="Base URL of the shared gateway published in function Runs' status.endpoint "
    "(default: the in-cluster runtime-gateway Service of kruntimes-system).",
)
@click.option(
    "--gateway-ca-file",
    envvar="RUNTIMED_GATEWAY_CA_FILE",
    default=None,
    type=click.Path(path_type=Path),
    help="PEM CA bundle published as status.endpoint.caBundle (unset or missing: omitted).",
)
@click.option(
    "--kubeconfig", envvar="RUNTIMED_KUBECONFIG", default=None, type=click.Path(path_type=Path)
)
@click.option(
    "--serviceaccount-dir",
    envvar="KRT_SERVICEACCOUNT_DIR",
    default="/var/run/secrets/kubernetes.io/serviceaccount",
    show_default=True,
    type=click.Path(path_type=Path),
    help="In-cluster credentials directory.",
)
@click.option(
    "--git", "git", envvar="RUNTIMED_GIT", default="git", show_default=True, help="git executable."
)
@click.option(
    "--rleg-period",
    envvar="RUNTIMED_RLEG_PERIOD",
    default=0.2,
    show_default=True,
    type=click.FloatRange(min=0.01),
    help="Longest seconds between Runtime Server List polls while executions run.",
)
@click.option(
    "--log-level",
    envvar="RUNTIMED_LOG_LEVEL",
    default="info",
    show_default=True,
    type=click.Choice(["debug", "info", "warning", "error"]),
)
def main(
    pod_name: str,
    pod_namespace: str,
    pod_uid: str,
    pod_ip: str,
    runtime_name: str,
    runtime_server: str,
    workspace_dir: Path,
    server_workspace_dir: Path | None,
    path_root: Path | None,
    http_host: str | None,
    http_port: int,
    runtimed_port: int,
    peer_tls_dir: Path | None,
    gateway_url: str | None,
    gateway_ca_file: Path | None,
    kubeconfig: Path | None,
    serviceaccount_dir: Path,
    git: str,
    rleg_period: float,
    log_level: str,
) -> None:
    """Run the runtimed sidecar of a Runtime Pod (task lifecycle, heartbeat, readiness)."""
    from runtimed.tasks import TaskTimings

    try:
        pod = PodIdentity(
            name=pod_name, namespace=pod_namespace, uid=pod_uid, ip=pod_ip, runtime=runtime_name
        )
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    try:
        host, port = parse_address(runtime_server)
    except ValueError as exc:
        raise click.UsageError(f"--runtime-server: {exc}") from None
    workspace_root = _under_root(workspace_dir, path_root).resolve()
    try:
        workspace_root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise click.UsageError(f"--workspace-dir {str(workspace_root)!r}: {exc.strerror}") from None
    warnings: list[str] = []
    awaited_peer_tls_dir: Path | None = None
    if peer_tls_dir is not None:
        peer_tls_dir = _under_root(peer_tls_dir, path_root)
        try:
            if peer_tls_present(peer_tls_dir):
                load_peer_tls(peer_tls_dir)
            else:
                warnings.append(
                    f"--peer-tls-dir {str(peer_tls_dir)!r} holds no tls.crt, tls.key, ca.crt "
                    "(the peer TLS Secret does not exist yet?): the Service port is plaintext "
                    "and peer hops are off until the files appear; runtimed then stops so "
                    "that its container restarts serving TLS"
                )
                awaited_peer_tls_dir, peer_tls_dir = peer_tls_dir, None
        except PeerTLSError as exc:
            raise click.UsageError(str(exc)) from None
    ca_bundle: bytes | None = None
    if gateway_ca_file is not None:
        ca_path = _under_root(gateway_ca_file, path_root)
        try:
            ca_bundle = load_optional_ca_bundle(ca_path)
        except (ValueError, OSError) as exc:
            raise click.UsageError(f"--gateway-ca-file: {exc}") from None
        if ca_bundle is None:
            warnings.append(
                f"--gateway-ca-file {str(ca_path)!r} does not exist (the gateway CA ConfigMap "
                "does not exist yet, or has no ca.crt?): function endpoints are published "
                "without caBundle; restart this Pod once the ConfigMap exists"
            )
    try:
        functions = FunctionSettings(
            gateway_url=gateway_url or DEFAULT_GATEWAY_URL, ca_bundle=ca_bundle
        )
    except ValueError as exc:
        raise click.UsageError(f"--gateway-url: {exc}") from None
    # Everything (root logger); hpack logs raw headers (tokens) at DEBUG, so the chatty
    # libraries stay at WARNING and above.
    logs.configure(level=log_level, floors=dict.fromkeys(QUIET_LIBRARIES, logging.WARNING))
    for warning in warnings:
        log.warning(warning)
    config = DaemonConfig(
        pod=pod,
        server_host=host,
        server_port=port,
        workspace=Workspace(root=workspace_root, server_root=server_workspace_dir),
        http_host=http_host or pod_ip or "0.0.0.0",
        http_port=http_port,
        kubeconfig=kubeconfig,
        serviceaccount_dir=serviceaccount_dir,
        git=git,
        timings=TaskTimings(rleg_period=rleg_period),
        dataplane=DataplaneSettings(
            host=pod_ip or "",
            port=runtimed_port,
            peer_tls_dir=peer_tls_dir,
            awaited_peer_tls_dir=awaited_peer_tls_dir,
        ),
        functions=functions,
    )
    freeze_startup_heap()
    try:
        trio.run(_run_until_signal, config)
    except BaseException as exc:
        appeared = _appeared(exc)
        if appeared is None:
            raise
        log.warning("%s: stopping so that the container restarts serving TLS", appeared)
        sys.exit(0)


def _appeared(exc: BaseException) -> PeerTLSAppeared | None:
    """The :class:`PeerTLSAppeared` in ``exc`` (nurseries wrap it in exception groups)."""
    leaf = first_leaf(exc, PeerTLSAppeared)
    return leaf if isinstance(leaf, PeerTLSAppeared) else None
