"""The command line shared by the built-in Runtime Servers (``krt-python-runtime``, ...).

A thin click command: parse and check ``--listen`` and ``--work-dir`` (``click.UsageError``
on bad values), configure JSON logs, then one ``trio.run`` of :func:`serve` that stops
gracefully on SIGTERM or SIGINT.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import signal
from collections.abc import Callable
from pathlib import Path

import click
import trio

from krt import logs
from krt.gc_tuning import freeze_startup_heap
from servers.common.adapter import FunctionAdapter
from servers.common.app import serve

log = logging.getLogger("servers.cli")


#: The Runtime Server's loggers (``krt.grpc``: the gRPC connection handler).
LOGGERS = ("servers", "krt.grpc")
#: purerpc reports every client disconnect and server shutdown as a warning, which is noise
#: here: ERROR and above only.
LOG_FLOORS = {"purerpc": logging.ERROR}


def parse_listen(value: str) -> tuple[str, int]:
    """Split ``HOST:PORT`` (IPv6 as ``[::1]:PORT``; empty host means every interface).

    Raises:
        click.UsageError: naming what is wrong with ``value``.
    """
    host, sep, port_text = value.rpartition(":")
    if not sep:
        raise click.UsageError(f"--listen {value!r} must be HOST:PORT, e.g. 127.0.0.1:9090")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise click.UsageError(f"--listen {value!r}: {host!r} is not an IPv6 address") from None
    elif ":" in host:
        raise click.UsageError(f"--listen {value!r}: write IPv6 hosts in brackets, e.g. [::1]:9090")
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise click.UsageError(f"--listen {value!r}: port must be a number from 0 to 65535")
    return host, int(port_text)


async def _serve_until_signal(
    adapter: FunctionAdapter, host: str, port: int, work_dir: Path
) -> None:
    async with trio.open_nursery() as nursery:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            await nursery.start(
                functools.partial(serve, adapter, host=host, port=port, work_dir=work_dir)
            )
            async for signum in signals:
                log.info("stopping", extra={"signal": signal.Signals(signum).name})
                nursery.cancel_scope.cancel()
                break


def build_command(adapter_factory: Callable[[], FunctionAdapter], *, prog: str) -> click.Command:
    """Return the click command of a Runtime Server (see :func:`run_cli`)."""

    @click.command(
        name=prog,
        context_settings={"help_option_names": ["-h", "--help"], "auto_envvar_prefix": "KRT"},
        epilog=(
            "\b\nExample:\n"
            f"  {prog} --listen 127.0.0.1:9090 --work-dir /workspace/runs\n"
            "\b\nServes executor.v1.Runtime and executor.v1.FunctionRuntime (gRPC, plaintext)"
            " on one port; logs are JSON lines on stderr."
        ),
    )
    @click.option(
        "--listen",
        required=True,
        metavar="HOST:PORT",
        help=(
            "Address to serve gRPC on; port 0 picks a free port (the 'listening' log line"
            " on stderr names the bound port)."
        ),
    )
    @click.option(
        "--work-dir",
        required=True,
        type=click.Path(path_type=Path),
        help="Directory for task and function working dirs (created if missing).",
    )
    @click.option(
        "--log-level",
        default="info",
        show_default=True,
        type=click.Choice(["debug", "info", "warning", "error"]),
    )
    def command(listen: str, work_dir: Path, log_level: str) -> None:
        """A kruntimes Runtime Server (runs tasks and serves function invocations)."""
        host, port = parse_listen(listen)
        if work_dir.exists() and not work_dir.is_dir():
            raise click.UsageError(f"--work-dir {str(work_dir)!r} exists and is not a directory")
        try:
            work_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise click.UsageError(f"--work-dir {str(work_dir)!r}: {exc.strerror}") from None
        logs.configure(
            level=log_level, loggers=LOGGERS, floors=LOG_FLOORS, line_format=logs.EPOCH_LINES
        )
        adapter = adapter_factory()
        try:
            freeze_startup_heap()
            trio.run(_serve_until_signal, adapter, host, port, work_dir.resolve())
        except* OSError as group:
            first = group.exceptions[0]
            reason = first.strerror if isinstance(first, OSError) and first.strerror else str(first)
            raise click.ClickException(f"cannot listen on {listen}: {reason}") from None

    return command


def run_cli(adapter_factory: Callable[[], FunctionAdapter], *, prog: str) -> None:
    """Run the Runtime Server command line for one language adapter.

    ``--listen HOST:PORT`` and ``--work-dir DIR`` are required; ``--help`` shows an example.

    Args:
        adapter_factory: builds the adapter once the arguments are valid.
        prog: the program name shown in ``--help`` and errors (e.g. ``krt-python-runtime``).

    Exits through click (status 2 on usage errors, 1 when the address cannot be bound);
    otherwise returns when stopped by SIGTERM/SIGINT.
    """
    build_command(adapter_factory, prog=prog)(prog_name=prog)
