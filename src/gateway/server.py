"""``serve_gateway``: the gateway process as one trio nursery tree.

::

    serve_gateway
      open_channel_pool        gRPC connections to Runtime Services (outermost: closed last)
      hypercorn (plain HTTP)   /metrics and /healthz on --metrics-addr
      hypercorn (HTTPS)        the invoke app on --bind, TLS from --tls-cert-file/--tls-key-file
      watch_listener_tls       reloads that certificate when its files change (rotation)
      watch_upstream_tls       reloads the --upstream-* client material the same way

Plaintext is refused (seed 000, Authentication and Authorization: "Plaintext HTTP is not
supported because every client request carries a Kubernetes bearer token"):
:class:`GatewayConfig` cannot be built without a readable certificate and key.

ALPN offers ``http/1.1`` only. hypercorn 0.17.3 does serve HTTP/2 with the pinned h2 3.2, but
when the app answers before the request body has been consumed (every early 401/415/413), the
next DATA frame of that stream raises ``KeyError`` in hypercorn's HTTP/2 protocol, and the
exception escapes the connection handler and stops the whole server (found by the gateway
tests). Clients use HTTP/1.1 keep-alive until the pinned hypercorn can be upgraded.
"""

from __future__ import annotations

import logging
import os
import ssl
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Final, TypeVar

import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve as hypercorn_serve

from gateway.app import GatewayApp
from gateway.disconnects import install as install_disconnect_signals
from gateway.invoke import Invoker
from gateway.keep_alive import install as install_keep_alive_timers
from gateway.metrics import GatewayMetrics
from gateway.pool import DEFAULT_CONNECT_TIMEOUT_SECONDS, open_channel_pool
from gateway.response_writes import install as install_response_writes
from gateway.targets import DnsResolver, Resolver
from gateway.tls_reload import (
    RELOAD_PERIOD_SECONDS,
    ListenerTLSConfig,
    UpstreamTLS,
    watch_listener_tls,
    watch_upstream_tls,
)
from krt.api import limits
from krt.metrics_server import metrics_app

log = logging.getLogger("gateway.server")

#: Seed 002: an invocation without a timeout gets this bounded default (seconds).
DEFAULT_TIMEOUT_SECONDS: Final = limits.DEFAULT_INVOKE_TIMEOUT_SECONDS
DEFAULT_MAX_TIMEOUT_SECONDS: Final = 300.0
DEFAULT_GRACE_SECONDS: Final = 0.5
DEFAULT_RETRY_AFTER_SECONDS: Final = 1
#: After a graceful shutdown starts, requests in flight get this long (seconds).
GRACEFUL_SECONDS: Final = 5.0
#: HTTP/1.1 idle keep-alive (seconds).
DEFAULT_KEEP_ALIVE_SECONDS: Final = 75.0


class ConfigError(ValueError):
    """The gateway configuration is invalid; the message names the option and the rule."""


@dataclass(frozen=True)
class GatewayConfig:
    """Everything ``krt-gateway`` needs, validated on construction.

    Attributes:
        tls_cert_file: PEM certificate chain for the HTTPS listener (required).
        tls_key_file: PEM private key (required).
        bind: HTTPS listen address ``host:port`` (port 0 picks one).
        metrics_bind: plain-HTTP ``host:port`` for ``/metrics`` and ``/healthz``, or ``None``.
        resolver: how a Runtime's Service address is found.
        default_timeout_seconds: invocation timeout when the client sends none (seconds).
        max_timeout_seconds: upper bound of a client's ``X-Kruntime-Timeout`` (seconds).
        deadline_grace_seconds: added to the timeout for the gRPC deadline (seconds).
        retry_after_seconds: default ``Retry-After`` of a 503 (seconds).
        connect_timeout_seconds: one connection attempt to a Runtime Service (seconds).
        upstream: TLS client context for runtimed and its files (watched for rotation), or
            ``None`` for plaintext h2c.
        keep_alive_seconds: idle keep-alive of client connections (seconds).
        tls_reload_seconds: how often the certificate and key files are checked for a
            rotation (seconds; :mod:`gateway.tls_reload`).

    Raises:
        ConfigError: a TLS file is missing or unreadable, or a number is out of range.
    """

    tls_cert_file: str
    tls_key_file: str
    bind: str = "0.0.0.0:8443"
    metrics_bind: str | None = "0.0.0.0:8081"
    resolver: Resolver = field(default_factory=DnsResolver)
    default_timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS
    max_timeout_seconds: float = DEFAULT_MAX_TIMEOUT_SECONDS
    deadline_grace_seconds: float = DEFAULT_GRACE_SECONDS
    retry_after_seconds: int = DEFAULT_RETRY_AFTER_SECONDS
    connect_timeout_seconds: float = DEFAULT_CONNECT_TIMEOUT_SECONDS
    upstream: UpstreamTLS | None = None
    keep_alive_seconds: float = DEFAULT_KEEP_ALIVE_SECONDS
    tls_reload_seconds: float = RELOAD_PERIOD_SECONDS

    def __post_init__(self) -> None:
        for option, path in (
            ("--tls-cert-file", self.tls_cert_file),
            ("--tls-key-file", self.tls_key_file),
        ):
            if not path:
                raise ConfigError(
                    f"{option} is required: the gateway serves HTTPS only (plaintext would "
                    "expose callers' bearer tokens)"
                )
            if not os.access(path, os.R_OK):
                raise ConfigError(f"{option} {path!r} does not exist or is not readable")
        try:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(self.tls_cert_file, self.tls_key_file)
        except (ssl.SSLError, ValueError) as exc:
            raise ConfigError(
                f"--tls-cert-file/--tls-key-file do not form a usable certificate and key: {exc}"
            ) from None
        if not 0 < self.default_timeout_seconds <= self.max_timeout_seconds:
            raise ConfigError(
                "--default-timeout must be > 0 and at most --max-timeout "
                f"({self.default_timeout_seconds} > {self.max_timeout_seconds})"
            )
        for option, value in (
            ("--deadline-grace", self.deadline_grace_seconds),
            ("--connect-timeout", self.connect_timeout_seconds),
            ("--keep-alive", self.keep_alive_seconds),
            ("tls_reload_seconds", self.tls_reload_seconds),
        ):
            if value < 0 or (option != "--deadline-grace" and value == 0):
                raise ConfigError(f"{option} must be positive, got {value}")
        if not 1 <= self.retry_after_seconds <= 300:
            raise ConfigError(
                f"--retry-after must be 1..300 seconds, got {self.retry_after_seconds}"
            )


