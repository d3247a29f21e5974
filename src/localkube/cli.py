"""The ``localkube`` command: ``localkube apiserver --state-dir DIR`` runs the API server.

A thin click group; each command validates its options and makes a single ``trio.run``.
"""

from __future__ import annotations

import logging
import signal
from pathlib import Path

import click
import trio

from krt.gc_tuning import freeze_startup_heap
from localkube.apiserver import ApiServerConfig, ApiServerHandle, serve_apiserver
from localkube.storage import StoreError


@click.group(context_settings={"auto_envvar_prefix": "LOCALKUBE"})
@click.option("-v", "--verbose", is_flag=True, help="Log at debug level.")
def main(verbose: bool) -> None:
    """localkube: an embedded single-machine Kubernetes for tests and the quick start."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


async def _run_until_signal(config: ApiServerConfig) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            handle: ApiServerHandle = await nursery.start(serve_apiserver, config)
            freeze_startup_heap()  # the store is loaded and the schemas compiled
            click.echo(f"localkube API server listening on {handle.url}", err=True)
            click.echo(f"export KUBECONFIG={handle.kubeconfig_path}")
            async for signum in signals:
                click.echo(f"received {signal.Signals(signum).name}, stopping", err=True)
                nursery.cancel_scope.cancel()
                break


@main.command()
@click.option(
    "--state-dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Directory for the SQLite store, PKI and kubeconfig (created if missing).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Listen address.")
@click.option(
    "--port",
    default=6443,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="Listen port (0: any free port).",
)
def apiserver(state_dir: Path, host: str, port: int) -> None:
    """Run the API server until SIGINT or SIGTERM; writes STATE_DIR/kubeconfig."""
    config = ApiServerConfig(state_dir=state_dir.resolve(), host=host, port=port)
    try:
        trio.run(_run_until_signal, config)
    except (StoreError, OSError, BaseExceptionGroup) as exc:
        leaf = _start_up_error(exc)
        if isinstance(leaf, StoreError):
            raise click.ClickException(str(leaf)) from exc
        if isinstance(leaf, OSError):
            raise click.ClickException(f"cannot serve on {host}:{port}: {leaf}") from exc
        raise


def _start_up_error(exc: BaseException) -> BaseException | None:
    """Return the single StoreError/OSError inside ``exc`` (nurseries wrap them), or None."""
    while isinstance(exc, BaseExceptionGroup):
        if len(exc.exceptions) != 1:
            return None
        exc = exc.exceptions[0]
    return exc if isinstance(exc, (StoreError, OSError)) else None


if __name__ == "__main__":  # pragma: no cover
    main()
