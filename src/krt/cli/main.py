"""The ``krt`` command: a thin click group; each subcommand lives in its own module.

STYLE.md: "A CLI is a thin click group (auto_envvar_prefix="KRT"), validation via
click.UsageError, then a single trio.run". Connection options (``--kubeconfig``,
``--context``, ``-n``) are on every command that needs them, with ``KRT_KUBECONFIG``,
``KRT_CONTEXT`` and ``KRT_NAMESPACE`` (and ``$KUBECONFIG``) like kubectl.
"""

from __future__ import annotations

import click

from krt.cli.connection import global_kube_options
from krt.cli.dev import dev
from krt.cli.exitcodes import epilog
from krt.cli.function_cmd import function_group
from krt.cli.invoke_cmd import invoke_cmd
from krt.cli.run_cmd import run_cmd
from krt.cli.runs_cmd import (
    cancel_cmd,
    delete_cmd,
    describe_cmd,
    get_cmd,
    list_cmd,
    logs_cmd,
    wait_cmd,
)
from krt.cli.runtime_cmd import runtime_group
from krt.cli.version_cmd import version_cmd

HELP_EPILOG = (
    """\b
Quick tour:
  krt dev up --detach && source ~/.krt/dev/env   # sets KUBECONFIG, KRT_GATEWAY_URL
  krt runtime list
  krt run --runtime python --follow -- -c 'print(6 * 7)'    # prints 42
  krt function create hello --runtime python --handler main.invoke --file main.py
  krt invoke hello -d '{"name": "kruntimes"}'
  krt get; krt describe hello; krt delete hello
\b
Every command takes --kubeconfig, --context and -n/--namespace, before or after its name
(krt -n team-a get), with env KRT_KUBECONFIG, KRT_CONTEXT, KRT_NAMESPACE; $KUBECONFIG is
honoured as by kubectl.
"""
    + "\n"
    + epilog()
)


@click.group(
    context_settings={"auto_envvar_prefix": "KRT", "help_option_names": ["-h", "--help"]},
    epilog=HELP_EPILOG,
)
@click.version_option(package_name="kruntimes", prog_name="krt")
@global_kube_options
def krt() -> None:
    """kruntimes command line: task and function Runs on warm Runtime Pods."""


krt.add_command(run_cmd)
krt.add_command(function_group)
krt.add_command(invoke_cmd)
krt.add_command(get_cmd)
krt.add_command(list_cmd)
krt.add_command(describe_cmd)
krt.add_command(logs_cmd)
krt.add_command(cancel_cmd)
krt.add_command(delete_cmd)
krt.add_command(wait_cmd)
krt.add_command(runtime_group)
krt.add_command(version_cmd)
krt.add_command(dev)


def main() -> None:
    """Console-script entry point (``krt``)."""
    krt()


if __name__ == "__main__":  # pragma: no cover
    main()
