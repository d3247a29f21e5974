"""In-memory fakes of our own Kube wrapper, for timing tests on autojump_clock.

Only the verbs a test needs exist; anything else raises AttributeError (loudly unmocked).
Integration tests use localkube instead; these exist because localkube runs on real
sockets, and virtual-time tests need every wait to be a trio sleep.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import AsyncGenerator, Mapping
from typing import Any

import trio
import trio.lowlevel

from krt.kube import errors
from krt.kube.resources import ResourceRef


class ObjectStore:
    """A tiny optimistic-concurrency object store shared by several fake clients."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self._versions = itertools.count(1)
        self._uids = itertools.count(1)
        self.writes: list[tuple[float, str, dict[str, Any]]] = []

    def key(self, ref: ResourceRef, namespace: str | None, name: str) -> tuple[str, str, str]:
        return (str(ref), namespace or "", name)


class FakeKube:
    """One client of an :class:`ObjectStore`, with latency and partition knobs.

    Attributes:
        latency: seconds each call takes (trio time) before it reaches the store.
        partitioned: when True every call fails with ConnectionFailed after ``latency``.
        name: for the store's write log.
    """

    def __init__(self, store: ObjectStore, name: str = "client", *, latency: float = 0.0) -> None:
        self.store = store
        self.name = name
        self.latency = latency
        self.partitioned = False
        self.requests = 0

    async def _enter(self) -> None:
        self.requests += 1
        if self.latency:
            await trio.sleep(self.latency)
        if self.partitioned:
            raise errors.ConnectionFailed(f"{self.name}: partitioned")

    async def get(
        self, ref: ResourceRef, name: str, namespace: str | None = None
    ) -> dict[str, Any]:
        await self._enter()
        obj = self.store.objects.get(self.store.key(ref, namespace, name))
        if obj is None:
            raise errors.NotFound(404, "NotFound", f"{ref} {name!r} not found")
        return copy.deepcopy(obj)

    async def create(
        self, ref: ResourceRef, obj: Mapping[str, Any], *, field_validation: str = ""
    ) -> dict[str, Any]:
        await self._enter()
        meta = obj["metadata"]
        key = self.store.key(ref, meta.get("namespace"), meta["name"])
        if key in self.store.objects:
            raise errors.AlreadyExists(409, "AlreadyExists", f"{meta['name']} already exists")
        stored = copy.deepcopy(dict(obj))
        stored["metadata"]["resourceVersion"] = str(next(self.store._versions))
        stored["metadata"]["uid"] = f"uid-{next(self.store._uids)}"
        self.store.objects[key] = stored
        self.store.writes.append((trio.current_time(), self.name, copy.deepcopy(stored)))
        return copy.deepcopy(stored)

    async def replace(
        self, ref: ResourceRef, obj: Mapping[str, Any], *, field_validation: str = ""
    ) -> dict[str, Any]:
        await self._enter()
        meta = obj["metadata"]
        key = self.store.key(ref, meta.get("namespace"), meta["name"])
        current = self.store.objects.get(key)
        if current is None:
            raise errors.NotFound(404, "NotFound", f"{meta['name']} not found")
        if current["metadata"]["resourceVersion"] != meta.get("resourceVersion"):
            raise errors.Conflict(409, "Conflict", "the object has been modified")
        stored = copy.deepcopy(dict(obj))
        stored["metadata"]["resourceVersion"] = str(next(self.store._versions))
        self.store.objects[key] = stored
        self.store.writes.append((trio.current_time(), self.name, copy.deepcopy(stored)))
        return copy.deepcopy(stored)


class ScriptedKube:
    """A fake for informers: scripted list answers and watch streams.

    ``lists``: each entry is ``(items, resourceVersion)`` or an exception to raise.
    ``watches``: each entry is a list of steps: ``(type, obj)`` to yield, a number of
    seconds to sleep, or an exception to raise; after the last step the stream ends. When
    no script is left, a watch blocks forever.
    """

    def __init__(self) -> None:
        self.lists: list[Any] = []
        self.watches: list[list[Any]] = []
        self.list_calls = 0
        self.watch_calls: list[str] = []

    async def list(
        self,
        ref: ResourceRef,
        namespace: str | None = None,
        label_selector: str = "",
        field_selector: str = "",
    ) -> tuple[list[dict[str, Any]], str]:
        self.list_calls += 1
        await trio.lowlevel.checkpoint()
        answer = self.lists.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        items, rv = answer
        return copy.deepcopy(items), rv

    async def watch(
        self,
        ref: ResourceRef,
        namespace: str | None = None,
        resource_version: str = "",
        **kwargs: Any,
    ) -> AsyncGenerator[tuple[str, dict[str, Any]], None]:
        self.watch_calls.append(resource_version)
        if not self.watches:
            await trio.sleep_forever()
        for step in self.watches.pop(0):
            if isinstance(step, BaseException):
                raise step
            if isinstance(step, int | float):
                await trio.sleep(step)
                continue
            kind, obj = step
            yield kind, copy.deepcopy(obj)


def obj(
    name: str, rv: str, uid: str | None = None, namespace: str = "default", **labels: str
) -> dict[str, Any]:
    """A minimal object for informer scripts."""
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "resourceVersion": rv,
            "uid": uid or f"uid-{name}",
            "labels": labels,
        }
    }
