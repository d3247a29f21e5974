"""ownerReference garbage collection, background, foreground and orphan (in-process).

Follows Kubernetes "Garbage Collection":

* When an owner is gone, each dependent whose owners are *all* gone is deleted
  (background propagation); a dependent that still has a live owner only loses the
  reference to the deleted one. Owners are matched by uid.
* Foreground: an owner deleted with ``propagationPolicy=Foreground`` carries the
  ``foregroundDeletion`` finalizer; its dependents are deleted (foreground again when they
  have dependents of their own) and the finalizer is removed, deleting the owner, once no
  dependent with ``blockOwnerDeletion: true`` remains.
* Orphan: an owner with the ``orphan`` finalizer has its uid removed from every
  dependent's ownerReferences, then loses the finalizer.

The collector watches every store event (one subscriber, no polling), keeps a uid index
and an owner -> dependents index, and acts through :class:`~localkube.deletion.Deleter`
so finalizers on dependents are honoured.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

import trio

from localkube import objects, storage
from localkube.deletion import FOREGROUND, ORPHAN, DeleteOptions, Deleter
from localkube.resources import ResourceRegistry, ResourceType

log = logging.getLogger("localkube.gc")


def _owner_uids(obj: dict[str, Any]) -> list[str]:
    return [
        str(r.get("uid", ""))
        for r in obj.get("metadata", {}).get("ownerReferences") or []
        if r.get("uid")
    ]


class GarbageCollector:
    """The collector. Run :meth:`run` in a nursery (``await nursery.start(gc.run)``).

    Args:
        store: the object store. registry: served types. deleter: deletion rules.
    """

    def __init__(self, store: storage.Store, registry: ResourceRegistry, deleter: Deleter) -> None:
        self.store = store
        self.registry = registry
        self.deleter = deleter
        self.uids: dict[str, storage.ObjectKey] = {}
        self.dependents: dict[str, set[storage.ObjectKey]] = {}
        self._owners_of: dict[storage.ObjectKey, list[str]] = {}

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Index every object, collect what is already orphaned, then follow events.

        If the collector falls too far behind the store's events (its subscription is
        closed), it re-indexes and goes on. Never returns unless cancelled.
        """
        started = False
        while True:
            with self.store.subscribe(None) as (_, channel):
                self._resync()
                if not started:
                    task_status.started()
                    started = True
                while True:
                    try:
                        batch = await storage.receive_batch(channel)
                    except trio.EndOfChannel:
                        break
                    for event in batch:
                        try:
                            self.handle(event)
                        except Exception:
                            log.exception("garbage collection after %s %s", event.type, event.key)
            log.warning("garbage collector fell behind the store; re-indexing")

    def _resync(self) -> None:
        self.uids.clear()
        self.dependents.clear()
        self._owners_of.clear()
        for rkey in {rt.storage_key for rt in self.registry.all() if rt.stored}:
            for obj in self.store.list(rkey):
                meta = obj["metadata"]
                self._index((rkey, meta.get("namespace", ""), meta["name"]), obj)
        for key in list(self._owners_of):
            current = self.store.get(*key)
            if current is not None:
                try:
                    self._check(key, current)
                except Exception:
                    log.exception("garbage collection of %s", key)

    def _index(self, key: storage.ObjectKey, obj: dict[str, Any] | None) -> None:
        for uid in self._owners_of.pop(key, []):
            deps = self.dependents.get(uid)
            if deps is not None:
                deps.discard(key)
                if not deps:
                    del self.dependents[uid]
        if obj is None:
            return
        uid = obj["metadata"].get("uid")
        if uid:
            self.uids[uid] = key
        owners = _owner_uids(obj)
        if owners:
            self._owners_of[key] = owners
            for owner in owners:
                self.dependents.setdefault(owner, set()).add(key)

    def _rt(self, key: storage.ObjectKey) -> ResourceType | None:
        types = self.registry.by_storage_key(key[0])
        return types[0] if types else None

    def handle(self, event: storage.StoredEvent) -> None:
        """React to one store event (synchronous; used directly by tests)."""
        key = event.key
        if event.type == "DELETED":
            uid = event.obj["metadata"].get("uid", "")
            self._index(key, None)
            if self.uids.get(uid) == key:
                del self.uids[uid]
            for dep in sorted(self.dependents.get(uid, set())):
                obj = self.store.get(*dep)
                if obj is not None:
                    self._check(dep, obj)
            for owner in _owner_uids(event.obj):
                owner_key = self.uids.get(owner)
                owner_obj = self.store.get(*owner_key) if owner_key else None
                if (
                    owner_key
                    and owner_obj is not None
                    and FOREGROUND in objects.finalizers_of(owner_obj)
                ):
                    self._foreground(owner_key, owner_obj)
            return
        self._index(key, event.obj)
        self._check(key, event.obj)

    def _check(self, key: storage.ObjectKey, obj: dict[str, Any]) -> None:
        finalizers = objects.finalizers_of(obj)
        if objects.is_deleting(obj) and ORPHAN in finalizers:
            self._orphan(key, obj)
            return
        if objects.is_deleting(obj) and FOREGROUND in finalizers:
            self._foreground(key, obj)
            return
        owners = _owner_uids(obj)
        if not owners or objects.is_deleting(obj):
            return
        live = [u for u in owners if u in self.uids]
        if len(live) == len(owners):
            return
        rt = self._rt(key)
        if rt is None:
            return
        if live:
            updated = copy.deepcopy(obj)
            updated["metadata"]["ownerReferences"] = [
                r for r in updated["metadata"].get("ownerReferences") or [] if r.get("uid") in live
            ]
            self.store.update(
                key, updated, expected_revision=int(obj["metadata"]["resourceVersion"])
            )
            return
        foreground = any(self._owner_foreground(u) for u in owners)
        has_dependents = bool(self.dependents.get(obj["metadata"].get("uid", "")))
        policy = "Foreground" if foreground and has_dependents else "Background"
        self.deleter.delete(rt, key[1], key[2], DeleteOptions(propagation=policy))

    def _owner_foreground(self, uid: str) -> bool:
        key = self.uids.get(uid)
        obj = self.store.get(*key) if key else None
        return obj is not None and FOREGROUND in objects.finalizers_of(obj)

    def _foreground(self, key: storage.ObjectKey, owner: dict[str, Any]) -> None:
        uid = owner["metadata"].get("uid", "")
        blocking = False
        for dep_key in sorted(self.dependents.get(uid, set())):
            dep = self.store.get(*dep_key)
            rt = self._rt(dep_key)
            if dep is None or rt is None:
                continue
            if not objects.is_deleting(dep):
                dep_uid = dep["metadata"].get("uid", "")
                has_dependents = bool(self.dependents.get(dep_uid))
                if has_dependents and self._waits_on_deleting_dependents(dep_uid):
                    dep = self._unblock_owner_references(dep_key, dep)
                policy = "Foreground" if has_dependents else "Background"
                self.deleter.delete(rt, dep_key[1], dep_key[2], DeleteOptions(propagation=policy))
            refs = [r for r in dep["metadata"].get("ownerReferences") or [] if r.get("uid") == uid]
            if any(r.get("blockOwnerDeletion") for r in refs):
                blocking = True
        if blocking:
            return
        self._drop_finalizer(key, owner, FOREGROUND)

    def _waits_on_deleting_dependents(self, uid: str) -> bool:
        """Return whether a dependent of ``uid`` is itself waiting for its dependents.

        Kubernetes' collector uses this (with false positives, as here) to detect an
        ownership cycle before it deletes an object in the foreground.
        """
        for key in self.dependents.get(uid, set()):
            obj = self.store.get(*key)
            if obj is not None and objects.is_deleting(obj):
                if FOREGROUND in objects.finalizers_of(obj):
                    return True
        return False

    def _unblock_owner_references(
        self, key: storage.ObjectKey, obj: dict[str, Any]
    ) -> dict[str, Any]:
        """Set ``blockOwnerDeletion: false`` on every blocking ownerReference of ``obj``.

        Breaks an ownership cycle under foreground deletion (A owns B, B owns A): without
        it each owner would wait for the other for ever. Kubernetes' collector does the
        same before deleting such a dependent in the foreground.

        Returns:
            The stored object after the change (``obj`` if nothing was blocking).
        """
        refs = obj["metadata"].get("ownerReferences") or []
        if not any(r.get("blockOwnerDeletion") for r in refs):
            return obj
        updated = copy.deepcopy(obj)
        for ref in updated["metadata"]["ownerReferences"]:
            if ref.get("blockOwnerDeletion"):
                ref["blockOwnerDeletion"] = False
        return self.store.update(
            key, updated, expected_revision=int(obj["metadata"]["resourceVersion"])
        )

    def _orphan(self, key: storage.ObjectKey, owner: dict[str, Any]) -> None:
        uid = owner["metadata"].get("uid", "")
        for dep_key in sorted(self.dependents.get(uid, set())):
            dep = self.store.get(*dep_key)
            if dep is None:
                continue
            updated = copy.deepcopy(dep)
            updated["metadata"]["ownerReferences"] = [
                r for r in updated["metadata"].get("ownerReferences") or [] if r.get("uid") != uid
            ]
            if not updated["metadata"]["ownerReferences"]:
                del updated["metadata"]["ownerReferences"]
            self.store.update(
                dep_key, updated, expected_revision=int(dep["metadata"]["resourceVersion"])
            )
        current = self.store.get(*key)
        if current is not None:
            self._drop_finalizer(key, current, ORPHAN)

    def _drop_finalizer(self, key: storage.ObjectKey, obj: dict[str, Any], finalizer: str) -> None:
        rt = self._rt(key)
        if rt is None:
            return
        updated = copy.deepcopy(obj)
        remaining = [f for f in objects.finalizers_of(obj) if f != finalizer]
        if remaining:
            updated["metadata"]["finalizers"] = remaining
        else:
            updated["metadata"].pop("finalizers", None)
        if self.deleter.finalized(rt, obj, updated):
            self.deleter.remove(
                key, rt, updated, expected_revision=int(obj["metadata"]["resourceVersion"])
            )
        else:
            self.store.update(
                key, updated, expected_revision=int(obj["metadata"]["resourceVersion"])
            )
