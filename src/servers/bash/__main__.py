"""``krt-bash-runtime`` / ``python -m servers.bash``: the Bash Runtime Server command line."""

from __future__ import annotations

from servers.bash.adapter import BashAdapter
from servers.common.cli import run_cli


def main() -> None:
    """Run the Bash Runtime Server (``--listen HOST:PORT --work-dir DIR``, see ``--help``)."""
    run_cli(BashAdapter, prog="krt-bash-runtime")


if __name__ == "__main__":
    main()