@dataclass(frozen=True, slots=True)
class GatewayAddresses:
    """Where a started gateway listens: ``https://host:port`` and ``http://host:port``."""

    https: str
    metrics: str | None


_Config = TypeVar("_Config", bound=HypercornConfig)


def _hypercorn_config(bind: str, *, keep_alive: float, config_type: type[_Config]) -> _Config:
    config = config_type()
    config.bind = [bind]
    config.accesslog = None
    config.keep_alive_timeout = keep_alive
    config.graceful_timeout = GRACEFUL_SECONDS
    config.include_server_header = False
    return config


async def _reload_tls(
    config: GatewayConfig, https: ListenerTLSConfig, shutdown: trio.Event | None
) -> None:
    """Reload the listener's and the upstream TLS files until ``shutdown`` (or cancellation).

    The watchers never return by themselves: they end when a graceful shutdown starts, so
    the listeners' drain is all that a shutdown waits for.
    """
    async with trio.open_nursery() as watchers:
        watchers.start_soon(
            partial(
                watch_listener_tls,
                https,
                config.tls_cert_file,
                config.tls_key_file,
                period=config.tls_reload_seconds,
            )
        )
        if config.upstream is not None and config.upstream.files:
            watchers.start_soon(
                partial(watch_upstream_tls, config.upstream, period=config.tls_reload_seconds)
            )
        if shutdown is not None:
            await shutdown.wait()
            watchers.cancel_scope.cancel()


async def serve_gateway(
    config: GatewayConfig,
    *,
    metrics: GatewayMetrics | None = None,
    shutdown: trio.Event | None = None,
    task_status: trio.TaskStatus[GatewayAddresses] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run the gateway until cancelled or, gracefully, until ``shutdown`` is set.

    Args:
        config: validated configuration.
        metrics: metrics to record into (a new registry when ``None``).
        shutdown: when set, the listeners stop accepting and requests in flight get up to
            :data:`GRACEFUL_SECONDS` to finish; then this returns.
        task_status: receives the bound :class:`GatewayAddresses` once both listeners accept.

    Raises:
        OSError: an address cannot be bound.
    """
    metrics = metrics or GatewayMetrics()
    if not install_response_writes():
        log.warning("hypercorn is not 0.17.x: each response head takes a write of its own")
    if not install_disconnect_signals():
        log.warning("hypercorn is not 0.17.x: each invoke watches for disconnects in a task")
    if not install_keep_alive_timers():
        log.warning("hypercorn is not 0.17.x: each request restarts a keep-alive timer task")
    async with open_channel_pool(
        config.resolver,
        ssl_context=config.upstream.context if config.upstream is not None else None,
        connect_timeout_seconds=config.connect_timeout_seconds,
        on_connect=lambda result: metrics.connects.labels(result=result).inc(),
    ) as pool:
        metrics.watch_connections(lambda: pool.open_connections)
        invoker = Invoker(
            pool,
            deadline_grace_seconds=config.deadline_grace_seconds,
            retry_after_seconds=config.retry_after_seconds,
        )
        app = GatewayApp(
            invoker,
            metrics,
            default_timeout_seconds=config.default_timeout_seconds,
            max_timeout_seconds=config.max_timeout_seconds,
        )
        https = _hypercorn_config(
            config.bind, keep_alive=config.keep_alive_seconds, config_type=ListenerTLSConfig
        )
        https.certfile = config.tls_cert_file
        https.keyfile = config.tls_key_file
        https.alpn_protocols = ["http/1.1"]  # not h2: see the module docstring
        trigger = shutdown.wait if shutdown is not None else None
        # our apps are raw ASGI callables typed with plain mappings; hypercorn's stubs want
        # its TypedDict scopes
        invoke_app: Any = app
        plain_app: Any = metrics_app(metrics.registry)
        async with trio.open_nursery() as nursery:
            metrics_url = None
            if config.metrics_bind is not None:
                plain = _hypercorn_config(
                    config.metrics_bind, keep_alive=5.0, config_type=HypercornConfig
                )
                binds = await nursery.start(
                    partial(hypercorn_serve, plain_app, plain, shutdown_trigger=trigger)
                )
                metrics_url = binds[0]
            binds = await nursery.start(
                partial(hypercorn_serve, invoke_app, https, shutdown_trigger=trigger)
            )
            nursery.start_soon(_reload_tls, config, https, shutdown)
            addresses = GatewayAddresses(https=binds[0], metrics=metrics_url)
            log.info("gateway serving", extra={"https": addresses.https, "metrics": metrics_url})
            task_status.started(addresses)
