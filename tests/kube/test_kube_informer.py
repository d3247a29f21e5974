"""Informer against localkube: real list/watch, bookmarks, and a forced 410 Gone re-list."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from typing import Any

import trio
from conftest import WIDGETS, install_widgets, widget

from krt.kube import errors
from krt.kube.backoff import Backoff
from krt.kube.client import Kube
from krt.kube.informer import EventType, Informer, InformerEvent
from krt.kube.resources import ResourceRef


class Recorder:
    """Collects informer events and lets a test wait for a condition on them."""

    def __init__(self) -> None:
        self.events: list[InformerEvent] = []
        self._changed = trio.Event()

    def __call__(self, event: InformerEvent) -> None:
        self.events.append(event)
        self._changed.set()

    def names(self, kind: EventType) -> list[str]:
        return [e.obj["metadata"]["name"] for e in self.events if e.type is kind]

    async def wait_for(self, predicate: Callable[[], bool]) -> None:
        with trio.fail_after(10):
            while not predicate():
                self._changed = trio.Event()
                await self._changed.wait()


async def test_informer_sees_create_update_delete(kube: Kube, widgets: ResourceRef) -> None:
    await kube.create(WIDGETS, widget("before", size=1))
    informer = Informer(kube, WIDGETS, namespace="default")
    recorder = Recorder()
    informer.add_handler(recorder)
    async with trio.open_nursery() as nursery:
        await nursery.start(informer.run)
        assert informer.synced
        assert recorder.names(EventType.ADDED) == ["before"]

        created = await kube.create(WIDGETS, widget("w1", size=1))
        await recorder.wait_for(lambda: "w1" in recorder.names(EventType.ADDED))
        assert informer.by_uid(created["metadata"]["uid"]) is not None

        await kube.patch(WIDGETS, "w1", "default", {"spec": {"size": 2}})
        await recorder.wait_for(lambda: "w1" in recorder.names(EventType.MODIFIED))
        modified = [e for e in recorder.events if e.type is EventType.MODIFIED][0]
        assert modified.obj["spec"]["size"] == 2
        assert modified.old is not None
        assert modified.old["spec"]["size"] == 1
        assert informer.get("default", "w1")["spec"]["size"] == 2  # type: ignore[index]

        await kube.delete(WIDGETS, "w1", "default")
        await recorder.wait_for(lambda: "w1" in recorder.names(EventType.DELETED))
        assert informer.get("default", "w1") is None
        nursery.cancel_scope.cancel()


async def test_informer_label_selector_filters(kube: Kube, widgets: ResourceRef) -> None:
    informer = Informer(kube, WIDGETS, namespace="default", label_selector="team=a")
    recorder = Recorder()
    informer.add_handler(recorder)
    async with trio.open_nursery() as nursery:
        await nursery.start(informer.run)
        other = widget("b")
        other["metadata"]["labels"] = {"team": "b"}
        mine = widget("a")
        mine["metadata"]["labels"] = {"team": "a"}
        await kube.create(WIDGETS, other)
        await kube.create(WIDGETS, mine)
        await recorder.wait_for(lambda: "a" in recorder.names(EventType.ADDED))
        assert [o["metadata"]["name"] for o in informer.items()] == ["a"]
        nursery.cancel_scope.cancel()


class OutageKube:
    """Wraps a real Kube: the first watch breaks at once, the second waits for ``resume``.

    While the watch is down the test changes more objects than the server's watch history
    keeps, so the informer's resume point is compacted and the server answers 410.
    """

    def __init__(self, kube: Kube) -> None:
        self._kube = kube
        self.watch_calls: list[str] = []
        self.outage = trio.Event()
        self.resume = trio.Event()
        self.gone = 0

    async def list(self, *args: Any, **kwargs: Any) -> Any:
        return await self._kube.list(*args, **kwargs)

    async def watch(
        self,
        ref: ResourceRef,
        namespace: str | None = None,
        resource_version: str = "",
        **kwargs: Any,
    ) -> AsyncGenerator[tuple[str, dict[str, Any]], None]:
        self.watch_calls.append(resource_version)
        if len(self.watch_calls) == 1:
            self.outage.set()
            raise errors.ConnectionFailed("connection reset (simulated)")
        if len(self.watch_calls) == 2:
            await self.resume.wait()
        try:
            async with aclosing(
                self._kube.watch(ref, namespace, resource_version, **kwargs)
            ) as events:
                async for event in events:
                    yield event
        except errors.Gone:
            self.gone += 1
            raise


async def test_informer_relists_after_410_and_synthesises_deletes(start_kube: Any) -> None:
    async with start_kube(history_limit=3) as kube:
        await install_widgets(kube)
        for name in ("keep", "change", "vanish"):
            await kube.create(WIDGETS, widget(name, size=1))
        outage = OutageKube(kube)
        informer = Informer(
            outage,
            WIDGETS,
            namespace="default",  # type: ignore[arg-type]
            backoff=Backoff(base=0.01, maximum=0.05),
        )
        recorder = Recorder()
        informer.add_handler(recorder)
        async with trio.open_nursery() as nursery:
            await nursery.start(informer.run)
            with trio.fail_after(10):
                await outage.outage.wait()
            # while the watch is down: more changes than the history keeps
            await kube.patch(WIDGETS, "change", "default", {"spec": {"size": 2}})
            await kube.delete(WIDGETS, "vanish", "default")
            for i in range(5):
                await kube.create(WIDGETS, widget(f"new{i}"))
            outage.resume.set()
            await recorder.wait_for(lambda: "vanish" in recorder.names(EventType.DELETED))
            await recorder.wait_for(lambda: len(informer.items()) == 7)
            assert outage.gone == 1
            assert informer.lists == 2
            deleted = [e for e in recorder.events if e.type is EventType.DELETED]
            assert [e.obj["metadata"]["name"] for e in deleted] == ["vanish"]
            assert informer.get("default", "change")["spec"]["size"] == 2  # type: ignore[index]
            # and the informer is live again after the re-list
            await kube.create(WIDGETS, widget("after"))
            await recorder.wait_for(lambda: "after" in recorder.names(EventType.ADDED))
            nursery.cancel_scope.cancel()
        assert "keep" not in recorder.names(EventType.MODIFIED)
