"""Watch semantics (issue 3, "list and watch"): replay, 410, BOOKMARK, timeoutSeconds.

The stream logic runs directly on the store under the virtual clock; the HTTP tests check
the chunked wire format, kr8s, and that a disconnect ends the server side.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import trio
from kr8s.asyncio.objects import ConfigMap

from localkube import storage
from localkube.handlers import ListOptions
from localkube.resources import ResourceRegistry
from localkube.selectors import parse_label_selector
from localkube.watching import (
    FUTURE_RESOURCE_VERSION_WAIT,
    WatchRequest,
    run_watch,
    transition,
)

CM_TYPE = ResourceRegistry().lookup("", "v1", "configmaps")
assert CM_TYPE is not None


def cm(name: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "ns", "labels": labels},
    }


class Recorder:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.times: list[float] = []

    async def emit(self, data: bytes) -> None:
        for line in data.splitlines():
            self.events.append(json.loads(line))
            self.times.append(trio.current_time())

    def types(self) -> list[tuple[str, str]]:
        return [(e["type"], e["object"].get("metadata", {}).get("name", "")) for e in self.events]


async def test_initial_state_then_live_events_until_timeout(autojump_clock: trio.abc.Clock) -> None:
    store = storage.open_store(None)
    store.create(("/configmaps", "ns", "a"), cm("a"))
    rec = Recorder()
    request = WatchRequest(rt=CM_TYPE, namespace="ns", options=ListOptions(), timeout=30)
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(run_watch, store, request, rec.emit)
        await trio.sleep(1)
        store.update(("/configmaps", "ns", "a"), cm("a", x="1"))
        store.create(
            ("/configmaps", "other", "b"),
            {**cm("b"), "metadata": {"name": "b", "namespace": "other"}},
        )
    assert rec.types() == [("ADDED", "a"), ("MODIFIED", "a")]
    assert trio.current_time() - start == pytest.approx(30)


async def test_replay_from_resource_version(autojump_clock: trio.abc.Clock) -> None:
    store = storage.open_store(None)
    store.create(("/configmaps", "ns", "a"), cm("a"))
    since = store.revision
    store.create(("/configmaps", "ns", "b"), cm("b"))
    store.delete(("/configmaps", "ns", "a"))
    rec = Recorder()
    options = ListOptions(resource_version=str(since))
    await run_watch(
        store, WatchRequest(rt=CM_TYPE, namespace=None, options=options, timeout=1), rec.emit
    )
    assert rec.types() == [("ADDED", "b"), ("DELETED", "a")]
    assert int(rec.events[1]["object"]["metadata"]["resourceVersion"]) == store.revision


async def test_too_old_resource_version_is_410_error_event(autojump_clock: trio.abc.Clock) -> None:
    store = storage.Store(storage.MemoryBackend(), history_limit=2)
    for i in range(4):
        store.create(("/configmaps", "ns", f"o{i}"), cm(f"o{i}"))
    rec = Recorder()
    options = ListOptions(resource_version="1")
    await run_watch(
        store, WatchRequest(rt=CM_TYPE, namespace=None, options=options, timeout=60), rec.emit
    )
    assert len(rec.events) == 1
    error = rec.events[0]
    assert error["type"] == "ERROR"
    assert error["object"]["kind"] == "Status"
    assert error["object"]["code"] == 410
    assert error["object"]["reason"] == "Expired"
    assert trio.current_time() == pytest.approx(0), "a 410 ends the stream at once"


async def test_bookmarks_at_interval_carry_current_revision(autojump_clock: trio.abc.Clock) -> None:
    store = storage.open_store(None)
    rec = Recorder()
    request = WatchRequest(
        rt=CM_TYPE,
        namespace="ns",
        options=ListOptions(resource_version="0"),
        bookmarks=True,
        timeout=25,
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: run_watch(store, request, rec.emit, bookmark_interval=10))
        await trio.sleep(5)
        store.create(
            ("/configmaps", "elsewhere", "x"),
            {**cm("x"), "metadata": {"name": "x", "namespace": "elsewhere"}},
        )
        store.create(("/configmaps", "ns", "y"), cm("y"))
    kinds = [e["type"] for e in rec.events]
    assert kinds == ["ADDED", "BOOKMARK", "BOOKMARK"]
    bookmark = rec.events[1]["object"]
    assert bookmark["kind"] == "ConfigMap"
    assert bookmark["metadata"]["resourceVersion"] == str(store.revision)
    assert rec.times[1:] == pytest.approx([10, 20])


async def test_send_initial_events_ends_with_annotated_bookmark(
    autojump_clock: trio.abc.Clock,
) -> None:
    store = storage.open_store(None)
    store.create(("/configmaps", "ns", "a"), cm("a"))
    rec = Recorder()
    request = WatchRequest(
        rt=CM_TYPE,
        namespace="ns",
        options=ListOptions(),
        bookmarks=True,
        send_initial_events=True,
        timeout=1,
    )
    await run_watch(store, request, rec.emit)
    assert rec.types()[0] == ("ADDED", "a")
    assert rec.events[1]["type"] == "BOOKMARK"
    assert rec.events[1]["object"]["metadata"]["annotations"] == {
        "k8s.io/initial-events-end": "true"
    }


async def test_label_selector_transitions(autojump_clock: trio.abc.Clock) -> None:
    store = storage.open_store(None)
    key = ("/configmaps", "ns", "a")
    store.create(key, cm("a"))
    rec = Recorder()
    options = ListOptions(labels=parse_label_selector("app=web"))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            run_watch,
            store,
            WatchRequest(rt=CM_TYPE, namespace="ns", options=options, timeout=5),
            rec.emit,
        )
        await trio.sleep(1)
        store.update(key, cm("a", app="web"))  # starts matching
        store.update(key, cm("a", app="web", v="2"))  # still matching
        store.update(key, cm("a", app="db"))  # stops matching
        store.update(key, cm("a", app="db", v="3"))  # still not matching
    assert [e["type"] for e in rec.events] == ["ADDED", "MODIFIED", "DELETED"]


async def test_a_selected_watch_is_not_woken_for_objects_it_does_not_send(
    autojump_clock: trio.abc.Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a selector-filtered watch (runtimed's Runs of its own Pod) is filtered where the store
    # publishes: other objects' writes never reach its queue, so they never wake it
    store = storage.open_store(None)
    rec = Recorder()
    options = ListOptions(labels=parse_label_selector("app=web"))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            run_watch,
            store,
            WatchRequest(rt=CM_TYPE, namespace="ns", options=options, timeout=5),
            rec.emit,
        )
        await trio.sleep(1)
        (subscriber,) = store._subscribers
        queued: list[int] = []
        send_nowait = subscriber.send.send_nowait

        def counted(event: storage.StoredEvent) -> None:
            queued.append(event.revision)
            send_nowait(event)

        monkeypatch.setattr(subscriber.send, "send_nowait", counted)
        for index in range(5):
            store.create(("/configmaps", "ns", f"db{index}"), cm(f"db{index}", app="db"))
        assert queued == []
        store.create(("/configmaps", "ns", "web"), cm("web", app="web"))
        assert queued == [store.revision]
    assert rec.types() == [("ADDED", "web")]


async def test_a_selected_watch_replay_counts_the_events_it_skips(
    autojump_clock: trio.abc.Clock,
) -> None:
    # the initial-events-end BOOKMARK of a replay carries the last replayed revision, also
    # when the events after the last sent one did not match
    store = storage.open_store(None)
    store.create(("/configmaps", "ns", "old"), cm("old", app="web"))
    since = store.revision
    store.create(("/configmaps", "ns", "web"), cm("web", app="web"))
    store.create(("/configmaps", "ns", "db"), cm("db", app="db"))
    rec = Recorder()
    request = WatchRequest(
        rt=CM_TYPE,
        namespace="ns",
        options=ListOptions(labels=parse_label_selector("app=web"), resource_version=str(since)),
        bookmarks=True,
        send_initial_events=True,
        timeout=1,
    )
    await run_watch(store, request, rec.emit)
    assert rec.types()[0] == ("ADDED", "web")
    assert rec.events[1]["type"] == "BOOKMARK"
    assert rec.events[1]["object"]["metadata"]["resourceVersion"] == str(store.revision)


def test_transition_without_selectors_agrees_with_the_matching_path() -> None:
    # the no-selector fast path must give what an always-matching selector gives
    everything = ListOptions(labels=parse_label_selector("absent!=x"))
    assert ListOptions().selects_all
    assert not everything.selects_all
    key = ("/configmaps", "ns", "a")
    events = [
        storage.StoredEvent("ADDED", key, 2, cm("a"), None),
        storage.StoredEvent("MODIFIED", key, 3, cm("a", v="1"), cm("a")),
        storage.StoredEvent("MODIFIED", key, 4, cm("a", v="2"), None),
        storage.StoredEvent("DELETED", key, 5, cm("a", v="2"), cm("a", v="2")),
    ]
    for event in events:
        assert transition(event, ListOptions()) == transition(event, everything)
    assert [transition(e, ListOptions()) for e in events] == [
        "ADDED",
        "MODIFIED",
        "ADDED",
        "DELETED",
    ]


class ChunkRecorder:
    def __init__(self) -> None:
        self.chunks: list[bytes] = []

    async def emit(self, data: bytes) -> None:
        self.chunks.append(data)

    def lines(self, chunk: bytes) -> list[dict[str, Any]]:
        assert chunk.endswith(b"\n")
        return [json.loads(line) for line in chunk.split(b"\n")[:-1]]


async def test_a_burst_of_events_leaves_in_one_chunk_one_event_per_line_in_order(
    autojump_clock: trio.abc.Clock,
) -> None:
    store = storage.open_store(None)
    rec = ChunkRecorder()
    request = WatchRequest(
        rt=CM_TYPE, namespace="ns", options=ListOptions(), bookmarks=True, timeout=25
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: run_watch(store, request, rec.emit, bookmark_interval=10))
        await trio.sleep(1)
        # five writes with no checkpoint between them: one chunk, not five
        for n in range(5):
            store.create(("/configmaps", "ns", f"c{n}"), cm(f"c{n}"))
        await trio.sleep(1)
        store.update(("/configmaps", "ns", "c0"), cm("c0", v="1"))
    first, second, *rest = rec.chunks
    burst = rec.lines(first)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in burst] == [
        ("ADDED", f"c{n}") for n in range(5)
    ]
    revisions = [int(e["object"]["metadata"]["resourceVersion"]) for e in burst]
    assert revisions == sorted(revisions)
    assert [e["type"] for e in rec.lines(second)] == ["MODIFIED"]
    # the bookmarks that follow still come one per line, resuming after the last event
    bookmarks = [e for chunk in rest for e in rec.lines(chunk)]
    assert bookmarks
    assert {e["type"] for e in bookmarks} == {"BOOKMARK"}
    assert int(bookmarks[0]["object"]["metadata"]["resourceVersion"]) == store.revision


async def _lines(lines: Any, count: int) -> list[dict[str, Any]]:
    found = []
    while len(found) < count:
        line = await lines.__anext__()
        if line.strip():
            found.append(json.loads(line))
    return found


async def test_http_watch_from_resource_version_streams_chunked_lines(
    admin_http: httpx.AsyncClient,
) -> None:
    cms = "/api/v1/namespaces/default/configmaps"
    first = (await admin_http.post(cms, json={"metadata": {"name": "a"}})).json()
    await admin_http.post(cms, json={"metadata": {"name": "b"}})
    params = {"watch": "true", "resourceVersion": first["metadata"]["resourceVersion"]}
    with trio.fail_after(5):
        async with admin_http.stream("GET", cms, params=params) as response:
            assert response.status_code == 200
            assert response.headers.get("transfer-encoding") == "chunked"
            lines = response.aiter_lines()
            head = await _lines(lines, 1)
            await admin_http.delete(f"{cms}/a")
            tail = await _lines(lines, 1)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in head + tail] == [
        ("ADDED", "b"),
        ("DELETED", "a"),
    ]


async def test_http_watch_too_old_is_error_event(
    admin_http: httpx.AsyncClient, start_apiserver: Any
) -> None:
    from localkube.apiserver import ApiServerConfig
    from tests.localkube.conftest import client_for

    async with (
        start_apiserver(ApiServerConfig(history_limit=5)) as handle,
        client_for(handle) as client,
    ):
        cms = "/api/v1/namespaces/default/configmaps"
        for i in range(10):
            await client.post(cms, json={"metadata": {"name": f"o{i}"}})
        with trio.fail_after(5):
            async with client.stream(
                "GET", cms, params={"watch": "1", "resourceVersion": "2"}
            ) as response:
                events = [json.loads(line) async for line in response.aiter_lines() if line.strip()]
        assert response.status_code == 200
        assert [e["type"] for e in events] == ["ERROR"]
        assert events[0]["object"]["code"] == 410
        listing = await client.get(
            cms, params={"resourceVersion": "2", "resourceVersionMatch": "Exact"}
        )
        assert listing.status_code == 410


async def test_http_watch_timeout_seconds_ends_stream(admin_http: httpx.AsyncClient) -> None:
    with trio.fail_after(5):
        async with admin_http.stream(
            "GET", "/api/v1/namespaces", params={"watch": "true", "timeoutSeconds": "0"}
        ) as response:
            body = [line async for line in response.aiter_lines()]
    assert body == [], "timeoutSeconds=0 ends the watch before any event"


async def test_kr8s_watch_receives_modification(kr8s_api: Any) -> None:
    cm_obj = await ConfigMap(
        {"metadata": {"name": "w2", "namespace": "default"}, "data": {"v": "1"}}, api=kr8s_api
    )
    await cm_obj.create()
    since = cm_obj.metadata["resourceVersion"]
    await cm_obj.patch({"data": {"v": "2"}})
    with trio.fail_after(5):
        async for event_type, obj in kr8s_api.watch("configmaps", namespace="default", since=since):
            assert (event_type, obj.name, obj.raw["data"]["v"]) == ("MODIFIED", "w2", "2")
            break


async def test_list_paging_and_selectors(admin_http: httpx.AsyncClient) -> None:
    cms = "/api/v1/namespaces/default/configmaps"
    for i in range(5):
        await admin_http.post(
            cms, json={"metadata": {"name": f"p{i}", "labels": {"tier": "a" if i % 2 else "b"}}}
        )
    page = (await admin_http.get(cms, params={"limit": "2", "labelSelector": "tier"})).json()
    names = [i["metadata"]["name"] for i in page["items"]]
    assert names == ["p0", "p1"]
    assert page["metadata"]["remainingItemCount"] == 3
    token = page["metadata"]["continue"]
    page2 = (
        await admin_http.get(cms, params={"limit": "2", "labelSelector": "tier", "continue": token})
    ).json()
    assert [i["metadata"]["name"] for i in page2["items"]] == ["p2", "p3"]
    assert page2["metadata"]["resourceVersion"] == page["metadata"]["resourceVersion"]
    only_a = (await admin_http.get(cms, params={"labelSelector": "tier in (a)"})).json()["items"]
    assert [i["metadata"]["name"] for i in only_a] == ["p1", "p3"]
    named = (
        await admin_http.get(
            "/api/v1/configmaps",
            params={"fieldSelector": "metadata.name=p4,metadata.namespace=default"},
        )
    ).json()
    assert [i["metadata"]["name"] for i in named["items"]] == ["p4"]
    bad = await admin_http.get(cms, params={"fieldSelector": "spec.nodeName=x"})
    assert bad.status_code == 400
    # kube-apiserver's exact wording (kubectl prints it after "Unable to find ...")
    assert bad.json()["message"] == "field label not supported: spec.nodeName"
    pods = await admin_http.get(
        "/api/v1/pods", params={"fieldSelector": "spec.nodeName=n1,status.phase!=Running"}
    )
    assert pods.status_code == 200


async def test_list_resource_version_match(admin_http: httpx.AsyncClient) -> None:
    cms = "/api/v1/namespaces/default/configmaps"
    await admin_http.post(cms, json={"metadata": {"name": "x"}, "data": {"v": "1"}})
    rv = (await admin_http.get(cms)).json()["metadata"]["resourceVersion"]
    await admin_http.patch(
        f"{cms}/x",
        content=b'{"data":{"v":"2"}}',
        headers={"Content-Type": "application/merge-patch+json"},
    )
    exact = (
        await admin_http.get(cms, params={"resourceVersion": rv, "resourceVersionMatch": "Exact"})
    ).json()
    assert exact["metadata"]["resourceVersion"] == rv
    assert [i["data"]["v"] for i in exact["items"] if i["metadata"]["name"] == "x"] == ["1"]
    future = await admin_http.get(
        cms, params={"resourceVersion": str(int(rv) + 1000), "resourceVersionMatch": "NotOlderThan"}
    )
    assert future.status_code == 504
    bad = await admin_http.get(cms, params={"resourceVersionMatch": "Exact"})
    assert bad.status_code == 400


async def test_watch_from_a_future_resource_version_skips_until_it(
    autojump_clock: trio.abc.Clock,
) -> None:
    store = storage.open_store(None)
    rec = Recorder()
    future = store.revision + 2
    request = WatchRequest(
        rt=CM_TYPE, namespace="ns", options=ListOptions(resource_version=str(future)), timeout=5
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(run_watch, store, request, rec.emit)
        await trio.sleep(1)
        for name in ("a", "b", "c"):
            store.create(("/configmaps", "ns", name), cm(name))
    assert rec.types() == [("ADDED", "c")]


async def test_watch_from_an_unreached_future_resource_version_fails_after_3_s(
    autojump_clock: trio.abc.Clock,
) -> None:
    # e.g. a client holding a revision from before an in-memory server restarted: it must
    # be told (and re-list) rather than silently miss every event up to that revision
    store = storage.open_store(None)
    store.create(("/configmaps", "ns", "a"), cm("a"))
    future = store.revision + 100
    request = WatchRequest(
        rt=CM_TYPE, namespace="ns", options=ListOptions(resource_version=str(future)), timeout=30
    )
    rec = Recorder()
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(run_watch, store, request, rec.emit)
        await trio.sleep(1)
        store.create(("/configmaps", "ns", "b"), cm("b"))
    assert trio.current_time() - start == pytest.approx(FUTURE_RESOURCE_VERSION_WAIT)
    [event] = rec.events
    assert event["type"] == "ERROR"
    status = event["object"]
    assert (status["code"], status["reason"]) == (504, "Timeout")
    assert status["message"] == (
        f"Timeout: Too large resource version: {future}, current: {store.revision}"
    )
    assert status["details"]["causes"][0]["reason"] == "ResourceVersionTooLarge"
