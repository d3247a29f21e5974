"""Run names in the forms kubectl and ``krt get -o name`` print: ``run.kruntimes.io/NAME`` etc.

Every command taking an existing Run's name strips a Run type prefix and refuses another
kind's with one ``error:`` line and exit 2 (``krt.cli.run_refs.run_name``).
"""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from krt.cli.exitcodes import ExitCode
from krt.cli.main import krt
from krt.cli.run_refs import ACCEPTED_FORMS, NotARun, run_name
from krt.kube.client import Kube
from krt.kube.errors import NotFound
from krt.kube.resources import RUNS

from .conftest import NS, CliRun, task_manifest
from .test_cli_validation import UNREACHABLE_KUBECONFIG


@pytest.mark.parametrize(
    "text",
    [
        "my-run",
        "run/my-run",
        "runs/my-run",
        "krun/my-run",
        "Run/my-run",
        "run.kruntimes.io/my-run",
        "runs.kruntimes.io/my-run",
        "runs.v1alpha1.kruntimes.io/my-run",
        "RUNS.KRUNTIMES.IO/my-run",
    ],
)
def test_run_forms_give_the_bare_name(text: str) -> None:
    assert run_name(text) == "my-run"


@pytest.mark.parametrize(
    "text",
    [
        "pod/x",
        "pods/x",
        "runtime/x",
        "krt/x",  # the Runtime short name
        "runtimes.kruntimes.io/x",
        "run.example.com/x",
        "deployments.apps/x",
        "/x",
        "runs.kruntimes.io.evil/x",
    ],
)
def test_another_kinds_prefix_is_refused_naming_the_accepted_forms(text: str) -> None:
    with pytest.raises(NotARun) as excinfo:
        run_name(text)
    message = excinfo.value.format_message()
    assert repr(text) in message
    assert ACCEPTED_FORMS in message
    assert "\n" not in message
    assert excinfo.value.exit_code == ExitCode.USAGE


@pytest.mark.parametrize("text", ["run/", "run/a/b", "runs/Bad_Name", "Bad_Name"])
def test_the_name_after_a_run_prefix_is_still_checked(text: str) -> None:
    with pytest.raises(click.BadParameter, match="not a valid name"):
        run_name(text)


# -- every command -------------------------------------------------------------------------

COMMANDS = [
    ["get", "{}"],
    ["describe", "{}"],
    ["logs", "{}"],
    ["cancel", "{}"],
    ["delete", "{}"],
    ["wait", "{}"],
    ["invoke", "{}", "-d", "{{}}"],
]


def _unreachable(tmp_path: Path, args: list[str], ref: str) -> Result:
    (tmp_path / "kubeconfig").write_text(UNREACHABLE_KUBECONFIG)
    argv = [a.format(ref) for a in args]
    return CliRunner().invoke(krt, argv, env={"KRT_KUBECONFIG": str(tmp_path / "kubeconfig")})


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: a[0])
def test_each_command_refuses_another_kind_with_one_line(tmp_path: Path, args: list[str]) -> None:
    result = _unreachable(tmp_path, args, "pod/x")
    assert result.exit_code == ExitCode.USAGE, result.output
    assert result.stderr == f"error: 'pod/x' is not a Run (NAME argument): give {ACCEPTED_FORMS}\n"


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: a[0])
@pytest.mark.parametrize("ref", ["run.kruntimes.io/x", "runs/x", "run/x"])
def test_each_command_accepts_the_run_forms(tmp_path: Path, args: list[str], ref: str) -> None:
    """Past validation, the command tries the (unreachable) API server: exit 6, not 2."""
    result = _unreachable(tmp_path, args, ref)
    assert result.exit_code == ExitCode.UNREACHABLE, result.output


async def test_the_stripped_name_is_the_one_used(kube: Kube, cli: CliRun) -> None:
    await kube.create(RUNS, task_manifest("one"))
    printed = (await cli("get", "one", "-o", "name")).stdout.strip()
    assert printed == "run.kruntimes.io/one"
    assert (await cli("get", printed, "-o", "name")).stdout == "run.kruntimes.io/one\n"
    described = await cli("describe", "run/one")
    assert described.exit_code == 0, described.output
    cancelled = await cli("cancel", "runs/one")
    assert cancelled.stdout == "run.kruntimes.io/one cancel requested\n"
    assert (await kube.get(RUNS, "one", NS))["spec"]["cancelRequested"] is True
    deleted = await cli("delete", printed)
    assert deleted.stdout == 'run.kruntimes.io "one" deleted\n'
    with pytest.raises(NotFound):
        await kube.get(RUNS, "one", NS)
