"""``krt get|list|describe|logs|cancel|delete|wait``: the everyday verbs on Runs."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click
import trio

from krt.api.phases import Phase, WaitTarget, is_terminal, phase_of
from krt.cli.connection import KubeTarget, kube_options, open_kube
from krt.cli.deletion_waiting import DeletionProgress, wait_until_gone
from krt.cli.describing import describe_run
from krt.cli.exitcodes import ExitCode, epilog
from krt.cli.failures import CommandFailed, exit_if_failed, report, run_async
from krt.cli.group_waiting import GroupProgress, wait_until_terminal
from krt.cli.logs import (
    LogLine,
    SeenLines,
    follow_run_logs,
    is_function,
    log_containers,
    run_log_lines,
)
from krt.cli.lookup import get_object, get_objects, list_objects, missing, not_installed, now
from krt.cli.params import Duration, output_option
from krt.cli.printing import OutputFormat, render_objects
from krt.cli.run_refs import run_name
from krt.cli.waiting import Progress, time_limit, wait_with_progress
from krt.kube.errors import ApiError, BadRequest, NotFound
from krt.kube.resources import EVENTS, RUNS

if TYPE_CHECKING:
    from krt.kube.client import Kube  # kr8s is imported only when a command connects

Obj = dict[str, Any]

TABLE_FORMATS = ("table", "wide", "json", "yaml", "name")


def _names(names: tuple[str, ...]) -> tuple[str, ...]:
    """The bare Run names, each once, in the order given (``krt delete a a`` deletes once)."""
    return tuple(dict.fromkeys(run_name(name) for name in names))


def print_runs(objs: list[Obj], output: str, *, single: bool) -> None:
    """Echo Runs in the ``-o`` format."""
    click.echo(render_objects(objs, OutputFormat(output), plural="runs", now=now(), single=single))


@click.command(
    "get",
    epilog="""\b
Examples:
  krt get                      # all Runs in the namespace (same as krt list)
  krt get my-run -o yaml       # one Run as YAML
  krt get -A -o wide           # every namespace, with mode, reason and endpoint
  krt get -l team=data -o name
  krt get a b                  # the rows of a and b; a missing one is an error line (exit 3)

For -o jsonpath=..., -o custom-columns=..., --no-headers or -w (watch), use kubectl on
the same objects: kubectl get runs [NAME] -o jsonpath='{.status.phase}'
""",
)
@click.argument("names", nargs=-1)
@output_option(*TABLE_FORMATS)
@click.option("-A", "--all-namespaces", is_flag=True, help="List Runs in every namespace.")
@click.option("-l", "--selector", default="", help="Label selector, e.g. app=etl.")
@kube_options
def get_cmd(
    target: KubeTarget, names: tuple[str, ...], output: str, all_namespaces: bool, selector: str
) -> None:
    """Show Runs: NAME PHASE RUNTIME POD ATTEMPT AGE (all of them without NAMES).

    As kubectl get pod a b: the Runs found are shown, each missing NAME is reported on
    stderr, and the exit code is 3 if any was missing.
    """
    show_runs(target, _names(names), output, all_namespaces, selector)


def show_runs(
    target: KubeTarget, names: tuple[str, ...], output: str, all_namespaces: bool, selector: str
) -> None:
    """``krt get`` / ``krt list``.

    With names, as ``kubectl get pod a b``: the Runs that exist are printed, each missing
    one is reported on stderr (``error: Run "b" not found ...``), and the exit code is 3
    if any was missing.
    """
    if names and (all_namespaces or selector):
        raise click.UsageError("give Run names or --all-namespaces/--selector, not both")

    async def main() -> list[CommandFailed]:
        failures: list[CommandFailed] = []
        async with open_kube(target) as kube:
            if names:
                objs, failures = await get_objects(kube, RUNS, names, kube.namespace)
            else:
                objs = await list_objects(
                    kube, RUNS, None if all_namespaces else kube.namespace, selector
                )
                if not objs:
                    where = "any namespace" if all_namespaces else f"namespace {kube.namespace}"
                    click.echo(f"No Runs found in {where}.", err=True)
                    return []
        if all_namespaces and output in ("table", "wide"):
            click.echo(_with_namespace(objs, output))
        elif objs:
            print_runs(objs, output, single=len(names) == 1)
        return failures

    failures = run_async(main)
    for failure in failures:
        report(failure)
    exit_if_failed(failures)


def _with_namespace(objs: list[Obj], output: str) -> str:
    """A table with a leading NAMESPACE column (``-A``)."""
    text = render_objects(objs, OutputFormat(output), plural="runs", now=now(), single=False)
    lines = text.splitlines()
    width = max([len("NAMESPACE")] + [len(o["metadata"].get("namespace", "")) for o in objs])
    out = ["NAMESPACE".ljust(width) + "   " + lines[0]]
    for obj, line in zip(objs, lines[1:], strict=True):
        out.append(obj["metadata"].get("namespace", "").ljust(width) + "   " + line)
    return "\n".join(out)


@click.command(
    "list",
    epilog="""\b
