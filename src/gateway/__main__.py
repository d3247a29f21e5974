"""``krt-gateway``: the Runtime gateway's command line (a thin click layer over serve_gateway).

Every option can also come from the environment as ``KRT_GATEWAY_<OPTION>`` (for example
``KRT_GATEWAY_TLS_CERT_FILE``); ``$KRT_HOSTS_FILE`` (set by localkube) selects the hosts-file
resolver when ``--hosts-file`` is not given.
"""

from __future__ import annotations

import logging
import os
import signal
from functools import partial

import click
import trio

from gateway.pool import DEFAULT_CONNECT_TIMEOUT_SECONDS
from gateway.server import (
    DEFAULT_GRACE_SECONDS,
    DEFAULT_MAX_TIMEOUT_SECONDS,
    DEFAULT_RETRY_AFTER_SECONDS,
    DEFAULT_TIMEOUT_SECONDS,
    GRACEFUL_SECONDS,
    ConfigError,
    GatewayConfig,
    serve_gateway,
)
from gateway.targets import (
    DnsResolver,
    HostsFileResolver,
    Resolver,
    StaticResolver,
    parse_target_override,
)
from gateway.tls_reload import TLSFilesError, upstream_tls
from krt import logs
from krt.api.naming import RUNTIMED_GRPC_PORT
from krt.gc_tuning import freeze_startup_heap

log = logging.getLogger("gateway.main")


def build_resolver(hosts_file: str | None, targets: tuple[str, ...], port: int) -> Resolver:
    """The resolver the options describe: overrides, then hosts file or DNS.

    Raises:
        click.BadParameter: a ``--target`` value is malformed.
    """
    base: Resolver = (
        HostsFileResolver(hosts_file, port=port) if hosts_file else DnsResolver(port=port)
    )
    if not targets:
        return base
    overrides = {}
    for text in targets:
        try:
            name, target = parse_target_override(text)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--target") from None
        overrides[name] = target
    return StaticResolver(overrides, base)


async def run(config: GatewayConfig) -> None:
    """Serve until SIGTERM or SIGINT, then stop gracefully (requests in flight get 5 s)."""
    shutdown = trio.Event()
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            await nursery.start(partial(serve_gateway, config, shutdown=shutdown))
            async for signum in signals:
                log.info("stopping", extra={"signal": signal.Signals(signum).name})
                shutdown.set()
                # hypercorn bounds the drain; this bounds everything else
                nursery.cancel_scope.deadline = trio.current_time() + GRACEFUL_SECONDS + 2
                break


@click.command(context_settings={"auto_envvar_prefix": "KRT_GATEWAY", "show_default": True})
@click.option(
    "--tls-cert-file",
    type=click.Path(dir_okay=False),
    help="PEM certificate chain (required: HTTPS only).",
)
@click.option("--tls-key-file", type=click.Path(dir_okay=False), help="PEM private key (required).")
@click.option("--bind", default="0.0.0.0:8443", help="HTTPS listen address host:port.")
@click.option(
    "--metrics-addr",
    default="0.0.0.0:8081",
    help="Plain-HTTP host:port for /metrics and /healthz; empty disables.",
)
@click.option(
    "--default-timeout",
    type=click.FloatRange(min=0.001),
    default=DEFAULT_TIMEOUT_SECONDS,
    help="Invocation timeout without X-Kruntime-Timeout (seconds).",
)
@click.option(
    "--max-timeout",
    type=click.FloatRange(min=0.001),
    default=DEFAULT_MAX_TIMEOUT_SECONDS,
    help="Largest X-Kruntime-Timeout honoured (seconds).",
)
@click.option(
    "--deadline-grace",
    type=click.FloatRange(min=0),
    default=DEFAULT_GRACE_SECONDS,
    help="Added to the timeout for the gRPC deadline (seconds).",
)
@click.option(
    "--retry-after",
    type=click.IntRange(1, 300),
    default=DEFAULT_RETRY_AFTER_SECONDS,
    help="Retry-After of a 503 (seconds).",
)
@click.option(
    "--connect-timeout",
    type=click.FloatRange(min=0.001),
    default=DEFAULT_CONNECT_TIMEOUT_SECONDS,
    help="One connection attempt to a Runtime Service (seconds).",
)
@click.option(
    "--runtimed-port",
    type=click.IntRange(1, 65535),
    default=RUNTIMED_GRPC_PORT,
    help="runtimed's gRPC port on the Runtime Service.",
)
@click.option(
    "--hosts-file",
    envvar=["KRT_GATEWAY_HOSTS_FILE", "KRT_HOSTS_FILE"],
    default=None,
    help="hosts(5) file mapping <service>.<namespace>.svc to addresses (localkube).",
)
@click.option(
    "--target",
    "targets",
    multiple=True,
    help="Override: <service>.<namespace>.svc=HOST:PORT (repeatable).",
)
@click.option(
    "--upstream-ca-file",
    default=None,
    help="CA bundle to verify runtimed's TLS (enables TLS to runtimed).",
)
@click.option(
    "--upstream-cert-file", default=None, help="Client certificate for mutual TLS to runtimed."
)
@click.option("--upstream-key-file", default=None, help="Client key for mutual TLS to runtimed.")
@click.option(
    "--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info"
)
def main(
    tls_cert_file: str | None,
    tls_key_file: str | None,
    bind: str,
    metrics_addr: str,
    default_timeout: float,
    max_timeout: float,
    deadline_grace: float,
    retry_after: int,
    connect_timeout: float,
    runtimed_port: int,
    hosts_file: str | None,
    targets: tuple[str, ...],
    upstream_ca_file: str | None,
    upstream_cert_file: str | None,
    upstream_key_file: str | None,
    log_level: str,
) -> None:
    """The kruntimes Runtime gateway: HTTPS invoke front door for function Runs."""
    if not tls_cert_file or not tls_key_file:
        raise click.UsageError(
            "--tls-cert-file and --tls-key-file are required: the gateway serves HTTPS only, "
            "because every request carries a Kubernetes bearer token (plaintext is refused)"
        )
    logs.configure(
        level=log_level,
        # krt.grpc: the connection pool's gRPC client. hypercorn's error log at WARNING and
        # above; its access log is off (the gateway logs each invocation itself, without the
        # Authorization header).
        loggers=("gateway", "krt.grpc"),
        floors={"hypercorn.error": logging.WARNING},
        line_format=logs.EPOCH_LINES,
    )
    try:
        config = GatewayConfig(
            tls_cert_file=tls_cert_file,
            tls_key_file=tls_key_file,
            bind=bind,
            metrics_bind=metrics_addr or None,
            resolver=build_resolver(hosts_file, targets, runtimed_port),
            default_timeout_seconds=default_timeout,
            max_timeout_seconds=max_timeout,
            deadline_grace_seconds=deadline_grace,
            retry_after_seconds=retry_after,
            connect_timeout_seconds=connect_timeout,
            upstream=upstream_tls(upstream_ca_file, upstream_cert_file, upstream_key_file),
        )
    except (ConfigError, TLSFilesError) as exc:
        raise click.UsageError(str(exc)) from None
    log.info("starting", extra={"bind": bind, "metrics": metrics_addr, "pid": os.getpid()})
    freeze_startup_heap()
    trio.run(run, config)


if __name__ == "__main__":  # pragma: no cover
    main()
