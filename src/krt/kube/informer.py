"""A watch-backed cache of one resource type: list, mark synced, watch, re-list on 410.

The loop is the one kopf and client-go use (STYLE.md, "Controllers"): list the collection,
fill the cache, report "synced" (``task_status.started()``), then watch from the list's
resourceVersion with BOOKMARKs so the resume point stays fresh. A 410 Gone (the version was
compacted) triggers a re-list; the re-list is diffed against the cache, so handlers see
ADDED/MODIFIED for what changed and a synthesised DELETED for every object that vanished
while the watch was down. Transient errors (connection loss, 5xx, 429) and persistent ones
(RBAC not granted yet) are retried forever with jittered exponential backoff in trio time.

Handlers are synchronous callables: they can only look at the event and enqueue work (a
:class:`krt.kube.workqueue.WorkQueue` key), never block the watch. A handler that raises is
logged and the informer carries on. Cached objects are shared, read-only dicts: copy before
editing.

A name reused by a new object (same namespace/name, different ``metadata.uid``) is reported
as DELETED of the old object followed by ADDED of the new one, so fencing code that keys on
UIDs never mistakes the new incarnation for the old.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Callable, Iterable, Mapping
from contextlib import aclosing
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import trio

from krt.kube.backoff import Backoff
from krt.kube.errors import Gone, KubeError, is_transient
from krt.kube.interface import KubeClient, Obj
from krt.kube.resources import ResourceRef

__all__ = ["EventType", "Handler", "IndexFunc", "Informer", "InformerEvent", "object_key"]

log = logging.getLogger(__name__)

#: Server-side watch timeout range, seconds (randomised per watch like client-go's 5-10 min,
#: so many informers do not reconnect in lockstep).
WATCH_TIMEOUT_RANGE = (300.0, 600.0)
#: Extra seconds past the server timeout before the client abandons a silent stream.
WATCH_CLIENT_GRACE = 30.0
#: A watch that ends cleanly sooner than this without any event counts as a failure.
MIN_QUIET_WATCH_SECONDS = 1.0


class EventType(StrEnum):
    """What happened to a cached object."""

    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"
    RESYNC = "RESYNC"
    """Periodic re-delivery of an unchanged cached object (``resync_seconds``)."""


@dataclass(frozen=True, slots=True)
class InformerEvent:
    """One change seen by an :class:`Informer`.

    Attributes:
        type: see :class:`EventType`.
        obj: the object now (for DELETED: its last known state).
        old: the previously cached object for MODIFIED and DELETED (None for ADDED and
            RESYNC).
    """

    type: EventType
    obj: Obj
    old: Obj | None = None


Handler = Callable[[InformerEvent], None]
"""A synchronous event handler: it may only inspect the event and enqueue work."""

IndexFunc = Callable[[Obj], Iterable[str]]
"""Maps an object to the index values it should be found under (may be empty)."""

Key = tuple[str, str]


def object_key(obj: Mapping[str, Any]) -> Key:
    """Return ``(namespace, name)`` of ``obj`` (namespace ``""`` for cluster-scoped objects).

    Raises:
        ValueError: ``obj`` has no ``metadata.name``.
    """
    metadata = obj.get("metadata") or {}
    name = metadata.get("name")
    if not name:
        raise ValueError("object has no metadata.name")
    return str(metadata.get("namespace") or ""), str(name)


def _uid(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


def _rv(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


class Informer:
    """A list+watch cache of one resource type with event handlers and indexes.

    Args:
        kube: the client.
        ref: the resource type.
        namespace: one namespace, or None for all namespaces.
        label_selector, field_selector: server-side filters (objects that stop matching
            arrive as DELETED).
        resync_seconds: when set, every cached object is re-delivered as a RESYNC event
            this often (seconds, > 0).
        backoff: retry delays after errors (default 0.2 s doubling to 30 s, jittered).

    Raises:
        ValueError: ``resync_seconds`` is not positive.
    """

    def __init__(
        self,
        kube: KubeClient,
        ref: ResourceRef,
        *,
        namespace: str | None = None,
        label_selector: str = "",
        field_selector: str = "",
        resync_seconds: float | None = None,
        backoff: Backoff | None = None,
    ) -> None:
        if resync_seconds is not None and not resync_seconds > 0:
            raise ValueError(f"resync_seconds must be > 0, got {resync_seconds}")
        ref.url_parts(namespace)  # validates namespace against the scope
        self._kube = kube
        self.ref = ref
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.resync_seconds = resync_seconds
        self._backoff = backoff or Backoff(base=0.2, maximum=30.0)
        self._cache: dict[Key, Obj] = {}
        self._uids: dict[str, Key] = {}
        self._handlers: list[Handler] = []
        self._indexers: dict[str, IndexFunc] = {}
        self._index: dict[str, dict[str, set[Key]]] = {}
        self._index_values: dict[str, dict[Key, tuple[str, ...]]] = {}
        self._synced = trio.Event()
        #: resourceVersion the next watch resumes from.
        self.resource_version = ""
        #: Number of full lists done (1 after start-up; more after 410s).
        self.lists = 0

    # -- registration --------------------------------------------------------------------

    def add_handler(self, handler: Handler) -> None:
        """Register a synchronous handler for every future event.

        Handlers added after start-up do not see past events; add them before ``run``
        (or read :meth:`items` once) to see the initial ADDED events.
        """
        self._handlers.append(handler)

    def add_index(self, name: str, fn: IndexFunc) -> None:
        """Add a secondary index, built at once over the current cache.

        Args:
            name: index name, unique per informer.
            fn: object -> values it is indexed under (e.g. the assigned Pod of a Run).

        Raises:
            ValueError: ``name`` is already used.
        """
        if name in self._indexers:
            raise ValueError(f"index {name!r} already exists")
        self._indexers[name] = fn
        self._index[name] = {}
        self._index_values[name] = {}
        for key, obj in self._cache.items():
            self._index_add(name, key, obj)

    # -- cache reads ---------------------------------------------------------------------

    @property
    def synced(self) -> bool:
        """Whether the first list has filled the cache."""
        return self._synced.is_set()

    async def wait_synced(self) -> None:
        """Block until the first list has filled the cache."""
        await self._synced.wait()

    def get(self, namespace: str | None, name: str) -> Obj | None:
        """Return the cached object, or None. ``namespace`` is None for cluster-scoped types."""
        return self._cache.get((namespace or "", name))

    def items(self) -> list[Obj]:
        """Return every cached object (a new list; the objects are shared, read-only)."""
        return list(self._cache.values())

    def __len__(self) -> int:
        return len(self._cache)

    def by_uid(self, uid: str) -> Obj | None:
        """Return the cached object with ``metadata.uid == uid``, or None."""
        key = self._uids.get(uid)
        return self._cache.get(key) if key is not None else None

    def by_index(self, name: str, value: str) -> list[Obj]:
        """Return the cached objects indexed under ``value`` in index ``name``.

        Raises:
            KeyError: no index called ``name``.
        """
        if name not in self._index:
            raise KeyError(f"no index {name!r} (add it with add_index)")
        return [self._cache[key] for key in self._index[name].get(value, ())]

    # -- the loop ------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """List, report synced, then watch forever; never returns unless cancelled.

        Args:
            task_status: ``started()`` once the first list filled the cache.

        Raises:
            Only programming errors (a handler's exceptions are logged, API errors retried).
        """
        async with trio.open_nursery() as nursery:
            started = False
            while True:
                try:
                    await self._relist()
                except KubeError as exc:
                    self._log_retry("list", exc)
                    await trio.sleep(self._backoff.next_delay())
                    continue
                if not started:
                    started = True
                    self._synced.set()
                    if self.resync_seconds is not None:
                        nursery.start_soon(self._resync_loop, self.resync_seconds)
                    task_status.started()
                await self._watch_until_gone()

    def _log_retry(self, what: str, exc: KubeError) -> None:
        level = logging.INFO if is_transient(exc) else logging.WARNING
        log.log(level, "%s %s failed, retrying: %s", what, self.ref, exc)

    async def _relist(self) -> None:
        items, rv = await self._kube.list(
            self.ref, self.namespace, self.label_selector, self.field_selector
        )
        self.lists += 1
        self._backoff.reset()
        self._replace(items)
        self.resource_version = rv

    async def _watch_until_gone(self) -> None:
        """Watch from ``resource_version``, resuming after errors; return on 410 Gone."""
        while True:
            timeout = random.uniform(*WATCH_TIMEOUT_RANGE)
            started_at = trio.current_time()
            received = 0
            try:
                with trio.move_on_after(timeout + WATCH_CLIENT_GRACE):
                    events = self._kube.watch(
                        self.ref,
                        self.namespace,
                        self.resource_version,
                        label_selector=self.label_selector,
                        field_selector=self.field_selector,
                        timeout_seconds=math.ceil(timeout),
                    )
                    async with aclosing(events) as stream:
                        async for kind, obj in stream:
                            received += 1
                            self._backoff.reset()
                            self._on_watch_event(kind, obj)
            except Gone as exc:
                log.info("watch %s: %s; re-listing", self.ref, exc.message)
                return
            except KubeError as exc:
                self._log_retry("watch", exc)
                await trio.sleep(self._backoff.next_delay())
                continue
            if not received and trio.current_time() - started_at < MIN_QUIET_WATCH_SECONDS:
                # A stream that ends at once, empty, again and again (a proxy cutting
                # connections, a server bug) must not become a request loop.
                await trio.sleep(self._backoff.next_delay())

    async def _resync_loop(self, period: float) -> None:
        while True:
            await trio.sleep(period)
            for obj in list(self._cache.values()):
                self._emit(InformerEvent(EventType.RESYNC, obj))

    # -- cache updates -------------------------------------------------------------------

    def _on_watch_event(self, kind: str, obj: Obj) -> None:
        # the hot path of every watch event: metadata is read once here and handed down
        meta = obj.get("metadata") or {}
        rv = str(meta.get("resourceVersion") or "")
        if kind == "BOOKMARK":
            if rv:
                self.resource_version = rv
            return
        name = meta.get("name")
        if not name:
            raise ValueError("object has no metadata.name")
        key = (str(meta.get("namespace") or ""), str(name))
        if kind == "DELETED":
            old = self._remove(key)
            self._emit(InformerEvent(EventType.DELETED, obj, old))
        else:
            self._upsert(key, obj, str(meta.get("uid") or ""), rv)
        if rv:
            self.resource_version = rv

    def _upsert(self, key: Key, obj: Obj, uid: str, rv: str) -> None:
        """Store ``obj`` (whose ``metadata.uid`` and ``resourceVersion`` are given) and emit."""
        old = self._cache.get(key)
        if old is not None:
            if _uid(old) != uid:
                self._remove(key)
                self._emit(InformerEvent(EventType.DELETED, old, old))
                old = None
            elif _rv(old) == rv:
                return
        self._store(key, obj, uid, old)
        if old is None:
            self._emit(InformerEvent(EventType.ADDED, obj))
        else:
            self._emit(InformerEvent(EventType.MODIFIED, obj, old))

    def _replace(self, items: list[Obj]) -> None:
        seen: set[Key] = set()
        for obj in items:
            key = object_key(obj)
            seen.add(key)
            self._upsert(key, obj, _uid(obj), _rv(obj))
        for key in [k for k in self._cache if k not in seen]:
            old = self._remove(key)
            if old is not None:
                self._emit(InformerEvent(EventType.DELETED, old, old))

    def _store(self, key: Key, obj: Obj, uid: str, previous: Obj | None) -> None:
        """Cache ``obj`` under ``key``; ``previous`` is the object it replaces (same UID)."""
        if previous is not None and self._indexers:
            for name in self._indexers:
                self._index_remove(name, key)
        if uid:
            self._uids[uid] = key
        self._cache[key] = obj
        if self._indexers:
            for name in self._indexers:
                self._index_add(name, key, obj)

    def _remove(self, key: Key) -> Obj | None:
        old = self._cache.pop(key, None)
        if old is not None:
            if self._uids.get(_uid(old)) == key:
                del self._uids[_uid(old)]
            for name in self._indexers:
                self._index_remove(name, key)
        return old

    def _index_add(self, name: str, key: Key, obj: Obj) -> None:
        try:
            values = tuple(dict.fromkeys(self._indexers[name](obj)))
        except Exception:
            log.exception("index %r of %s failed on %s/%s", name, self.ref, *key)
            values = ()
        self._index_values[name][key] = values
        for value in values:
            self._index[name].setdefault(value, set()).add(key)

    def _index_remove(self, name: str, key: Key) -> None:
        index = self._index[name]
        for value in self._index_values[name].pop(key, ()):
            keys = index.get(value)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del index[value]

    def _emit(self, event: InformerEvent) -> None:
        for handler in self._handlers:
            try:
                handler(event)
            except Exception:
                log.exception("%s handler %r failed on %s", self.ref, handler, event.type)