Examples:
  krt list
  krt list -n team-a -o wide
""",
)
@output_option(*TABLE_FORMATS)
@click.option("-A", "--all-namespaces", is_flag=True, help="List Runs in every namespace.")
@click.option("-l", "--selector", default="", help="Label selector, e.g. app=etl.")
@kube_options
def list_cmd(target: KubeTarget, output: str, all_namespaces: bool, selector: str) -> None:
    """List Runs (the same as krt get without names)."""
    show_runs(target, (), output, all_namespaces, selector)


@click.command(
    "describe",
    epilog="""\b
Examples:
  krt describe my-run
  krt describe my-function -n team-a
  krt describe a b             # both; a missing name is reported, the others still shown
""",
)
@click.argument("names", nargs=-1, required=True)
@kube_options
def describe_cmd(target: KubeTarget, names: tuple[str, ...]) -> None:
    """Show Runs in detail: spec, status, conditions and their Events.

    As kubectl describe pod a b: every Run that exists is described (a blank line
    between two), each missing one is reported on stderr, and the exit code is 3 if any
    was missing.
    """
    names = _names(names)

    async def main() -> list[CommandFailed]:
        async with open_kube(target) as kube:
            runs, failures = await get_objects(kube, RUNS, names, kube.namespace)
            for index, run in enumerate(runs):
                uid = run["metadata"].get("uid", "")
                try:
                    events, _ = await kube.list(
                        EVENTS, kube.namespace, field_selector=f"involvedObject.uid={uid}"
                    )
                except ApiError:
                    events = []  # e.g. no RBAC for events: show the Run anyway
                if index:
                    click.echo()
                click.echo(describe_run(run, events, now()))
        return failures

    failures = run_async(main)
    for failure in failures:
        report(failure)
    exit_if_failed(failures)


def emit_line(line: LogLine) -> None:
    """Print one log line: task stderr to stderr, everything else to stdout."""
    click.echo(line.text, err=line.stream == "stderr")


class AttemptHeaders:
    """Prints ``--- attempt N ---`` on stderr before the first line shown of attempt N.

    Attempt 1 needs none: a line of another attempt than the previous line's (or than 1,
    for the first line) gets one, so a retried task's attempts are told apart while stdout
    stays the task's output alone. Lines of no known attempt (0) get none.

    Args:
        emit: prints one line.
    """

    def __init__(self, emit: Callable[[LogLine], None]) -> None:
        self._emit = emit
        self._attempt = 1

    def __call__(self, line: LogLine) -> None:
        """Print ``line``, after the attempt's header if it starts another attempt."""
        if line.attempt and line.attempt != self._attempt:
            self._attempt = line.attempt
            click.echo(f"--- attempt {line.attempt} ---", err=True)
        self._emit(line)


