"""Where a command connects: kubectl's ``--kubeconfig``, ``--context``, ``-n/--namespace``.

Every command that talks to the API server takes these three options (decorator
:func:`kube_options`), each also read from the environment like kubectl's: ``KRT_KUBECONFIG``
(else ``$KUBECONFIG``, else ``~/.kube/config``, else the in-cluster ServiceAccount),
``KRT_CONTEXT`` and ``KRT_NAMESPACE`` (else the context's namespace, else ``default``).
:func:`open_kube` connects through :func:`krt.kube.client.connect`; kr8s is never used
directly.
"""

from __future__ import annotations

import functools
import shlex
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from krt.kube.client import Kube

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class KubeTarget:
    """The connection options of one command.

    Attributes:
        kubeconfig: a kubeconfig path, or None for ``$KUBECONFIG`` / default / in-cluster.
        context: a kubeconfig context name, or None for the current context.
        namespace: the namespace to work in, or None for the context's (or ``default``).
    """

    kubeconfig: Path | None = None
    context: str | None = None
    namespace: str | None = None

    def flags(self, namespace: str) -> str:
        """These options as ``krt`` flags for a follow-up command, in ``namespace``.

        Args:
            namespace: the namespace the command worked in (always given: explicit).
        """
        parts = [f"-n {shlex.quote(namespace)}"]
        if self.context is not None:
            parts.append(f"--context {shlex.quote(self.context)}")
        if self.kubeconfig is not None:
            parts.append(f"--kubeconfig {shlex.quote(str(self.kubeconfig))}")
        return " ".join(parts)


def kube_options(func: F) -> F:
    """Add ``--kubeconfig``, ``--context`` and ``-n/--namespace`` and pass ``target``.

    The decorated command receives one keyword argument ``target`` (a :class:`KubeTarget`)
    instead of the three options.
    """

    @functools.wraps(func)  # keeps the options declared below this decorator
    def collect(**kwargs: Any) -> Any:
        ctx = click.get_current_context()
        values = {name: kwargs.pop(name) for name in TARGET_OPTIONS}
        target = KubeTarget(**{name: _choose(ctx, name, values[name]) for name in TARGET_OPTIONS})
        return func(target=target, **kwargs)

    decorated: Any = collect
    for option in reversed(
        [
            click.option(
                "--kubeconfig",
                type=click.Path(path_type=Path),  # a missing file: exit 6 from connect()
                envvar="KRT_KUBECONFIG",
                help="Kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster).",
            ),
            click.option(
                "--context",
                envvar="KRT_CONTEXT",
                help="Kubeconfig context (default: the current context).",
            ),
            click.option(
                "-n",
                "--namespace",
                envvar="KRT_NAMESPACE",
                help="Namespace (default: the context's namespace, else 'default').",
            ),
        ]
    ):
        decorated = option(decorated)
    return decorated  # type: ignore[no-any-return]


#: The connection options, as the parameter names of :func:`kube_options` and of the group.
TARGET_OPTIONS = ("kubeconfig", "context", "namespace")
#: Where the ``krt`` group keeps the connection options given before the command name.
GLOBAL_TARGET_KEY = "krt_global_target"


def global_kube_options(func: F) -> F:
    """The same three options on the ``krt`` group, as kubectl takes them before the verb.

    ``krt -n team-a get`` and ``krt --kubeconfig k.yaml invoke f`` work like kubectl's
    global flags: the values are kept in the root context's ``meta`` and used by every
    command with :func:`kube_options`. Precedence: the command's own flag, then the flag
    before the command, then the environment (``KRT_*``, ``$KUBECONFIG``), then defaults.
    """

    def remember(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        source = ctx.get_parameter_source(str(param.name))
        if value is not None and source is click.core.ParameterSource.COMMANDLINE:
            ctx.meta.setdefault(GLOBAL_TARGET_KEY, {})[str(param.name)] = value
        return value

    decorated: Any = func
    for option in reversed(
        [
            click.option(
                "--kubeconfig",
                type=click.Path(path_type=Path),  # a missing file: exit 6 from connect()
                expose_value=False,
                allow_from_autoenv=False,  # KRT_* are read by the command's own options
                callback=remember,
                help="Kubeconfig file for the command (also accepted after it).",
            ),
            click.option(
                "--context",
                expose_value=False,
                allow_from_autoenv=False,  # KRT_* are read by the command's own options
                callback=remember,
                help="Kubeconfig context for the command.",
            ),
            click.option(
                "-n",
                "--namespace",
                expose_value=False,
                allow_from_autoenv=False,  # KRT_* are read by the command's own options
                callback=remember,
                help="Namespace for the command.",
            ),
        ]
    ):
        decorated = option(decorated)
    return decorated  # type: ignore[no-any-return]


def _choose(ctx: click.Context, name: str, value: Any) -> Any:
    """The command's own flag, else the one given before the command, else env/default."""
    if (
        value is not None
        and ctx.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE
    ):
        return value
    given = ctx.find_root().meta.get(GLOBAL_TARGET_KEY) or {}
    return given.get(name, value)


@asynccontextmanager
async def open_kube(target: KubeTarget) -> AsyncIterator[Kube]:
    """Connect to the API server named by ``target``; close the client on exit.

    Yields:
        A connected :class:`~krt.kube.client.Kube` whose ``namespace`` is the one to use.

    Raises:
        ConfigError: no kubeconfig and not in a cluster, a missing or malformed kubeconfig
            file (named in the message), or an unknown context.
        ConnectionFailed: the API server did not answer.
        ApiError: ``/version`` was refused (e.g. 401).
    """
    from krt.kube.client import connect  # imports kr8s (~0.4 s): only when connecting

    kube = await connect(
        kubeconfig=target.kubeconfig, context=target.context, namespace=target.namespace
    )
    async with kube:
        yield kube
