"""``krt run``: create a task Run, optionally wait for it (spinner) and follow its logs.

Seed 001 task mode: ``--file`` uploads a script as ``spec.source.inline`` (``inlinePath`` =
its base name, which runtimed runs when no ``--entrypoint`` is given); what follows ``--``
becomes ``spec.mode.task.args`` (the Runtime Server runs ``python <args>``, or for Bash a
single argument as a command line). Without NAME the API server generates one (``run-xxxxx``).
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from krt.api.limits import MAX_ARG_CHARS, MAX_ARGS, MAX_TTL_SECONDS
from krt.api.phases import Phase, WaitTarget, phase_of
from krt.cli.connection import KubeTarget, kube_options, open_kube
from krt.cli.exitcodes import ExitCode, epilog
from krt.cli.failures import run_async
from krt.cli.logs import LogLine, follow_run_logs
from krt.cli.lookup import create_run, now
from krt.cli.manifests import CommonSpec, task_run
from krt.cli.params import Duration, EnvVar, check_env, check_run_name, output_option, read_source
from krt.cli.printing import OutputFormat, render_objects
from krt.cli.runs_cmd import AttemptHeaders, emit_line
from krt.cli.waiting import Progress, target_reached, time_limit, wait_with_progress

if TYPE_CHECKING:
    from krt.kube.client import Kube  # kr8s is imported only when a command connects

Obj = dict[str, Any]
COMMAND_KEY = "krt_command_args"
F = TypeVar("F", bound=Callable[..., Any])


class SplitAtDashDash(click.Command):
    """A command whose arguments after the first ``--`` are kept apart from NAME.

    click merges positionals before and after ``--``; ``krt run NAME -- cmd args`` needs
    to know which is which, so the tail is stored in ``ctx.meta[COMMAND_KEY]``.
    """

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """Split ``args`` at ``--`` before click parses the head."""
        if "--" in args:
            index = args.index("--")
            ctx.meta[COMMAND_KEY] = tuple(args[index + 1 :])
            args = args[:index]
        else:
            ctx.meta[COMMAND_KEY] = ()
        return super().parse_args(ctx, args)


def common_options(func: F) -> F:
    """``--env``, ``--timeout``, ``--retries``, ``--backoff``, ``--ttl`` (task and function)."""
    for option in reversed(
        [
            click.option(
                "-e",
                "--env",
                "env",
                multiple=True,
                type=EnvVar(),
                help="Environment variable NAME=VALUE (repeatable).",
            ),
            click.option(
                "--timeout",
                type=Duration(),
                default=None,
                help="spec.timeout, e.g. 5m (task: execution limit; function: lifetime).",
            ),
            click.option(
                "--retries",
                type=click.IntRange(0, 99),
                default=None,
                help="Extra attempts after a failed one (retryPolicy.maxAttempts = N + 1).",
            ),
            click.option(
                "--backoff",
                type=Duration(positive=False),
                default=None,
                help="Wait before the first retry, doubling after (retryPolicy.backoff), e.g. 1s "
                "(0s: retry at once).",
            ),
            click.option(
                "--ttl",
                type=Duration(positive=False, max_seconds=MAX_TTL_SECONDS),
                default=None,
                help="Delete the Run this long after it finished (ttlSecondsAfterFinished), e.g. "
                "1h (0s: at once).",
            ),
        ]
    ):
        func = option(func)
    return func


@click.command(
    "run",
    cls=SplitAtDashDash,
    epilog="""\b
Examples:
  krt run --runtime python --file job.py --wait          # run a script, wait, print outputs
  krt run hello --runtime bash --wait -- 'echo hello $USER'
  krt run --runtime python --wait -- -c 'print(6 * 7)'
  krt run --runtime python --file etl.py --env MODE=full --timeout 10m --retries 2 \\
          --backoff 5s --ttl 1h --follow -- --date 2026-01-01
  krt run --runtime python --file job.py -o name          # just create it; print its name