@click.command(
    "logs",
    epilog="""\b
Examples:
  krt logs my-run              # the task's stdout and stderr
  krt logs my-function         # what the function's handler printed, every invocation
  krt logs -f my-run           # follow until the Run finishes
  krt logs my-run --runtimed   # also runtimed's (and the Runtime Server's) records

A retried task's lines of attempt 2 and later follow a "--- attempt N ---" line on
stderr.
""",
)
@click.argument("name")
@click.option("-f", "--follow", is_flag=True, help="Stream until the Run finishes.")
@click.option(
    "--runtimed",
    is_flag=True,
    help="Include runtimed's own records about the Run (for a function, also the Runtime "
    "Server's: registration, failed invocations).",
)
@kube_options
def logs_cmd(target: KubeTarget, name: str, follow: bool, runtimed: bool) -> None:
    """Print a Run's output: a task's stdout/stderr, or what a function's handler printed.

    Read from the logs of the Run's Pod, filtered by the Run's UID.
    """
    name = run_name(name)
    shown = AttemptHeaders(emit_line)

    def emit(line: LogLine) -> None:
        if runtimed or line.stream != "runtimed":
            shown(line)

    async def main() -> None:
        async with open_kube(target) as kube:
            run = await get_object(kube, RUNS, name, kube.namespace)
            if follow:
                run = await follow_run_logs(kube, run, emit)
                note = _never_placed(run)
                if note:
                    click.echo(note, err=True)
                return
            await print_logs(kube, run, emit)

    run_async(main)


async def print_logs(kube: Kube, run: Obj, emit: Callable[[LogLine], None]) -> None:
    """Print the Run's lines from its assigned Pod's log (no follow).

    Each container's previous instance is read first, so a Run's lines survive one restart
    of runtimed (a crash, or ``krt dev down``/``up``), as far as the node keeps that log.
    What the current instance logged again (a restarted runtimed logs the attempt's kept
    output from its beginning) shows once (:class:`krt.cli.logs.SeenLines`). A Run that
    ended before it was placed on a Pod has no output: a note on stderr says so.

    Raises:
        CommandFailed: the Run has no Pod yet, or the Pod (and its log) is gone.
    """
    meta, status = run["metadata"], run.get("status") or {}
    pod = status.get("assignedPod")
    note = _never_placed(run)
    if note:
        click.echo(note, err=True)
        return
    if not pod:
        raise CommandFailed(
            ExitCode.UNAVAILABLE,
            f"Run {meta['name']} has no Pod yet (phase {status.get('phase') or 'Pending'}); "
            "use -f to wait for its output",
        )
    try:
        lines: list[LogLine] = []
        seen = SeenLines()
        for container in await log_containers(kube, run, pod):
            for previous in (True, False):  # the previous instance first
                try:
                    async for line in run_log_lines(
                        kube,
                        meta["namespace"],
                        pod,
                        meta["uid"],
                        follow=False,
                        container=container,
                        previous=previous,
                        seen=seen,
                    ):
                        lines.append(line)
                except (BadRequest, NotFound):
                    if not previous:
                        raise
                    # the container never restarted (or its old log is gone)
        # One container's lines are in order already (previous instance first); several
        # (a function) merge by time.
        for line in sorted(lines, key=lambda item: item.time) if len(lines) > 1 else lines:
            emit(line)
    except NotFound as exc:
        raise CommandFailed(
            ExitCode.NOT_FOUND, f"Pod {pod} that ran {meta['name']} is gone, and its log with it"
        ) from exc


def _never_placed(run: Obj) -> str:
    """The note for a Run that ended before it was placed on a Pod ("" for any other Run)."""
    status = run.get("status") or {}
    phase = phase_of(status.get("phase"))
    if status.get("assignedPod") or not is_terminal(phase):
        return ""
    name = run["metadata"]["name"]
    attempt = status.get("attempt")
    if isinstance(attempt, int) and attempt > 1:  # requeued for a retry, then ended
        return (
            f"Run {name} ended {phase.value} before attempt {attempt} was placed on a Pod; "
            f"earlier attempts' output is in the log of the Pod they ran on "
            f"(krt describe {name} names it)"
        )
    return f"Run {name} ended {phase.value} before it was placed on a Pod: it has no output"


