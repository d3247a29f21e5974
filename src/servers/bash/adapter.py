"""The Bash language adapter: plugs Bash into the shared Runtime Server machinery.

It implements :class:`servers.common.adapter.FunctionAdapter`: handler shape
(:mod:`servers.bash.handler`), warm workers (:mod:`servers.bash.worker`) and task argv
(:mod:`servers.bash.task`). Everything seed 002 says about registrations, attempts, timeouts,
drains and error codes lives in ``servers.common`` and applies unchanged.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from servers.bash import handler as handlers
from servers.bash import task
from servers.bash.startup import start_bash_worker
from servers.bash.worker import BashWorker
from servers.common.adapter import RegistrationFailed
from servers.common.executions import minimal_env


class BashNotFound(RuntimeError):
    """No ``bash`` executable on the server's PATH (the server cannot start)."""


class BashAdapter:
    """Bash Runtime Server adapter (seed 002, "Built-in Runtime Requirements").

    Args:
        bash: the bash executable to use; default: ``bash`` found on the server's PATH.

    Raises:
        BashNotFound: ``bash`` is not given and not on PATH.
    """

    name = "bash"

    def __init__(self, *, bash: str | None = None) -> None:
        found = bash or shutil.which("bash")
        if not found:
            raise BashNotFound("no bash executable on PATH; the Bash Runtime Server needs one")
        self.bash = found

    def handler_error(self, handler: str) -> str | None:
        """Return why ``handler`` is not a valid ``file.function``, or None."""
        return handlers.handler_error(handler)

    async def start_worker(
        self,
        *,
        working_dir: Path,
        handler: str,
        env: Mapping[str, str],
        run_uid: str,
    ) -> BashWorker:
        """Start a warm bash worker with the handler file sourced and the function checked.

        Args:
            working_dir: an existing directory under the server's work dir; the handler file
                is resolved beneath it and the worker runs in it.
            handler: ``file.function`` that passed :meth:`handler_error`.
            env: the handler's environment; PATH and HOME default to a minimal PATH and the
                working directory, nothing comes from the server's own environment.
            run_uid: the Run UID, for structured logs.

        Raises:
            RegistrationFailed: malformed handler, missing file, ``bash -n`` syntax error, failing top level,
                undefined function (bounded summary).
        """
        try:
            parsed = handlers.parse_handler(handler)
        except handlers.HandlerError as exc:
            raise RegistrationFailed(str(exc)) from None
        return await start_bash_worker(
            bash=self.bash,
            working_dir=working_dir,
            handler=parsed,
            env=minimal_env(env, home=working_dir),
            run_uid=run_uid,
        )

    def task_argv(self, *, entrypoint: str, args: Sequence[str]) -> list[str]:
        """Return the argv of a one-shot Bash task (see :mod:`servers.bash.task`).

        Raises:
            ValueError: no entrypoint and not exactly one argument.
        """
        return task.task_argv(bash=self.bash, entrypoint=entrypoint, args=args)
