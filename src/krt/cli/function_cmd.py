"""``krt function create``: register a handler as a function Run and wait until it is Ready.

Seed 001 function mode: ``spec.mode.function.handler`` (``module.function``) in the uploaded
``--file`` (``spec.source.inline`` written to ``inlinePath``), ``idleTimeoutSeconds`` from
``--idle-timeout``, ``spec.timeout`` from ``--timeout`` (the reservation's lifetime). The
command waits for phase Ready (seed 000: registered and accepting invokes) and prints
``status.endpoint.url``; if the Run ends instead, it prints why and exits 1.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath
from typing import Any

import click

from krt.api.phases import Phase, WaitTarget, phase_of
from krt.cli.connection import KubeTarget, kube_options, open_kube
from krt.cli.exitcodes import ExitCode, epilog
from krt.cli.failures import CommandFailed, run_async
from krt.cli.lookup import create_run, now
from krt.cli.manifests import CommonSpec, function_run
from krt.cli.params import (
    Duration,
    check_env,
    check_handler,
    check_run_name,
    output_option,
    read_source,
)
from krt.cli.printing import OutputFormat, render_objects
from krt.cli.run_cmd import common_options, keeps_running_note
from krt.cli.waiting import Progress, target_reached, time_limit, wait_with_progress

Obj = dict[str, Any]
#: Default bound on waiting for Ready (seconds).
DEFAULT_READY_TIMEOUT = 300.0


@click.group("function")
def function_group() -> None:
    """Function Runs: a fixed handler registered once, then invoked many times."""


@function_group.command(
    "create",
    epilog="""\b
Examples:
  krt function create summarize --runtime python --handler main.invoke --file main.py
  krt function create labeler --runtime python --handler krm.transform --file krm.py \\
          --idle-timeout 10m --timeout 1h --env LABEL=team-a
  krt function create greet --runtime bash --handler greet.handle --file greet.sh
