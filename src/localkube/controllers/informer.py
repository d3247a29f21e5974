"""Informers (list + watch + cache) and a keyed work queue, on trio.

:class:`Informer` lists a collection, marks itself synced (``task_status.started()``),
watches from the list's resourceVersion, re-lists on 410 Gone (emitting the differences as
events), and resumes after transient errors with jittered back-off. Handlers are plain
callbacks that only enqueue keys.

:class:`KeyedQueue` runs one sequential worker per key, in parallel across keys; a key
dirtied while its worker runs is handled again afterwards; idle workers exit. A failing
handler is logged and retried with back-off, unless the failure comes from the object's
shape (a stored object of a wrong type must not crash-loop a controller): that is logged
once and waits for the object's next event.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, Final, Generic, TypeVar

import httpx
import trio

from localkube.controllers.kubeapi import ApiStatusError, Kube

log = logging.getLogger(__name__)

ObjectKey = tuple[str, str]
EventHandler = Callable[[str, dict[str, Any]], None]
K = TypeVar("K", bound=Hashable)


def key_of(obj: dict[str, Any]) -> ObjectKey:
    """Return ``(namespace, name)`` of an object (namespace ``""`` if cluster-scoped)."""
    meta = obj.get("metadata", {})
    return (meta.get("namespace", "") or "", meta.get("name", ""))


class Informer:
    """A watch-backed cache of one collection.

    Args:
        kube: the API client.
        path: collection path, e.g. ``/api/v1/pods`` (all namespaces).
        params: extra list/watch query (``labelSelector``, ``fieldSelector``).
        name: for logs.

    Attributes:
        cache: ``(namespace, name)`` -> latest object.
    """

    def __init__(
        self, kube: Kube, path: str, *, params: dict[str, str] | None = None, name: str = ""
    ) -> None:
        self.kube = kube
        self.path = path
        self.params = dict(params or {})
        self.name = name or path
        self.cache: dict[ObjectKey, dict[str, Any]] = {}
        self._handlers: list[EventHandler] = []

    def add_handler(self, handler: EventHandler) -> None:
        """Call ``handler(event_type, obj)`` for ADDED, MODIFIED and DELETED events
        (including those replayed by the initial list)."""
        self._handlers.append(handler)

    def items(self) -> list[dict[str, Any]]:
        """Return the cached objects."""
        return list(self.cache.values())

    def _emit(self, etype: str, obj: dict[str, Any]) -> None:
        key = key_of(obj)
        if etype == "DELETED":
            self.cache.pop(key, None)
        else:
            self.cache[key] = obj
        for h in self._handlers:
            h(etype, obj)

    async def _relist(self) -> str:
        result = await self.kube.list(self.path, self.params)
        fresh = {key_of(o): o for o in result["items"]}
        for key in list(self.cache):
            if key not in fresh:
                self._emit("DELETED", self.cache[key])
        for key, obj in fresh.items():
            old = self.cache.get(key)
            if old is None:
                self._emit("ADDED", obj)
            elif old.get("metadata", {}).get("resourceVersion") != obj["metadata"].get(
                "resourceVersion"
            ):
                self._emit("MODIFIED", obj)
        return str(result.get("metadata", {}).get("resourceVersion", ""))

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """List, report started (synced), then watch forever. Never returns unless
        cancelled; the first list's errors propagate to the caller."""
        rv = await self._relist()
        task_status.started()
        failures = 0
        while True:
            try:
                async for event in self.kube.watch(
                    self.path, resource_version=rv, params=self.params
                ):
                    failures = 0
                    obj = event.get("object") or {}
                    new_rv = obj.get("metadata", {}).get("resourceVersion")
                    if new_rv:
                        rv = str(new_rv)
                    if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                        self._emit(event["type"], obj)
                # the server closed the stream: resume from rv
            except ApiStatusError as exc:
                if exc.code == 410:
                    log.debug("%s: watch expired, re-listing", self.name)
                    rv = await self._relist_with_retry()
                    continue
                failures += 1
                log.warning("%s: watch failed: %s", self.name, exc)
            except (httpx.TransportError, OSError) as exc:
                failures += 1
                log.warning("%s: watch connection failed: %s", self.name, exc)
            if failures:
                await trio.sleep(min(5.0, 0.1 * 2 ** min(failures, 6)) * random.uniform(0.5, 1.0))
                if failures > 1:
                    rv = await self._relist_with_retry()
            else:
                await trio.sleep(0.05)

    async def _relist_with_retry(self) -> str:
        attempt = 0
        while True:
            try:
                return await self._relist()
            except (ApiStatusError, httpx.TransportError, OSError) as exc:
                attempt += 1
                log.warning("%s: list failed: %s", self.name, exc)
                await trio.sleep(min(5.0, 0.1 * 2 ** min(attempt, 6)) * random.uniform(0.5, 1.0))


