"""The ``krt`` command: a thin click group; subcommands live in their own modules."""

from __future__ import annotations

import click

from krt.cli.dev import dev


@click.group(context_settings={"auto_envvar_prefix": "KRT"})
def krt() -> None:
    """kruntimes command line."""


krt.add_command(dev)


def main() -> None:
    """Console-script entry point (``krt``)."""
    krt()


if __name__ == "__main__":  # pragma: no cover
    main()
