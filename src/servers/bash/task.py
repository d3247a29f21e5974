"""The argv of a one-shot Bash task (issue 2, item 4; the base ``Runtime.Execute`` RPC).

Two shapes are accepted:

* an entrypoint: ``bash -- <entrypoint> <args...>``: the script runs with ``args`` as ``$1..``;
* no entrypoint and exactly one argument: ``bash -c -- <arg>``: the argument is a command
  line, written by the Run's author (trusted task source, not invocation data).

Anything else is rejected rather than guessed. With no entrypoint and no arguments there is
nothing to run. With several arguments and no entrypoint, ``bash -c`` would silently take the
second argument as ``$0`` and the rest as ``$1..``, and ``bash <args...>`` would treat the first
as a script path: both readings are plausible, so the caller must say which it means (put the
command in one argument, or name the script as the entrypoint).

The ``--`` ends bash's option parsing, so a command or script name beginning with ``-`` is
never taken for an option.
"""

from __future__ import annotations

from collections.abc import Sequence


def task_argv(*, bash: str, entrypoint: str, args: Sequence[str]) -> list[str]:
    """Return the argv that runs a Bash task.

    Args:
        bash: the bash executable (a path or a name looked up on the task's PATH).
        entrypoint: a script relative to the working directory (already validated by the
            shared layer: relative, no ``..``), or empty.
        args: the task arguments.

    Returns:
        ``[bash, "--", entrypoint, *args]`` or ``[bash, "-c", "--", args[0]]``.

    Raises:
        ValueError: no entrypoint and no arguments, or no entrypoint and more than one
            argument; the message says how to fix the request.
    """
    if entrypoint:
        return [bash, "--", entrypoint, *args]
    if not args:
        raise ValueError(
            "a bash task needs an entrypoint or exactly one argument (a command line for"
            " bash -c); got neither"
        )
    if len(args) > 1:
        raise ValueError(
            f"a bash task without an entrypoint takes exactly one argument (a command line for"
            f" bash -c); got {len(args)}: put the whole command in one argument, or set the"
            f" entrypoint to a script and pass these as its arguments"
        )
    return [bash, "-c", "--", args[0]]
