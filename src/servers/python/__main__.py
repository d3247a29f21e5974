"""``krt-python-runtime`` / ``python -m servers.python``: the Python Runtime Server."""

from __future__ import annotations

from servers.common.cli import run_cli
from servers.python.adapter import PythonAdapter


def main() -> None:
    """Run the Python Runtime Server command line."""
    run_cli(PythonAdapter, prog="krt-python-runtime")


if __name__ == "__main__":
    main()