\b
Then: krt invoke summarize -d '{"text": "..."}'
"""
    + "\n"
    + epilog(),
)
@click.argument("name")
@click.option("--runtime", "-r", required=True, help="The Runtime to register on (python, bash).")
@click.option(
    "--handler",
    required=True,
    help="module.function in --file, e.g. main.invoke for def invoke(request) in main.py.",
)
@click.option(
    "-f",
    "--file",
    "file",
    required=True,
    type=click.Path(dir_okay=False, exists=True, readable=True, path_type=Path),
    help="The handler's source file.",
)
@click.option(
    "--idle-timeout",
    type=Duration(),
    default=None,
    help=(
        "End the function after this long without invocations, e.g. 10m (idleTimeoutSeconds: "
        "rounded up to whole seconds, so 500ms and 1.5s become 1 and 2)."
    ),
)
@common_options
@click.option("--wait/--no-wait", default=True, show_default=True, help="Wait until Ready.")
@click.option(
    "--wait-timeout",
    type=Duration(),
    default=DEFAULT_READY_TIMEOUT,
    show_default="5m",
    help="Bound on waiting for Ready (exit 7).",
)
@output_option("url", "json", "yaml", "name", default="url")
@kube_options
def create_cmd(
    target: KubeTarget,
    name: str,
    runtime: str,
    handler: str,
    file: Path,
    idle_timeout: float | None,
    env: tuple[tuple[str, str], ...],
    timeout: float | None,
    retries: int | None,
    backoff: float | None,
    ttl: float | None,
    wait: bool,
    wait_timeout: float,
    output: str,
) -> None:
    """Create a function Run, wait until it is Ready, and print its endpoint URL."""
    check_run_name(name)
    source = read_source(file)
    check_handler(handler, file=file, source=source)
    check_builtin_runtime_file(runtime, file)
    common = CommonSpec(
        runtime=runtime,
        env=check_env(env),
        timeout_seconds=timeout,
        ttl_seconds=ttl,
        retries=retries,
        backoff_seconds=backoff,
    )

    created_function: list[tuple[str, str]] = []

    def still_there() -> str | None:
        return keeps_running_note(target, created_function, stop="delete", output="describe")

    async def main() -> None:
        async with open_kube(target) as kube:
            manifest = function_run(
                name=name,
                namespace=kube.namespace,
                common=common,
                source=source,
                source_path=file.name,
                handler=handler,
                idle_timeout_seconds=idle_timeout,
            )
            created = await create_run(kube, manifest, what=f"creating function {name}")
            created_function.append((created["metadata"]["name"], kube.namespace))
            if not wait:
                _print(created, output)
                return
            click.echo(f"run.kruntimes.io/{name} created; waiting for Ready", err=True)
            progress = Progress(name)
            with time_limit(
                wait_timeout, f"function {name} did not become Ready", progress=progress
            ):
                final = await wait_with_progress(
                    kube,
                    kube.namespace,
                    name,
                    lambda o: target_reached(o, WaitTarget.READY),
                    progress,
                )
        status = final.get("status") or {}
        phase = phase_of(status.get("phase"))
        if phase is not Phase.READY:
            why = "; ".join(str(status[k]) for k in ("reason", "message") if status.get(k))
            raise CommandFailed(
                ExitCode.RUN_UNSUCCESSFUL,
                f"function {name} ended {phase.value} instead of becoming Ready"
                + (f": {without_traceback(why)}" if why else "")
                + f" (see krt describe {name} and krt logs {name} --runtimed)",
            )
        click.echo(f"function {name} is Ready", err=True)
        _print(final, output)

    run_async(main, on_interrupt=still_there)


#: The file each built-in Runtime loads a handler ``m.f`` from (seed 002, adapter rules).
BUILTIN_HANDLER_SUFFIX = {"python": ".py", "bash": ".sh"}


def check_builtin_runtime_file(runtime: str, file: Path) -> None:
    """Reject a ``--file`` the built-in Runtime cannot load the handler from.

    Seed 002, built-in adapters: the Python Runtime imports module ``m`` (``m.py``), the Bash
    Runtime sources ``m.sh``; the file is uploaded under its own name, so ``--runtime bash
    --file wc.py`` registers and then fails on the Pod ("handler file wc.sh not found").

    Args:
        runtime: ``--runtime``; other (custom) Runtimes are not checked.
        file: ``--file``.

    Raises:
        click.BadParameter: a built-in Runtime and a file of another extension.
    """
    suffix = BUILTIN_HANDLER_SUFFIX.get(runtime)
    if suffix is None or file.suffix == suffix:
        return
    others = [name for name, ext in BUILTIN_HANDLER_SUFFIX.items() if ext == file.suffix]
    hint = f", or --runtime {others[0]} for a {file.suffix} file" if others else ""
    raise click.BadParameter(
        f"the {runtime} Runtime loads a handler from a {suffix} file, not {file.name} "
        f"(use a {PurePosixPath(file.name).stem}{suffix}{hint})",
        param_hint="'--file'",
    )


#: Where a Python traceback starts inside a status message (seed 002: a registration that
#: cannot import the handler reports the exception, then the innermost frames): after a
#: newline as the Runtime Server writes it, or a space once the message was flattened.
TRACEBACK_START = re.compile(r"\s+Traceback \(most recent call last")


def without_traceback(message: str) -> str:
    """``message`` cut before an embedded traceback, so the error stays one readable line.

    A failed registration's message reads ``cannot load handler m.f: ModuleNotFoundError:
    No module named 'x' Traceback (most recent call last, ...): File ...``: the exception
    comes first and is kept; the frames stay in the Run's status (``krt describe``).

    Args:
        message: ``status.reason`` and ``status.message`` joined.

    Returns:
        The message up to the traceback plus a note that frames were left out, or
        ``message`` unchanged when it has no traceback.
    """
    found = TRACEBACK_START.search(message)
    if found is None or found.start() == 0:
        return message
    return message[: found.start()] + " [traceback left out]"


def _print(run: Obj, output: str) -> None:
    if output == "url":
        url = ((run.get("status") or {}).get("endpoint") or {}).get("url")
        click.echo(url or f"run.kruntimes.io/{run['metadata']['name']} (no endpoint yet)")
        return
    click.echo(render_objects([run], OutputFormat(output), plural="runs", now=now(), single=True))
