"""Fixtures for the Bash Runtime Server tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from servers.bash.adapter import BashAdapter


@pytest.fixture
def adapter() -> BashAdapter:
    """The adapter, with bash from PATH."""
    return BashAdapter()


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """An empty working directory for handler files (symlink-free absolute path)."""
    path = tmp_path / "work"
    path.mkdir()
    return path.resolve()
