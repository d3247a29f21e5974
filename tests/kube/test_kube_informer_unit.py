"""Informer logic on scripted list/watch answers (autojump_clock, no server)."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.lowlevel
import trio.testing
from kube_fakes import ScriptedKube, obj

from krt.kube import errors
from krt.kube.backoff import Backoff
from krt.kube.informer import EventType, Informer, InformerEvent
from krt.kube.resources import NAMESPACES, PODS


def record(informer: Informer) -> list[tuple[str, str, str | None]]:
    seen: list[tuple[str, str, str | None]] = []

    def handler(event: InformerEvent) -> None:
        old_rv = event.old["metadata"]["resourceVersion"] if event.old else None
        seen.append((event.type.value, event.obj["metadata"]["name"], old_rv))

    informer.add_handler(handler)
    return seen


def informer_for(fake: ScriptedKube, **kwargs: Any) -> Informer:
    return Informer(fake, PODS, backoff=Backoff(base=1.0, maximum=8.0), **kwargs)  # type: ignore[arg-type]


async def test_initial_list_fills_cache_then_started(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake = ScriptedKube()
    fake.lists.append(([obj("a", "1"), obj("b", "2")], "10"))
    informer = informer_for(fake)
    seen = record(informer)
    async with trio.open_nursery() as nursery:
        await nursery.start(informer.run)
        assert informer.synced
        assert [e[:2] for e in seen] == [("ADDED", "a"), ("ADDED", "b")]
        assert informer.get("default", "a") is not None
        assert informer.by_uid("uid-b")["metadata"]["name"] == "b"  # type: ignore[index]
        await trio.lowlevel.checkpoint()
        assert fake.watch_calls == ["10"]  # watches from the list's resourceVersion
        nursery.cancel_scope.cancel()


async def test_watch_events_update_cache_and_bookmarks_move_resume_point(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake = ScriptedKube()
    fake.lists.append(([obj("a", "1")], "10"))
    fake.watches.append(
        [
            ("ADDED", obj("b", "11")),
            ("MODIFIED", obj("a", "12")),
            ("MODIFIED", obj("a", "12")),  # same version again: no event
            ("DELETED", obj("b", "13")),
            ("BOOKMARK", {"metadata": {"resourceVersion": "20"}}),
        ]
    )
    informer = informer_for(fake)
    seen = record(informer)
    async with trio.open_nursery() as nursery:
        await nursery.start(informer.run)
        await trio.sleep(1)
        nursery.cancel_scope.cancel()
    assert seen == [
        ("ADDED", "a", None),
        ("ADDED", "b", None),
        ("MODIFIED", "a", "1"),
        ("DELETED", "b", "11"),
    ]
    assert [o["metadata"]["name"] for o in informer.items()] == ["a"]
    assert fake.watch_calls == ["10", "20"]  # the stream ended; resumed from the bookmark


async def test_gone_relists_and_synthesises_deletes(autojump_clock: trio.testing.MockClock) -> None:
    fake = ScriptedKube()
    fake.lists.append(([obj("keep", "1"), obj("change", "2"), obj("vanish", "3")], "10"))
    fake.watches.append([errors.Gone(410, "Expired", "too old")])
    fake.lists.append(([obj("keep", "1"), obj("change", "7"), obj("new", "8")], "30"))
    informer = informer_for(fake)
    seen = record(informer)
    async with trio.open_nursery() as nursery:
        await nursery.start(informer.run)
        await trio.sleep(1)
        nursery.cancel_scope.cancel()
    assert seen[3:] == [
        ("MODIFIED", "change", "2"),
        ("ADDED", "new", None),
        ("DELETED", "vanish", "3"),
    ]
    assert informer.lists == 2
    assert fake.watch_calls == ["10", "30"]
    assert sorted(o["metadata"]["name"] for o in informer.items()) == ["change", "keep", "new"]


async def test_name_reused_by_new_uid_is_delete_then_add(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake = ScriptedKube()
    fake.lists.append(([obj("p", "1", uid="old")], "10"))
    fake.watches.append([("MODIFIED", obj("p", "5", uid="new"))])
    informer = informer_for(fake)
    events: list[InformerEvent] = []
    informer.add_handler(events.append)
    async with trio.open_nursery() as nursery:
        await nursery.start(informer.run)
        await trio.sleep(1)
        nursery.cancel_scope.cancel()
    assert [(e.type, e.obj["metadata"]["uid"]) for e in events] == [
        (EventType.ADDED, "old"),
        (EventType.DELETED, "old"),
        (EventType.ADDED, "new"),
    ]
    assert informer.by_uid("old") is None
    assert informer.by_uid("new") is not None


async def test_transient_errors_back_off_then_resume(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake = ScriptedKube()
    fake.lists.append(errors.ConnectionFailed("down"))
    fake.lists.append(errors.ServerError(503, "ServiceUnavailable", "busy"))
    fake.lists.append(([], "10"))
    fake.watches.append([errors.ConnectionFailed("reset")])
    informer = informer_for(fake)
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        await nursery.start(informer.run)
        synced_at = trio.current_time() - start
        await trio.sleep(10)
        nursery.cancel_scope.cancel()
    # two failed lists: waits of [0.5, 1] and [1, 2] seconds
    assert 1.5 <= synced_at <= 3.0
    assert fake.list_calls == 3
    assert fake.watch_calls == ["10", "10"]  # resumed from the same version, no re-list


async def test_handler_exception_is_logged_and_ignored(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    fake = ScriptedKube()
    fake.lists.append(([obj("a", "1"), obj("b", "2")], "10"))
    informer = informer_for(fake)

    def broken(event: InformerEvent) -> None:
        raise RuntimeError("handler bug")

    informer.add_handler(broken)
    seen = record(informer)
    async with trio.open_nursery() as nursery:
        await nursery.start(informer.run)
        nursery.cancel_scope.cancel()
    assert [e[1] for e in seen] == ["a", "b"]
    assert "handler bug" in caplog.text


async def test_resync_redelivers_cached_objects(autojump_clock: trio.testing.MockClock) -> None:
    fake = ScriptedKube()
    fake.lists.append(([obj("a", "1")], "10"))
    informer = informer_for(fake, resync_seconds=30)
    resyncs: list[float] = []
    informer.add_handler(
        lambda e: resyncs.append(trio.current_time()) if e.type is EventType.RESYNC else None
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(informer.run)
        await trio.sleep(100)
        nursery.cancel_scope.cancel()
    assert resyncs == [30.0, 60.0, 90.0]


async def test_indexes_follow_changes(autojump_clock: trio.testing.MockClock) -> None:
    fake = ScriptedKube()
    fake.lists.append(([obj("a", "1", pod="p1"), obj("b", "2", pod="p1")], "10"))
    fake.watches.append(
        [
            1,
            ("MODIFIED", obj("a", "11", pod="p2")),
            ("DELETED", obj("b", "12", pod="p1")),
        ]
    )
    informer = informer_for(fake)

    def by_pod(o: dict[str, Any]) -> list[str]:
        pod = o["metadata"]["labels"].get("pod")
        return [pod] if pod else []

    informer.add_index("pod", by_pod)
    async with trio.open_nursery() as nursery:
        await nursery.start(informer.run)
        assert sorted(o["metadata"]["name"] for o in informer.by_index("pod", "p1")) == ["a", "b"]
        await trio.sleep(2)
        assert informer.by_index("pod", "p1") == []
        assert [o["metadata"]["name"] for o in informer.by_index("pod", "p2")] == ["a"]
        # an index added later is built over the current cache
        informer.add_index("name", lambda o: [o["metadata"]["name"]])
        assert len(informer.by_index("name", "a")) == 1
        nursery.cancel_scope.cancel()
    with pytest.raises(KeyError, match="no index"):
        informer.by_index("missing", "x")
    with pytest.raises(ValueError, match="already exists"):
        informer.add_index("pod", by_pod)


async def test_watch_ending_at_once_repeatedly_backs_off(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake = ScriptedKube()
    fake.lists.append(([], "10"))
    fake.watches.extend([] for _ in range(100))  # every stream ends at once, empty
    informer = Informer(fake, PODS, backoff=Backoff(base=1.0, maximum=8.0, jitter=0.0))  # type: ignore[arg-type]
    async with trio.open_nursery() as nursery:
        await nursery.start(informer.run)
        await trio.sleep(30)
        nursery.cancel_scope.cancel()
    # waits of 1, 2, 4, 8, 8 s: watches at t = 0, 1, 3, 7, 15, 23 (not 100 requests)
    assert len(fake.watch_calls) == 6


def test_bad_arguments_are_rejected() -> None:
    fake = ScriptedKube()
    with pytest.raises(ValueError, match="resync_seconds"):
        Informer(fake, PODS, resync_seconds=0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cluster-scoped"):
        Informer(fake, NAMESPACES, namespace="default")  # type: ignore[arg-type]
