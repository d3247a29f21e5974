"""The controller pattern end to end on localkube: informer -> work queue -> conditional write.

A stale cached object gets 409 on its status write; the reconciler does not retry blindly but
waits for the informer to deliver the newer object, which re-queues the key (DESIGN.md,
Invariants: "a stale writer gets 409 and re-reads instead of overwriting").
"""

from __future__ import annotations

import functools

import trio
from conftest import WIDGETS, eventually, widget

from krt.kube import errors
from krt.kube.client import Kube
from krt.kube.informer import Informer, InformerEvent, object_key
from krt.kube.resources import ResourceRef
from krt.kube.status import write_status
from krt.kube.workqueue import Requeue, WorkQueue


async def test_stale_status_write_conflicts_then_converges(
    kube: Kube, widgets: ResourceRef
) -> None:
    informer = Informer(kube, WIDGETS, namespace="default")
    queue: WorkQueue[tuple[str, str]] = WorkQueue("widgets")
    conflicts = 0
    interfered = False

    def enqueue(event: InformerEvent) -> None:
        queue.add(object_key(event.obj))

    informer.add_handler(enqueue)

    async def reconcile(key: tuple[str, str]) -> Requeue | None:
        nonlocal conflicts, interfered
        cached = informer.get(*key)
        if cached is None:
            return None
        if not interfered:
            # another writer changes the object after our cache read
            interfered = True
            await kube.patch(WIDGETS, key[1], key[0], {"spec": {"size": 2}})
        try:
            await write_status(kube, WIDGETS, cached, {"observedSize": cached["spec"]["size"]})
        except errors.Conflict:
            conflicts += 1
            return None  # the newer object's MODIFIED event re-queues the key
        return None

    async with trio.open_nursery() as nursery:
        await nursery.start(informer.run)
        await nursery.start(functools.partial(queue.run, reconcile, workers=2))
        await kube.create(WIDGETS, widget("w1", size=1))

        def converged() -> bool:
            obj = informer.get("default", "w1")
            return obj is not None and obj.get("status", {}).get("observedSize") == 2

        await eventually(converged)
        nursery.cancel_scope.cancel()
    assert conflicts == 1
    stored = await kube.get(WIDGETS, "w1", "default")
    assert stored["status"] == {"observedSize": 2}
    assert stored["spec"] == {"size": 2}
