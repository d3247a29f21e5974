"""An in-memory stand-in for :class:`krt.kube.client.Kube`, for loop tests on ``autojump_clock``.

It implements the verbs the control plane uses (list, watch, get, create, replace,
replace_status, patch (merge), delete) with the API server's concurrency rules that matter
here: every write bumps a global ``resourceVersion``; ``replace``/``replace_status`` and a
merge patch carrying ``metadata.resourceVersion`` answer :class:`Conflict` when stale;
``delete`` of an object with finalizers only sets ``deletionTimestamp``; removing the last
finalizer of a deleting object deletes it. Watches see every later write. Label selectors:
``key`` and ``key=value`` terms, comma-separated.

Tests may set :attr:`FakeKube.before_write` to inject behaviour (e.g. a competing writer)
just before a write is applied.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from typing import Any

import trio

from krt.api.patches import apply_merge_patch
from krt.kube.clock import Clock, format_time
from krt.kube.errors import AlreadyExists, Conflict, NotFound
from krt.kube.resources import ResourceRef

Obj = dict[str, Any]
Key = tuple[str, str, str]


def _matches(obj: Mapping[str, Any], selector: str) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for term in filter(None, selector.split(",")):
        key, sep, value = term.partition("=")
        if key not in labels or (sep and labels[key] != value):
            return False
    return True


def _not_found(ref: ResourceRef, name: str) -> NotFound:
    return NotFound(404, "NotFound", f'{ref.plural} "{name}" not found')


class FakeKube:
    """See the module docstring.

    Args:
        clock: wall clock for ``creationTimestamp`` and ``deletionTimestamp``.
    """

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.namespace = "default"
        self.objects: dict[Key, Obj] = {}
        self.version = 100
        self._watchers: list[
            tuple[ResourceRef, str | None, str, trio.MemorySendChannel[tuple[str, Obj]]]
        ] = []
        self._uids = 0
        #: (verb, plural, name) of every write, in order.
        self.writes: list[tuple[str, str, str]] = []
        #: Objects kept from lists and watches (a lagging informer) but visible to ``get``.
        self.hidden: set[Key] = set()
        #: Awaited before every write with (verb, ref, object or name).
        self.before_write: Callable[[str, ResourceRef, Any], Awaitable[None]] | None = None
        #: Awaited after a status write is stored (and its watch event sent) but before the
        #: response returns, with (verb, ref, name): models a response slower than the watch.
        self.after_write: Callable[[str, ResourceRef, Any], Awaitable[None]] | None = None

    # -- internals --------------------------------------------------------------------------

    def _key(self, ref: ResourceRef, namespace: str | None, name: str) -> Key:
        return ref.plural, namespace or "", name

    def _store(self, ref: ResourceRef, obj: Obj, event: str) -> Obj:
        self.version += 1
        meta = obj.setdefault("metadata", {})
        meta["resourceVersion"] = str(self.version)
        obj.setdefault("apiVersion", ref.api_version)
        obj.setdefault("kind", ref.kind)
        key = self._key(ref, meta.get("namespace"), meta["name"])
        if event == "DELETED":
            self.objects.pop(key, None)
        else:
            self.objects[key] = obj
        for wref, wns, selector, send in list(self._watchers):
            if (
                wref == ref
                and (wns is None or wns == meta.get("namespace"))
                and _matches(obj, selector)
            ):
                send.send_nowait((event, copy.deepcopy(obj)))
        return copy.deepcopy(obj)

    async def _hook(self, verb: str, ref: ResourceRef, subject: Any) -> None:
        self.writes.append((verb, ref.plural, str(subject)))
        if self.before_write is not None:
            await self.before_write(verb, ref, subject)

    # -- reads ------------------------------------------------------------------------------

    async def list(
        self,
        ref: ResourceRef,
        namespace: str | None = None,
        label_selector: str = "",
        field_selector: str = "",
        **_: Any,
    ) -> tuple[list[Obj], str]:
        items = [
            copy.deepcopy(obj)
            for (plural, ns, _name), obj in sorted(self.objects.items())
            if plural == ref.plural
            and (plural, ns, _name) not in self.hidden
            and (namespace is None or ns == namespace)
            and _matches(obj, label_selector)
        ]
        return items, str(self.version)

    async def watch(
        self,
        ref: ResourceRef,
        namespace: str | None = None,
        resource_version: str = "",
        *,
        label_selector: str = "",
        **_: Any,
    ) -> AsyncGenerator[tuple[str, Obj], None]:
        send, receive = trio.open_memory_channel[tuple[str, Obj]](10_000)
        entry = (ref, namespace, label_selector, send)
        self._watchers.append(entry)
        try:
            async for event in receive:
                yield event
        finally:
            self._watchers.remove(entry)

    async def get(self, ref: ResourceRef, name: str, namespace: str | None = None) -> Obj:
        obj = self.objects.get(self._key(ref, namespace, name))
        if obj is None:
            raise _not_found(ref, name)
        return copy.deepcopy(obj)

    # -- writes -----------------------------------------------------------------------------

    async def create(
        self, ref: ResourceRef, obj: Mapping[str, Any], *, field_validation: str = ""
    ) -> Obj:
        body = copy.deepcopy(dict(obj))
        meta = body.setdefault("metadata", {})
        await self._hook("create", ref, meta.get("name"))
        if self._key(ref, meta.get("namespace"), meta["name"]) in self.objects:
            raise AlreadyExists(409, "AlreadyExists", "already exists")
        self._uids += 1
        meta.setdefault("uid", f"uid-{meta['name']}-{self._uids}")
        meta.setdefault("creationTimestamp", format_time(self.clock.now()))
        meta.setdefault("generation", 1)
        return self._store(ref, body, "ADDED")

    def _current(self, ref: ResourceRef, obj: Mapping[str, Any]) -> Obj:
        meta = obj["metadata"]
        current = self.objects.get(self._key(ref, meta.get("namespace"), meta["name"]))
        if current is None:
            raise _not_found(ref, meta["name"])
        if meta.get("resourceVersion") != current["metadata"]["resourceVersion"]:
            raise Conflict(409, "Conflict", "the object has been modified")
        return current

    async def replace(
        self, ref: ResourceRef, obj: Mapping[str, Any], *, field_validation: str = ""
    ) -> Obj:
        await self._hook("replace", ref, obj["metadata"]["name"])
        current = self._current(ref, obj)
        body = copy.deepcopy(dict(obj))
        body["metadata"]["uid"] = current["metadata"]["uid"]
        if "status" in current:
            body["status"] = current["status"]
        return self._finish(ref, body)

    async def replace_status(self, ref: ResourceRef, obj: Mapping[str, Any]) -> Obj:
        await self._hook("replace_status", ref, obj["metadata"]["name"])
        current = copy.deepcopy(self._current(ref, obj))
        current["status"] = copy.deepcopy(obj.get("status"))
        stored = self._store(ref, current, "MODIFIED")
        if self.after_write is not None:
            await self.after_write("replace_status", ref, obj["metadata"]["name"])
        return stored

    async def patch(
        self,
        ref: ResourceRef,
        name: str,
        namespace: str | None,
        patch: Mapping[str, Any] | Sequence[Mapping[str, Any]],
        *,
        type: str = "merge",  # noqa: A002
        subresource: str | None = None,
    ) -> Obj:
        assert isinstance(patch, Mapping), "FakeKube supports merge patches only"
        await self._hook("patch", ref, name)
        current = self.objects.get(self._key(ref, namespace, name))
        if current is None:
            raise _not_found(ref, name)
        wanted_rv = (patch.get("metadata") or {}).get("resourceVersion")
        if wanted_rv is not None and wanted_rv != current["metadata"]["resourceVersion"]:
            raise Conflict(409, "Conflict", "the object has been modified")
        body = apply_merge_patch(current, patch)
        return self._finish(ref, body)

    def _finish(self, ref: ResourceRef, body: Obj) -> Obj:
        meta = body["metadata"]
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            return self._store(ref, body, "DELETED")
        return self._store(ref, body, "MODIFIED")

    async def delete(
        self,
        ref: ResourceRef,
        name: str,
        namespace: str | None = None,
        *,
        preconditions: Mapping[str, str] | None = None,
        **_: Any,
    ) -> Obj:
        await self._hook("delete", ref, name)
        current = self.objects.get(self._key(ref, namespace, name))
        if current is None:
            raise _not_found(ref, name)
        if preconditions and preconditions.get("uid") not in (None, current["metadata"]["uid"]):
            raise Conflict(409, "Conflict", "uid precondition failed")
        body = copy.deepcopy(current)
        if body["metadata"].get("finalizers"):
            body["metadata"].setdefault("deletionTimestamp", format_time(self.clock.now()))
            return self._store(ref, body, "MODIFIED")
        return self._store(ref, body, "DELETED")

    # -- test helpers -----------------------------------------------------------------------

    def peek(self, ref: ResourceRef, namespace: str, name: str) -> Obj | None:
        """The stored object (not a copy), or ``None``."""
        return self.objects.get(self._key(ref, namespace, name))