#: Exceptions a handler raises on an object of the wrong shape (a wrong-typed or missing
#: field): not retried, since only a change to the object can cure them.
MALFORMED_OBJECT_ERRORS: Final = (TypeError, ValueError, LookupError, AttributeError)
#: API answers that a retry of the same write cannot change (400 BadRequest, 422 Invalid).
PERMANENT_API_CODES: Final = frozenset({400, 422})


def _is_permanent(exc: Exception) -> bool:
    if isinstance(exc, ApiStatusError):
        return exc.code in PERMANENT_API_CODES
    return isinstance(exc, MALFORMED_OBJECT_ERRORS)


class KeyedQueue(Generic[K]):
    """One sequential worker per key, parallel across keys.

    Args:
        handler: ``await handler(key)`` reconciles one key. An exception never stops the
            controller: one of :data:`MALFORMED_OBJECT_ERRORS` (an object of the wrong
            shape) or an API answer in :data:`PERMANENT_API_CODES` is logged once per key
            and distinct message (the former with its traceback), and the key waits for its
            next :meth:`add` (the next event about it) instead of being retried; any other
            exception is logged (API and connection errors as warnings,
            409 silently, anything else with its traceback) and the key is retried after a
            back-off (0.1 s doubling to 10 s).
        name: for logs.
    """

    def __init__(self, handler: Callable[[K], Awaitable[None]], *, name: str = "") -> None:
        self.handler = handler
        self.name = name
        self._nursery: trio.Nursery | None = None
        self._dirty: set[K] = set()
        self._running: set[K] = set()
        self._pending: set[K] = set()
        self._malformed: dict[K, str] = {}

    def add(self, key: K) -> None:
        """Mark ``key`` for reconciliation (safe to call from any task, any time)."""
        self._dirty.add(key)
        if key in self._running:
            return
        if self._nursery is None:
            self._pending.add(key)
            return
        self._running.add(key)
        self._nursery.start_soon(self._work, key)

    async def _work(self, key: K) -> None:
        failures = 0
        try:
            while key in self._dirty:
                self._dirty.discard(key)
                try:
                    await self.handler(key)
                    failures = 0
                    self._malformed.pop(key, None)
                except Exception as exc:  # noqa: BLE001 - one key's failure never stops the rest
                    if _is_permanent(exc):
                        # retrying cannot fix an object of the wrong shape (or one the API
                        # server refuses): skip the key until it is added again (an
                        # event), and log each distinct failure once
                        self._skip(key, exc)
                        continue
                    failures += 1
                    if isinstance(exc, (ApiStatusError, httpx.TransportError, OSError)):
                        if not (isinstance(exc, ApiStatusError) and exc.code == 409):
                            log.warning("%s %s: %s", self.name, key, exc)
                    else:
                        log.exception("%s %s: reconcile failed", self.name, key)
                    self._dirty.add(key)
                    await trio.sleep(min(10.0, 0.05 * 2**failures))
        finally:
            self._running.discard(key)

    def _skip(self, key: K, exc: Exception) -> None:
        signature = f"{type(exc).__name__}: {exc}"
        if self._malformed.get(key) == signature:
            log.debug("%s %s: still failing: %s", self.name, key, signature)
            return
        self._malformed[key] = signature
        if isinstance(exc, ApiStatusError):
            log.warning("%s %s: %s; skipped until it changes", self.name, key, exc)
        else:
            log.exception("%s %s: reconcile failed; skipped until it changes", self.name, key)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Host the workers; never returns unless cancelled."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            for key in self._pending:
                self._running.add(key)
                nursery.start_soon(self._work, key)
            self._pending.clear()
            task_status.started()
            await trio.sleep_forever()
