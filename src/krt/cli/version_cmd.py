"""``krt version``: the client's version, and the API server's when it answers."""

from __future__ import annotations

import json
from importlib import metadata
from typing import Any

import click
import yaml

from krt.cli.connection import KubeTarget, kube_options, open_kube
from krt.cli.failures import run_async
from krt.kube.errors import KubeError

DISTRIBUTION = "kruntimes"


def client_version() -> str:
    """The installed kruntimes version (``unknown`` when not installed as a package)."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown"


@click.command(
    "version",
    epilog="""\b
Examples:
  krt version
  krt version --client
  krt version -o json
""",
)
@click.option(
    "--client", "client_only", is_flag=True, help="Only the client version (no API call)."
)
@click.option("-o", "--output", type=click.Choice(("text", "json", "yaml")), default="text")
@kube_options
def version_cmd(target: KubeTarget, client_only: bool, output: str) -> None:
    """Print the krt version and the Kubernetes API server's version (if reachable)."""
    info: dict[str, Any] = {"clientVersion": {"kruntimes": client_version()}}
    if not client_only:

        async def main() -> dict[str, Any] | str:
            try:
                async with open_kube(target) as kube:
                    answer: dict[str, Any] = await kube.api.version()
                    return answer
            except KubeError as exc:
                return str(exc)

        server = run_async(main)
        if isinstance(server, dict):
            info["serverVersion"] = server
        else:
            info["serverError"] = server
    if output == "json":
        click.echo(json.dumps(info, indent=2))
    elif output == "yaml":
        click.echo(yaml.safe_dump(info, sort_keys=False).rstrip())
    else:
        click.echo(f"Client Version: kruntimes {info['clientVersion']['kruntimes']}")
        if "serverVersion" in info:
            click.echo(f"Server Version: {info['serverVersion'].get('gitVersion', '?')}")
        elif "serverError" in info:
            click.echo(f"Server Version: unavailable ({info['serverError']})")
