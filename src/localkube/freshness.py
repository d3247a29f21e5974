"""Waiting for the store to reach a resourceVersion from the future.

kube-apiserver serves a LIST with ``resourceVersion=N`` (``NotOlderThan`` or ``Exact``)
from its watch cache, and when N is newer than the cache has seen it blocks the request
(``waitUntilFreshAndBlock``) for up to 3 seconds before answering 504 "Too large resource
version": a client that just wrote through another replica gets its list once the cache
catches up, and one holding a revision from another store (a restarted in-memory server)
re-lists after the wait. The watch stream has the same bound
(:data:`localkube.watching.FUTURE_RESOURCE_VERSION_WAIT`); callers bound
:func:`reach_revision` with it.
"""

from __future__ import annotations

import trio

from localkube import storage


async def reach_revision(store: storage.Store, revision: int) -> None:
    """Return once ``store.revision`` is at least ``revision``.

    Never returns before that: the caller bounds the wait (``trio.move_on_after``).
    Woken only by the write that reaches ``revision`` (a subscription to every kind that
    accepts no earlier event), so a busy store costs nothing while waiting.

    Args:
        store: the object store.
        revision: the resourceVersion to wait for.
    """
    while store.revision < revision:
        with store.subscribe(None, accept=lambda event: event.revision >= revision) as (
            _,
            channel,
        ):
            if store.revision >= revision:  # written between the check and the subscription
                return
            try:
                await channel.receive()
            except trio.EndOfChannel:
                continue  # dropped as a slow subscriber: check again, resubscribe