\b
A task writes outputs as KEY=VALUE lines to the file named by $KRUNTIME_OUTPUTS;
--wait prints them on stdout when the Run Succeeded.
"""
    + "\n"
    + epilog(),
)
@click.argument("name", required=False)
@click.option("--runtime", "-r", required=True, help="The Runtime to run on (e.g. python, bash).")
@click.option(
    "-f",
    "--file",
    "file",
    type=click.Path(dir_okay=False, exists=True, readable=True, path_type=Path),
    help="Script to upload as inline source (run unless --entrypoint says otherwise).",
)
@click.option("--entrypoint", help="spec.mode.task.entrypoint: the file to run (relative path).")
@common_options
@click.option(
    "--wait", "-w", is_flag=True, help="Wait for the Run to finish (exit 0 only on Succeeded)."
)
@click.option(
    "--follow", is_flag=True, help="Stream the Run's output while it runs (implies --wait)."
)
@click.option(
    "--wait-timeout", type=Duration(), default=None, help="Bound on --wait/--follow (exit 7)."
)
@output_option("table", "json", "yaml", "name")
@kube_options
@click.pass_context
def run_cmd(
    ctx: click.Context,
    target: KubeTarget,
    name: str | None,
    runtime: str,
    file: Path | None,
    entrypoint: str | None,
    env: tuple[tuple[str, str], ...],
    timeout: float | None,
    retries: int | None,
    backoff: float | None,
    ttl: float | None,
    wait: bool,
    follow: bool,
    wait_timeout: float | None,
    output: str,
) -> None:
    """Create a task Run (a script or command run once on a warm Runtime Pod).

    Give the code with --file, or a command after --, or both (then the arguments after --
    are passed to the script).
    """
    args: tuple[str, ...] = ctx.meta.get(COMMAND_KEY, ())
    check_run_name(name)
    if file is None and not args:
        raise click.UsageError("nothing to run: give --file SCRIPT or a command after --")
    if len(args) > MAX_ARGS:
        raise click.UsageError(f"{len(args)} arguments after -- exceed the limit of {MAX_ARGS}")
    for arg in args:
        if len(arg) > MAX_ARG_CHARS:
            raise click.UsageError(
                f"an argument after -- has {len(arg)} characters, over the limit of {MAX_ARG_CHARS}"
            )
    check_builtin_runtime_args(runtime, args, has_script=file is not None or bool(entrypoint))
    if entrypoint is not None and (entrypoint.startswith("/") or ".." in Path(entrypoint).parts):
        raise click.BadParameter(
            "must be a relative path without '..'", param_hint="'--entrypoint'"
        )
    source = read_source(file) if file is not None else None
    common = CommonSpec(
        runtime=runtime,
        env=check_env(env),
        timeout_seconds=timeout,
        ttl_seconds=ttl,
        retries=retries,
        backoff_seconds=backoff,
    )

    created: list[tuple[str, str]] = []  # (name, namespace) once the Run exists

    def still_running() -> str | None:
        return keeps_running_note(target, created, stop="cancel", output="logs")

    async def main() -> ExitCode:
        async with open_kube(target) as kube:
            manifest = task_run(
                name=name,
                namespace=kube.namespace,
                common=common,
                source=source,
                source_path=file.name if file is not None else None,
                entrypoint=entrypoint,
                args=args,
            )
            created_run = await create_run(
                kube, manifest, what=f"creating the Run in namespace {kube.namespace}"
            )
            run_name = created_run["metadata"]["name"]
            created.append((run_name, kube.namespace))
            if not (wait or follow):
                _print_created(created_run, output)
                return ExitCode.OK
            if output == "table":
                click.echo(f"run.kruntimes.io/{run_name} created", err=True)
            progress = Progress(run_name)
            with time_limit(wait_timeout, f"Run {run_name} did not finish", progress=progress):
                final = await await_final(kube, created_run, follow=follow, progress=progress)
        return report_final(final, output)

    sys.exit(int(run_async(main, on_interrupt=still_running)))


#: What a user types first when they think the args are a whole command line.
_PYTHON_COMMANDS = frozenset({"python", "python3"})


def keeps_running_note(
    target: KubeTarget, created: list[tuple[str, str]], *, stop: str, output: str
) -> str | None:
    """On Ctrl-C after a Run was created: that it keeps running, and the commands for it.

    Args:
        target: the command's connection options (repeated in the advice).
        created: ``[(name, namespace)]`` once the Run exists, else empty.
        stop: the krt command that stops it (``cancel`` or ``delete``).
        output: the krt command that shows it (``logs`` or ``describe``).
    """
    if not created:
        return None
    name, namespace = created[0]
    flags = target.flags(namespace)
    return (
        f"run.kruntimes.io/{name} keeps running "
        f"(krt {stop} {name} {flags} stops it, krt {output} {name} {flags} shows it)"
    )


def check_builtin_runtime_args(runtime: str, args: tuple[str, ...], *, has_script: bool) -> None:
    """Reject args the built-in python and bash Runtimes would fail on, before creating a Run.

    Seed 001 task mode, built-in Runtime Servers (seed 002, adapter rules): without a script
    (``--file``/``--entrypoint``), the Python server runs ``python <args>`` and the Bash server
    runs ``bash -c <the one argument>``. So ``-- python -c ...`` makes Python look for a
    script file named ``python`` ("can't open file .../python"), and a Bash command split over
    several arguments fails to start (StartFailed). Both are caught here, with the command
    that works. With a script the args are its arguments, where anything may be meant.

    Args:
        runtime: ``--runtime``.
        args: what followed ``--``.
        has_script: whether ``--file`` or ``--entrypoint`` was given.

    Raises:
        click.UsageError: for ``python``, a first argument ``python``/``python3`` (a path to
            one included); for ``bash``, more than one argument.
    """
    if has_script or not args:
        return
    if runtime == "python" and Path(args[0]).name in _PYTHON_COMMANDS:
        rest = shlex.join(args[1:]) or "-c '...'"
        raise click.UsageError(
            f"the python Runtime already runs python: give only its arguments after --, "
            f"e.g. krt run --runtime python -- {rest}"
        )
    if runtime == "bash" and len(args) > 1:
        if len(args) == 3 and Path(args[0]).name == "bash" and args[1] == "-c":
            line = args[2]  # `-- bash -c 'cmd'`: the Runtime already runs bash -c
        else:
            line = shlex.join(args)
        raise click.UsageError(
            f"the bash Runtime runs one command line (bash -c), but got {len(args)} arguments "
            f"after --: quote it as one, e.g. krt run --runtime bash -- {shlex.quote(line)}"
        )


def _print_created(created: Obj, output: str) -> None:
    if output == "table":
        click.echo(f"run.kruntimes.io/{created['metadata']['name']} created")
    else:
        click.echo(
            render_objects([created], OutputFormat(output), plural="runs", now=now(), single=True)
        )


async def await_final(
    kube: Kube, created: Obj, *, follow: bool, progress: Progress | None = None
) -> Obj:
    """Wait until the created Run is terminal, streaming its output when ``follow``.

    Args:
        kube: a connected client.
        created: the Run as created.
        follow: stream its log lines instead of showing progress.
        progress: the progress display to use (default: a new one for the Run).
    """
    name = created["metadata"]["name"]
    if follow:
        shown = AttemptHeaders(emit_line)  # "--- attempt N ---" on stderr for a retry

        def emit(line: LogLine) -> None:
            if line.stream != "runtimed":
                shown(line)

        return await follow_run_logs(kube, created, emit)
    return await wait_with_progress(
        kube,
        kube.namespace,
        name,
        lambda o: target_reached(o, WaitTarget.COMPLETION),
        progress if progress is not None else Progress(name),
    )


def report_final(final: Obj, output: str) -> ExitCode:
    """Print the finished Run (phase line on stderr, outputs on stdout); its exit code.

    Returns:
        0 for Succeeded, 1 for Failed, Timeout or Cancelled.
    """
    status = final.get("status") or {}
    phase = phase_of(status.get("phase"))
    name = final["metadata"]["name"]
    if output in ("json", "yaml", "name"):
        click.echo(
            render_objects([final], OutputFormat(output), plural="runs", now=now(), single=True)
        )
    else:
        line = f"run.kruntimes.io/{name} {phase.value}"
        details = [f"attempt {status['attempt']}"] if status.get("attempt") else []
        details += [
            str(status[k])
            for k in ("reason", "message")
            if status.get(k) and phase is not Phase.SUCCEEDED
        ]
        if details:
            line += f" ({'; '.join(details)})"
        click.echo(line, err=True)
        for key, value in sorted((status.get("outputs") or {}).items()):
            click.echo(f"{key}={value}")
    return ExitCode.OK if phase is Phase.SUCCEEDED else ExitCode.RUN_UNSUCCESSFUL
