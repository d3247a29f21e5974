"""``krt`` commands leave no credential file in the temporary directory.

The localkube kubeconfig carries ``certificate-authority-data``, which kr8s writes to a
temporary file on every load; before the fix every ``krt`` call left one behind.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest
import trio

from krt.kube.client import Kube
from krt.kube.resources import RUNS
from localkube.apiserver import ApiServerHandle

from .conftest import CliRun, task_manifest


def private_tempdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point ``tempfile`` at a fresh empty directory (after the API server has started)."""
    directory = tmp_path / "tempdir"
    directory.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(directory))
    return directory


async def test_get_and_version_leave_no_file(
    kube: Kube, cli: CliRun, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await kube.create(RUNS, task_manifest("hello"))
    private = private_tempdir(tmp_path, monkeypatch)
    result = await cli("get")
    assert result.exit_code == 0, result.stderr
    assert "hello" in result.stdout
    result = await cli("version", "-o", "json")  # kr8s's own session (kube.api.version())
    assert result.exit_code == 0, result.stderr
    assert "serverVersion" in result.stdout
    assert sorted(os.listdir(private)) == []


async def test_the_krt_command_leaves_no_file(
    apiserver: ApiServerHandle, kube: Kube, tmp_path: Path
) -> None:
    await kube.create(RUNS, task_manifest("hello"))
    private = tmp_path / "tempdir"
    private.mkdir()
    env = {
        **os.environ,
        "TMPDIR": str(private),
        "KRT_KUBECONFIG": str(apiserver.kubeconfig_path),
        "KUBECONFIG": "",
    }
    command = [sys.executable, "-c", "from krt.cli.main import main; main()", "get"]
    with trio.fail_after(30):
        done = await trio.run_process(
            command, env=env, capture_stdout=True, capture_stderr=True, check=False
        )
    assert done.returncode == 0, done.stderr.decode()
    assert b"hello" in done.stdout
    assert sorted(os.listdir(private)) == []
