"""``krt runtime list|get``: the Runtime pools Runs can use."""

from __future__ import annotations

import click

from krt.cli.connection import KubeTarget, kube_options, open_kube
from krt.cli.failures import CommandFailed, exit_if_failed, report, run_async
from krt.cli.lookup import get_objects, list_objects, now
from krt.cli.params import check_run_name, output_option
from krt.cli.printing import OutputFormat, render_objects
from krt.kube.resources import RUNTIMES

FORMATS = ("table", "wide", "json", "yaml", "name")


@click.group("runtime")
def runtime_group() -> None:
    """Runtimes: pools of warm Runtime Pods (python, bash, ...)."""


@runtime_group.command(
    "list",
    epilog="""\b
Examples:
  krt runtime list
  krt runtime list -o wide     # with the container images
""",
)
@output_option(*FORMATS)
@kube_options
def list_cmd(target: KubeTarget, output: str) -> None:
    """List Runtimes: NAME READY CAPACITY AVAILABLE AGE."""

    async def main() -> None:
        async with open_kube(target) as kube:
            objs = await list_objects(kube, RUNTIMES, kube.namespace)
        if not objs:
            click.echo(
                f"No Runtimes found in namespace {kube.namespace} (install them: see docs/cli.md).",
                err=True,
            )
            return
        click.echo(
            render_objects(objs, OutputFormat(output), plural="runtimes", now=now(), single=False)
        )

    run_async(main)


@runtime_group.command(
    "get",
    epilog="""\b
Examples:
  krt runtime get python
  krt runtime get python -o yaml
  krt runtime get python bash  # both; a missing name is an error line (exit 3)
""",
)
@click.argument("names", nargs=-1, required=True)
@output_option(*FORMATS)
@kube_options
def get_cmd(target: KubeTarget, names: tuple[str, ...], output: str) -> None:
    """Show Runtimes by name.

    As kubectl get pod a b: the Runtimes found are shown, each missing NAME is reported on
    stderr, and the exit code is 3 if any was missing.
    """
    for name in names:
        check_run_name(name)
    unique = tuple(dict.fromkeys(names))

    async def main() -> list[CommandFailed]:
        async with open_kube(target) as kube:
            objs, failures = await get_objects(kube, RUNTIMES, unique, kube.namespace)
        if objs:
            click.echo(
                render_objects(
                    objs,
                    OutputFormat(output),
                    plural="runtimes",
                    now=now(),
                    single=len(unique) == 1,
                )
            )
        return failures

    failures = run_async(main)
    for failure in failures:
        report(failure)
    exit_if_failed(failures)