@click.command(
    "cancel",
    epilog="""\b
Examples:
  krt cancel my-run
  krt cancel my-run --wait              # until it is Cancelled (or finished anyway)
  krt cancel a b c                      # those that exist; exit 3 if one was missing
  krt cancel a b --wait --timeout 1m    # both at once, a line as each one ends
""",
)
@click.argument("names", nargs=-1, required=True)
@click.option(
    "--wait", is_flag=True, help="Wait until every Run is terminal (all of them together)."
)
@click.option(
    "--timeout", type=Duration(), default=None, help="Bound on the whole --wait, e.g. 1m."
)
@kube_options
def cancel_cmd(
    target: KubeTarget, names: tuple[str, ...], wait: bool, timeout: float | None
) -> None:
    """Request cancellation (spec.cancelRequested: true); each Run ends Cancelled.

    As kubectl delete pod a b: every Run that exists gets the request (one line each, in
    the order given; a finished one is left alone), each missing one is reported on stderr,
    and the exit code is 3 if any was missing (7 if --wait timed out). --wait follows the
    Runs together and prints each one's final phase as it ends.
    """
    names = _names(names)
    requested: list[str] = []
    where: list[str] = []  # the namespace, once connected

    def requests_stand() -> str | None:
        # Ctrl-C during --wait: the requests are made and stay; say so and how to look
        if not requested:
            return None
        flags = target.flags(where[0])
        return (
            f"cancellation stays requested for {', '.join(requested)} "
            f"(krt get {' '.join(requested)} {flags} shows "
            f"{'it' if len(requested) == 1 else 'them'})"
        )

    async def main() -> list[CommandFailed]:
        failures: list[CommandFailed] = []
        async with open_kube(target) as kube:
            where.append(kube.namespace)
            for name in names:
                try:
                    line, pending = await _request_cancel(kube, name)
                except NotFound as exc:
                    if exc.details.get("name") != name:
                        raise not_installed(RUNS) from exc
                    failures.append(missing(exc, RUNS, name, kube.namespace))
                    report(failures[-1])
                    continue
                click.echo(line)
                if pending:
                    requested.append(name)
            if wait and requested:
                progress = GroupProgress(requested)
                with trio.move_on_after(math.inf if timeout is None else timeout) as limit:
                    failures += await wait_until_terminal(
                        kube, kube.namespace, progress, _echo_final_phase
                    )
                if limit.cancelled_caught:
                    assert timeout is not None
                    raise CommandFailed(ExitCode.TIMED_OUT, progress.timeout_message(timeout))
        return failures

    exit_if_failed(run_async(main, on_interrupt=requests_stand))


async def _request_cancel(kube: Kube, name: str) -> tuple[str, bool]:
    """Set ``spec.cancelRequested`` on Run ``name`` unless it is finished (``krt cancel``).

    Returns:
        The line to print and whether the Run is still to end (False: already finished).

    Raises:
        NotFound: no such Run (or the Run resource is not served).
    """
    run = await kube.get(RUNS, name, kube.namespace)
    phase = phase_of((run.get("status") or {}).get("phase"))
    if is_terminal(phase):
        return f"run.kruntimes.io/{name} already finished ({phase.value})", False
    if not (run.get("spec") or {}).get("cancelRequested"):
        await kube.patch(RUNS, name, kube.namespace, {"spec": {"cancelRequested": True}})
    return f"run.kruntimes.io/{name} cancel requested", True


def _echo_final_phase(run: Obj) -> None:
    """``run.kruntimes.io/NAME Cancelled``: a Run waited for by ``krt cancel --wait`` ended."""
    phase = phase_of((run.get("status") or {}).get("phase"))
    click.echo(f"run.kruntimes.io/{run['metadata']['name']} {phase.value}")


