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


def kube_options(func: F) -> F:
    """Add ``--kubeconfig``, ``--context`` and ``-n/--namespace`` and pass ``target``.

    The decorated command receives one keyword argument ``target`` (a :class:`KubeTarget`)
    instead of the three options.
    """

    @functools.wraps(func)  # keeps the options declared below this decorator
    def collect(**kwargs: Any) -> Any:
        target = KubeTarget(
            kubeconfig=kwargs.pop("kubeconfig"),
            context=kwargs.pop("context"),
            namespace=kwargs.pop("namespace"),
        )
        return func(target=target, **kwargs)

    decorated: Any = collect
    for option in reversed(
        [
            click.option(
                "--kubeconfig",
                type=click.Path(dir_okay=False, exists=True, path_type=Path),
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


@asynccontextmanager
async def open_kube(target: KubeTarget) -> AsyncIterator[Kube]:
    """Connect to the API server named by ``target``; close the client on exit.

    Yields:
        A connected :class:`~krt.kube.client.Kube` whose ``namespace`` is the one to use.

    Raises:
        ConfigError: no kubeconfig and not in a cluster, or an unknown context.
        ConnectionFailed: the API server did not answer.
        ApiError: ``/version`` was refused (e.g. 401).
    """
    from krt.kube.client import connect  # imports kr8s (~0.4 s): only when connecting

    kube = await connect(
        kubeconfig=target.kubeconfig, context=target.context, namespace=target.namespace
    )
    async with kube:
        yield kube
