"""``krt-controlplane``: the kruntimes control plane process (issue 5 item 6).

A thin click command: parse and validate options, then one ``trio.run``. SIGTERM and SIGINT
cancel the nursery tree, so the leader Lease is released on the way out.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
from pathlib import Path

import click
import trio

from krt import logs
from krt.controlplane.app import ControlPlaneConfig, default_identity, serve_controlplane
from krt.controlplane.runtime_resources import RuntimedWiring
from krt.controlplane.sidecar_settings import DEFAULT_RUNTIMED_RESOURCES, parse_resources_json
from krt.gc_tuning import freeze_startup_heap
from krt.kube.client import DEFAULT_SERVICEACCOUNT_DIR, connect

#: Libraries that log every request at INFO (httpx: one line per API call) or raw frames at
#: DEBUG (hpack); they log at WARNING or above unless --log-level is higher.
QUIET_LIBRARIES = ("httpx", "httpcore", "hpack")


def configure_logging(level: str) -> None:
    """Log JSON lines to stderr at ``level``, chatty libraries at WARNING or above.

    The same line format as runtimed and the gateway (:mod:`krt.logs`), so ``kubectl logs``
    of every kruntimes component reads alike and is not flooded by one line per API request.

    Args:
        level: a logging level name (``"info"``, ``"DEBUG"``, ...).

    Raises:
        ValueError: an unknown level name.
    """
    logs.configure(level=level, floors=dict.fromkeys(QUIET_LIBRARIES, logging.WARNING))


def parse_listen_address(value: str) -> tuple[str, int] | None:
    """Parse ``--metrics-addr``: ``host:port``, ``:port`` (all interfaces) or ``0``/empty (off).

    Raises:
        click.BadParameter: not of that form, or the port is outside 0..65535.
    """
    if value in ("", "0"):
        return None
    host, sep, port_text = value.rpartition(":")
    if not sep or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise click.BadParameter(
            f"{value!r} is not host:port, :port or 0 (off)", param_hint="--metrics-addr"
        )
    return host.strip("[]") or "0.0.0.0", int(port_text)


async def _main(kubeconfig: Path | None, context: str | None, config: ControlPlaneConfig) -> None:
    # localkube mounts the ServiceAccount under the Pod root and says where (docs/localkube.md)
    sa_dir = os.environ.get("KRT_SERVICEACCOUNT_DIR")
    kube = await connect(
        kubeconfig=kubeconfig,
        context=context,
        serviceaccount_dir=Path(sa_dir) if sa_dir else DEFAULT_SERVICEACCOUNT_DIR,
    )
    async with kube, trio.open_nursery() as nursery:
        if not config.lease_namespace:
            config = dataclasses.replace(config, lease_namespace=kube.namespace)

        async def stop_on_signal() -> None:
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for signum in signals:
                    logging.getLogger(__name__).info("signal %s: stopping", signum)
                    nursery.cancel_scope.cancel()
                    return

        nursery.start_soon(stop_on_signal)
        await nursery.start(serve_controlplane, kube, config)


@click.command(context_settings={"auto_envvar_prefix": "KRT_CONTROLPLANE"})
@click.option(
    "--kubeconfig",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster).",
)
@click.option("--context", default=None, help="kubeconfig context.")
@click.option(
    "--namespace",
    "namespaces",
    multiple=True,
    help="Namespace to watch (repeatable). Default: all namespaces.",
)
@click.option(
    "--leader-elect/--no-leader-elect",
    default=True,
    show_default=True,
    help="Act only while holding the leader Lease.",
)
@click.option(
    "--lease-namespace",
    default="",
    help="Namespace of the leader Lease (default: the client's namespace).",
)
@click.option("--lease-name", default="krt-controlplane", show_default=True)
@click.option("--identity", default=None, help="Leader-election identity (default: unique).")
@click.option(
    "--metrics-addr",
    default=":8080",
    show_default=True,
    help="Listen address of /metrics: host:port, :port, or 0 to disable.",
)
@click.option("--resync-seconds", type=click.FloatRange(min=1.0), default=30.0, show_default=True)
@click.option(
    "--gateway-url",
    default="",
    help="Base URL of the shared gateway that Runtime Pods' runtimed publish in "
    "status.endpoint.url (RUNTIMED_GATEWAY_URL). Empty: runtimed's default, "
    "https://runtime-gateway.kruntimes-system.svc.cluster.local.",
)
@click.option(
    "--gateway-ca-configmap",
    default="",
    help="ConfigMap (key ca.crt) in each Runtime's namespace with the gateway CA, published "
    "as status.endpoint.caBundle; mounted optional. Empty: no caBundle.",
)
@click.option(
    "--peer-tls-secret",
    default="",
    help="Secret (tls.crt, tls.key, ca.crt) in each Runtime's namespace for runtimed's "
    "mutual TLS (gateway and peer hops); mounted optional. Empty: plaintext, no peer hops.",
)
@click.option(
    "--runtimed-resources",
    default=json.dumps(DEFAULT_RUNTIMED_RESOURCES, separators=(",", ":")),
    show_default=True,
    help="Resources of the runtimed sidecar in every Runtime Pod, as JSON: "
    '{"requests": {...}, "limits": {...}} of Kubernetes quantities; {} for none.',
)
@click.option(
    "--log-level",
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
    default="INFO",
    show_default=True,
)
def main(
    kubeconfig: Path | None,
    context: str | None,
    namespaces: tuple[str, ...],
    leader_elect: bool,
    lease_namespace: str,
    lease_name: str,
    identity: str | None,
    metrics_addr: str,
    resync_seconds: float,
    gateway_url: str,
    gateway_ca_configmap: str,
    peer_tls_secret: str,
    runtimed_resources: str,
    log_level: str,
) -> None:
    """Run the kruntimes control plane: Runtime controller, scheduler, reaper and Run GC."""
    listen = parse_listen_address(metrics_addr)
    try:
        wiring = RuntimedWiring(
            gateway_url=gateway_url or None,
            gateway_ca_configmap=gateway_ca_configmap or None,
            peer_tls_secret=peer_tls_secret or None,
            resources=parse_resources_json(runtimed_resources),
        )
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    configure_logging(log_level)
    config = ControlPlaneConfig(
        namespaces=namespaces or None,
        leader_elect=leader_elect,
        lease_namespace=lease_namespace,
        lease_name=lease_name,
        identity=identity or default_identity(),
        metrics_host=listen[0] if listen else "127.0.0.1",
        metrics_port=listen[1] if listen else None,
        resync_seconds=resync_seconds,
        runtimed=wiring,
    )
    freeze_startup_heap()
    trio.run(_main, kubeconfig, context, config)


if __name__ == "__main__":  # pragma: no cover
    main()