@click.command(
    "delete",
    epilog="""\b
Examples:
  krt delete my-run
  krt delete my-function --wait    # until runtimed unregistered it and it is gone
  krt delete a b c                 # deletes those that exist; exit 3 if one was missing
""",
)
@click.argument("names", nargs=-1, required=True)
@click.option("--wait", is_flag=True, help="Wait until the Runs are gone (finalizers done).")
@click.option("--timeout", type=Duration(), default=None, help="Bound on --wait, e.g. 1m.")
@kube_options
def delete_cmd(
    target: KubeTarget, names: tuple[str, ...], wait: bool, timeout: float | None
) -> None:
    """Delete Runs (a function Run is unregistered from its Runtime Server first).

    As kubectl delete pod a b: every Run that exists is deleted, each missing one is
    reported on stderr as it is met, and the exit code is 3 if any was missing (7 if a
    --wait for the deleted ones timed out).
    """
    names = _names(names)

    async def main() -> list[CommandFailed]:
        failures: list[CommandFailed] = []
        deleted: list[str] = []
        async with open_kube(target) as kube:
            for name in names:
                try:
                    await kube.delete(RUNS, name, kube.namespace)
                except NotFound as exc:
                    if exc.details.get("name") != name:
                        raise not_installed(RUNS) from exc
                    failures.append(missing(exc, RUNS, name, kube.namespace))
                    report(failures[-1])
                    continue
                deleted.append(name)
                click.echo(f'run.kruntimes.io "{name}" deleted')
            if wait:
                for name in deleted:
                    gone = DeletionProgress(name)
                    with time_limit(timeout, f"Run {name} was not gone", progress=gone):
                        await wait_until_gone(kube, kube.namespace, name, gone)
        return failures

    exit_if_failed(run_async(main))


WAIT_FORS = ("finished", "ready", "delete") + tuple(f"phase={p.value}" for p in Phase)


@click.command(
    "wait",
    epilog="""\b
--for finished   until terminal; exit 0 if Succeeded, 1 if Failed/Timeout/Cancelled
--for ready      until a function is Ready (exit 0), or terminal (exit 1); a task
                 Run never becomes Ready: refused (exit 2)
--for phase=P    until phase P (exit 0), or terminal in another phase (exit 1)
--for delete     until the Run is gone (exit 0 at once if it does not exist)
\b
Examples:
  krt wait my-run                          # --for finished
  krt wait my-function --for ready --timeout 2m
  krt wait my-run --for phase=Running
"""
    + "\n"
    + epilog(),
)
@click.argument("name")
@click.option(
    "--for",
    "condition",
    type=click.Choice(WAIT_FORS),
    default="finished",
    show_default=True,
    help="What to wait for.",
)
@click.option(
    "--timeout",
    type=Duration(positive=False),
    default=None,
    help="Give up after this long (exit 7); 0 checks once, as kubectl wait --timeout=0.",
)
@click.option(
    "-o", "--output", type=click.Choice(("json", "yaml", "name")), help="Print the final Run."
)
@kube_options
def wait_cmd(
    target: KubeTarget, name: str, condition: str, timeout: float | None, output: str | None
) -> None:
    """Wait for a Run to finish, become Ready, reach a phase, or be deleted."""
    name = run_name(name)
    code = run_async(lambda: wait_run(target, name, condition, timeout, output))
    sys.exit(int(code))


