"""Adding and removing the ``kruntimes.io/registration-cleanup`` finalizer, conditionally.

Seed 000, Cleanup and Finalization: runtimed adds the finalizer before it registers a
function Run and removes it only after unregister, file removal and capacity release. Both
edits are JSON merge patches of ``metadata.finalizers`` that carry
``metadata.resourceVersion``: the API server applies them only to the version read (else
409 Conflict), so a stale cache can neither re-add a finalizer after its removal nor drop
one another writer just added. The list is replaced whole (merge patches replace lists),
computed from the object as read, so other finalizers are kept.
"""

from __future__ import annotations

from typing import Any, Protocol

from krt.api.constants import REGISTRATION_CLEANUP_FINALIZER
from krt.kube.interface import KubeClient, Obj
from krt.kube.resources import RUNS

__all__ = ["FinalizerWriter", "KubeFinalizers", "with_finalizer", "without_finalizer"]


def with_finalizer(obj: Obj) -> list[str] | None:
    """The finalizer list with ours added, or ``None`` when it is already there."""
    current = list((obj.get("metadata") or {}).get("finalizers") or [])
    if REGISTRATION_CLEANUP_FINALIZER in current:
        return None
    return [*current, REGISTRATION_CLEANUP_FINALIZER]


def without_finalizer(obj: Obj) -> list[str] | None:
    """The finalizer list with ours removed, or ``None`` when it is not there."""
    current = list((obj.get("metadata") or {}).get("finalizers") or [])
    if REGISTRATION_CLEANUP_FINALIZER not in current:
        return None
    return [name for name in current if name != REGISTRATION_CLEANUP_FINALIZER]


class FinalizerWriter(Protocol):
    """Conditional finalizer edits on Runs (fakes implement it in tests)."""

    async def add(self, obj: Obj) -> Obj:
        """Add the registration-cleanup finalizer to ``obj`` as read.

        Returns:
            The stored object (``obj`` itself when nothing changed).

        Raises:
            Conflict: ``obj`` is stale. NotFound: it is gone.
        """
        ...

    async def remove(self, obj: Obj) -> Obj:
        """Remove the registration-cleanup finalizer from ``obj`` as read.

        Returns:
            The stored object (``obj`` itself when nothing changed); once the last finalizer
            of a deleting object goes, the API server deletes it and returns it one last time.

        Raises:
            Conflict: ``obj`` is stale. NotFound: it is gone.
        """
        ...


class KubeFinalizers:
    """:class:`FinalizerWriter` over the API (merge patch with a resourceVersion precondition).

    Args:
        kube: the client.
    """

    def __init__(self, kube: KubeClient) -> None:
        self._kube = kube

    async def _patch(self, obj: Obj, finalizers: list[str]) -> Obj:
        meta: dict[str, Any] = obj.get("metadata") or {}
        patch = {
            "metadata": {
                "finalizers": finalizers or None,
                "resourceVersion": meta.get("resourceVersion"),
            }
        }
        return await self._kube.patch(RUNS, str(meta["name"]), str(meta["namespace"]), patch)

    async def add(self, obj: Obj) -> Obj:
        """See :meth:`FinalizerWriter.add`."""
        finalizers = with_finalizer(obj)
        return obj if finalizers is None else await self._patch(obj, finalizers)

    async def remove(self, obj: Obj) -> Obj:
        """See :meth:`FinalizerWriter.remove`."""
        finalizers = without_finalizer(obj)
        return obj if finalizers is None else await self._patch(obj, finalizers)