async def wait_run(
    target: KubeTarget, name: str, condition: str, limit: float | None, output: str | None
) -> ExitCode:
    """The async part of ``krt wait``; returns the exit code.

    Args:
        target: where to connect.
        name: the Run.
        condition: a ``--for`` value.
        limit: the ``--timeout`` in seconds (applied to the wait itself), or None.
        output: ``-o`` format for the final Run, or None for one summary line.

    ``limit`` 0 checks once, as ``kubectl wait --timeout=0``: the condition holds now
    (as if waited for) or the command times out at once.

    Raises:
        CommandFailed: not found, deleted while waiting (unless ``--for delete``), timeout,
            ``--for ready``/``phase=Ready`` on a task Run (exit 2: it never becomes Ready).
    """
    async with open_kube(target) as kube:
        if condition == "delete":
            # kubectl wait --for=delete: a Run that does not exist is gone (exit 0, silent)
            try:
                await kube.get(RUNS, name, kube.namespace)
            except NotFound as exc:
                if exc.details.get("name") != name:
                    raise not_installed(RUNS) from exc
                return ExitCode.OK
            if limit == 0:
                raise CommandFailed(ExitCode.TIMED_OUT, f"Run {name} is not gone (--timeout 0)")
            gone = DeletionProgress(name)
            with time_limit(limit, f"Run {name} was not gone", progress=gone):
                await wait_until_gone(kube, kube.namespace, name, gone)
            click.echo(f'run.kruntimes.io "{name}" deleted')
            return ExitCode.OK
        wanted: Phase | None = None
        target_kind = WaitTarget.COMPLETION
        if condition == "ready":
            wanted, target_kind = Phase.READY, WaitTarget.READY
        elif condition.startswith("phase="):
            wanted = Phase(condition.removeprefix("phase="))

        def done(obj: Obj) -> bool:
            phase = phase_of((obj.get("status") or {}).get("phase"))
            if target_kind is WaitTarget.READY:
                # kubectl wait --for=condition=Ready: phase Ready with Ready=False
                # (Unavailable: its Runtime Server is down) is not ready yet
                return is_terminal(phase) or _invocable(obj)
            return phase == wanted or is_terminal(phase)

        current = await get_object(kube, RUNS, name, kube.namespace)
        if wanted is Phase.READY and not is_function(current):
            raise CommandFailed(
                ExitCode.USAGE,
                f"{name} is a task Run: it never becomes Ready; use --for finished",
            )
        hint = _function_wait_hint(current, condition)
        if hint:
            click.echo(hint, err=True)
        if limit == 0:  # check once
            if not done(current):
                phase = (current.get("status") or {}).get("phase") or "Pending"
                raise CommandFailed(
                    ExitCode.TIMED_OUT,
                    f"Run {name} has not reached {condition} (phase {phase}; --timeout 0)",
                )
            final = current
        else:
            progress = Progress(name)
            with time_limit(limit, f"Run {name} did not reach {condition}", progress=progress):
                final = await wait_with_progress(kube, kube.namespace, name, done, progress)
    phase = phase_of((final.get("status") or {}).get("phase"))
    if output:
        print_runs([final], output, single=True)
    else:
        click.echo(_final_line(final))
    if target_kind is WaitTarget.READY:
        return ExitCode.OK if _invocable(final) else ExitCode.RUN_UNSUCCESSFUL
    if wanted is not None:
        return ExitCode.OK if phase == wanted else ExitCode.RUN_UNSUCCESSFUL
    return ExitCode.OK if phase is Phase.SUCCEEDED else ExitCode.RUN_UNSUCCESSFUL


def _invocable(run: Obj) -> bool:
    """Phase Ready and its ``Ready`` condition True (seed 000: Ready=True means invocable)."""
    status = run.get("status") or {}
    if status.get("phase") != Phase.READY.value:
        return False
    return all(
        c.get("status") == "True"
        for c in status.get("conditions") or ()
        if isinstance(c, dict) and c.get("type") == "Ready"
    )


def _function_wait_hint(run: Obj, condition: str) -> str:
    """A note when waiting for a Ready function Run to finish: that may take its whole life."""
    function = ((run.get("spec") or {}).get("mode") or {}).get("function")
    phase = (run.get("status") or {}).get("phase")
    if condition != "finished" or not function or phase != "Ready":
        return ""
    name = run["metadata"]["name"]
    return (
        f"{name} is a Ready function Run: it finishes only when deleted, cancelled or idle "
        "for its idleTimeoutSeconds; --for ready returns at once, --timeout bounds the wait"
    )


def _final_line(run: Obj) -> str:
    status = run.get("status") or {}
    phase = status.get("phase") or "Pending"
    text = f"run.kruntimes.io/{run['metadata']['name']} {phase}"
    # (a reason that only repeats the phase, "Succeeded: Succeeded", says nothing)
    extra = [
        str(status[k])
        for k in ("reason", "message")
        if status.get(k) and not (k == "reason" and status[k] == phase)
    ]
    return f"{text}: {' - '.join(extra)}" if extra else text
