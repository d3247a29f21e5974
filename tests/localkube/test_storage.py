"""The object store: one global revision, history/410, fan-out, SQLite durability."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
import trio

from localkube import storage
from localkube.storage import AlreadyExists, Conflict, Gone, NotFound, Store, open_store


def obj(name: str, **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "ns"},
        **extra,
    }


def key(name: str) -> storage.ObjectKey:
    return ("/configmaps", "ns", name)


def test_revisions_are_global_and_increasing() -> None:
    store = open_store(None)
    a = store.create(key("a"), obj("a"))
    b = store.create(("/secrets", "ns", "b"), obj("b"))
    a2 = store.update(key("a"), obj("a", data={"x": "1"}))
    revs = [int(o["metadata"]["resourceVersion"]) for o in (a, b, a2)]
    assert revs == sorted(revs)
    assert len(set(revs)) == 3
    assert store.revision == revs[-1]


def test_create_update_delete_preconditions() -> None:
    store = open_store(None)
    created = store.create(key("a"), obj("a"))
    with pytest.raises(AlreadyExists):
        store.create(key("a"), obj("a"))
    with pytest.raises(Conflict):
        store.update(
            key("a"), obj("a"), expected_revision=int(created["metadata"]["resourceVersion"]) + 5
        )
    with pytest.raises(NotFound):
        store.update(key("zz"), obj("zz"))
    with pytest.raises(Conflict):
        store.delete(key("a"), expected_revision=999)
    final = store.delete(key("a"))
    assert int(final["metadata"]["resourceVersion"]) == store.revision
    assert store.get(*key("a")) is None


def test_an_update_that_changes_nothing_is_not_written() -> None:
    """As in Kubernetes: same resourceVersion back, no new revision, no watch event."""
    store = open_store(None)
    created = store.create(key("a"), obj("a", data={"x": "1"}))
    revision = store.revision
    same = obj("a", data={"x": "1"})
    same["metadata"]["resourceVersion"] = created["metadata"]["resourceVersion"]
    assert store.update(key("a"), same) == created
    unconditional = obj("a", data={"x": "1"})  # no resourceVersion at all
    assert store.update(key("a"), unconditional)["metadata"]["resourceVersion"] == str(revision)
    assert store.revision == revision
    assert [e.type for e in store.history_since(revision - 1, "/configmaps", None)] == ["ADDED"]
    changed = store.update(key("a"), obj("a", data={"x": "2"}))
    assert int(changed["metadata"]["resourceVersion"]) == revision + 1
    labelled = obj("a", data={"x": "2"})
    labelled["metadata"]["labels"] = {"k": "v"}
    assert int(store.update(key("a"), labelled)["metadata"]["resourceVersion"]) == revision + 2


def test_history_replay_and_gone_after_compaction() -> None:
    store = Store(storage.MemoryBackend(), history_limit=3)
    for i in range(5):
        store.create(key(f"o{i}"), obj(f"o{i}"))
    # revisions 1..5; history keeps 3..5, so replay from 2 works and from 1 is Gone
    assert [e.revision for e in store.history_since(2, "/configmaps", None)] == [3, 4, 5]
    with pytest.raises(Gone):
        store.history_since(1, "/configmaps", None)


def test_list_at_exact_revision_rolls_back() -> None:
    store = open_store(None)
    store.create(key("a"), obj("a", data={"v": "1"}))
    rev = store.revision
    store.update(key("a"), obj("a", data={"v": "2"}))
    store.create(key("b"), obj("b"))
    store.delete(key("a"))
    past = store.list_at("/configmaps", None, rev)
    assert [(o["metadata"]["name"], o["data"]) for o in past] == [("a", {"v": "1"})]
    with pytest.raises(Conflict):
        store.list_at("/configmaps", None, store.revision + 1)


async def test_subscribers_get_events_and_slow_ones_are_closed() -> None:
    store = Store(storage.MemoryBackend(), watch_buffer=2)
    with store.subscribe("/configmaps") as (_, fast), store.subscribe("/configmaps") as (_, slow):
        store.create(key("a"), obj("a"))
        assert (await fast.receive()).type == "ADDED"
        store.create(key("b"), obj("b"))
        store.create(key("c"), obj("c"))
        assert [(await fast.receive()).key[2] for _ in range(2)] == ["b", "c"]
        # slow never read: 3 events > buffer 2, so it was closed after what fitted
        received = [e.key[2] async for e in slow]
        assert received == ["a", "b"]


def test_events_reach_their_kind_and_every_kind_subscribers_only() -> None:
    store = Store(storage.MemoryBackend())
    secret_key = ("/secrets", "ns", "s")
    with (
        store.subscribe("/configmaps") as (_, configmaps),
        store.subscribe("/configmaps", "other") as (_, other_namespace),
        store.subscribe("/secrets") as (_, secrets),
        store.subscribe(None) as (_, everything),
    ):
        store.create(key("a"), obj("a"))
        store.create(secret_key, {"metadata": {"name": "s", "namespace": "ns"}})
        assert configmaps.receive_nowait().key == key("a")
        assert secrets.receive_nowait().key == secret_key
        assert [everything.receive_nowait().key for _ in range(2)] == [key("a"), secret_key]
        for channel in (configmaps, secrets, everything, other_namespace):
            with pytest.raises(trio.WouldBlock):
                channel.receive_nowait()
        # a deleted kind ends its own watches only; a closed subscription gets nothing more
        store.end_watches("/configmaps")
        with pytest.raises(trio.EndOfChannel):
            configmaps.receive_nowait()
        store.create(key("b"), obj("b"))
        assert everything.receive_nowait().key == key("b")
        with pytest.raises(trio.WouldBlock):
            secrets.receive_nowait()
    store.create(key("c"), obj("c"))  # no subscribers left: nothing to deliver to


def test_event_line_is_encoded_once_and_shared() -> None:
    store = open_store(None)
    with store.subscribe(None) as (_, channel):
        store.create(key("a"), obj("a"))
        event = channel.receive_nowait()
    first = event.line()
    assert event.line() is first
    assert first.startswith(b'{"type":"ADDED","object":{"apiVersion":"v1"')
    assert b'"apiVersion":"v2"' in event.line("v2")


def test_event_line_for_another_event_type_reuses_the_object_bytes() -> None:
    """A selector-filtered watcher sees a MODIFIED object that starts matching as ADDED."""
    store = open_store(None)
    store.create(key("a"), obj("a"))
    with store.subscribe(None) as (_, channel):
        store.update(key("a"), {**obj("a"), "data": {"x": "1"}})
        event = channel.receive_nowait()
    assert event.type == "MODIFIED"
    added = event.line(None, "ADDED")
    assert added == b'{"type":"ADDED","object":' + event.encoded + b"}\n"
    assert event.line(None, "ADDED") is added
    assert event.line().startswith(b'{"type":"MODIFIED","object":')
    assert event.line("v2", "DELETED").startswith(b'{"type":"DELETED","object":{"apiVersion":"v2"')


def test_committed_encoding_is_reused_for_the_watch_line_and_the_response() -> None:
    store = open_store(None)
    with store.subscribe(None) as (_, channel):
        created = store.create(key("a"), obj("a"))
        event = channel.receive_nowait()
    assert event.encoded == storage.encode(created)
    assert store.encoded(created) is event.encoded
    assert event.line() == b'{"type":"ADDED","object":' + event.encoded + b"}\n"
    # only the object of the last write, by identity: an equal copy or an older one is not
    assert store.encoded(dict(created)) is None
    store.create(key("b"), obj("b"))
    assert store.encoded(created) is None
    deleted = store.delete(key("b"))
    assert store.encoded(deleted) is None


async def test_receive_batch_takes_every_queued_event_then_ends() -> None:
    store = open_store(None)
    with store.subscribe(None) as (_, channel):
        for name in ("a", "b", "c"):
            store.create(key(name), obj(name))
        assert [e.key[2] for e in await storage.receive_batch(channel)] == ["a", "b", "c"]
        store.create(key("d"), obj("d"))
        store.close()  # closes the subscription: queued events first, then the end
        assert [e.key[2] for e in await storage.receive_batch(channel)] == ["d"]
        with pytest.raises(trio.EndOfChannel):
            await storage.receive_batch(channel)


def test_sqlite_survives_reopen_and_keeps_revisions(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.create(key("a"), obj("a"))
    store.update(key("a"), obj("a", data={"x": "1"}))
    rev = store.revision
    store.close()
    again = open_store(tmp_path)
    assert again.get(*key("a"))["data"] == {"x": "1"}  # type: ignore[index]
    assert again.revision == rev
    created = again.create(key("b"), obj("b"))
    assert int(created["metadata"]["resourceVersion"]) == rev + 1
    # history does not survive a restart: replay from before it is Gone, from now is fine
    with pytest.raises(Gone):
        again.history_since(rev - 1, None, None)
    assert [e.key[2] for e in again.history_since(rev, None, None)] == ["b"]
    again.close()


class _FailingBackend(storage.MemoryBackend):
    def commit(self, revision: int, puts: Any, deletes: Any) -> None:
        raise storage.StoreError("disk full")


def test_failed_write_changes_nothing() -> None:
    store = Store(_FailingBackend())
    with store.subscribe(None) as (_, channel):
        with pytest.raises(storage.StoreError):
            store.create(key("a"), obj("a"))
        assert store.get(*key("a")) is None
        assert store.revision == 0
        with pytest.raises(trio.WouldBlock):
            channel.receive_nowait()


def test_sqlite_transaction_rolls_back_on_error(tmp_path: Path) -> None:
    backend = storage.SqliteBackend(tmp_path / "db")
    backend.commit(1, [(key("a"), b'{"v":1}')], [])
    with pytest.raises(storage.StoreError):
        # the second row violates NOT NULL: the whole transaction, first row included, rolls back
        backend.commit(2, [(key("b"), b'{"v":2}'), (("/x", "ns", None), b"{}")], [])  # type: ignore[list-item]
    revision, objects = backend.load()
    assert revision == 1
    assert [k for k, _ in objects] == [key("a")]
    backend.close()
    with sqlite3.connect(tmp_path / "db") as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_one_process_at_a_time_per_state_dir(tmp_path: Path) -> None:
    first = open_store(tmp_path)
    with pytest.raises(storage.StoreError, match="in use by another localkube"):
        open_store(tmp_path)
    first.close()
    open_store(tmp_path).close()


def test_sqlite_single_put_is_one_statement_and_revisions_survive(tmp_path: Path) -> None:
    backend = storage.SqliteBackend(tmp_path / "db")
    statements: list[str] = []
    backend._conn.set_trace_callback(statements.append)
    backend.commit(1, [(key("a"), b'{"v":1}')], [])
    assert len(statements) == 1
    assert statements[0].startswith("INSERT INTO objects")
    backend.commit(2, [(key("b"), b'{"v":2}')], [])
    # an update rewrites the row in place (an upsert: same rowid), not delete + insert
    rowid = "SELECT rowid, data, rev FROM objects WHERE name='a'"
    (before, _, _) = backend._conn.execute(rowid).fetchone()
    backend.commit(3, [(key("a"), b'{"v":3}')], [])
    assert backend._conn.execute(rowid).fetchone() == (before, b'{"v":3}', 3)
    backend.close()
    # the revision of a put lives in its row; of a deletion, in meta: load takes the larger
    backend = storage.SqliteBackend(tmp_path / "db")
    assert backend.load()[0] == 3
    backend.commit(4, [], [key("b")])
    backend.close()
    backend = storage.SqliteBackend(tmp_path / "db")
    revision, objects = backend.load()
    assert (revision, objects) == (4, [(key("a"), {"v": 3})])
    backend.commit(5, [(key("a"), b'{"v":5}')], [])
    backend.close()
    backend = storage.SqliteBackend(tmp_path / "db")
    assert backend.load() == (5, [(key("a"), {"v": 5})])
    backend.close()


def test_sqlite_database_without_revision_column_is_upgraded(tmp_path: Path) -> None:
    with sqlite3.connect(tmp_path / "db") as conn:
        conn.execute(
            "CREATE TABLE objects (rkey TEXT NOT NULL, namespace TEXT NOT NULL,"
            " name TEXT NOT NULL, data BLOB NOT NULL, PRIMARY KEY (rkey, namespace, name))"
        )
        conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL)")
        conn.execute("INSERT INTO objects VALUES ('/configmaps', 'ns', 'a', '{\"v\":1}')")
        conn.execute("INSERT INTO meta VALUES ('revision', 7)")
    conn.close()
    backend = storage.SqliteBackend(tmp_path / "db")
    assert backend.load() == (7, [(key("a"), {"v": 1})])
    backend.commit(8, [(key("b"), b'{"v":8}')], [])
    backend.close()
    backend = storage.SqliteBackend(tmp_path / "db")
    assert backend.load()[0] == 8
    backend.close()


def test_subscriber_gets_only_the_events_it_accepts_replayed_and_live() -> None:
    store = open_store(None)
    store.create(key("a"), obj("a"))
    store.create(key("b"), obj("b"))
    start = store.revision

    def deletions(event: storage.StoredEvent) -> bool:
        return event.type == "DELETED"

    store.delete(key("a"))
    with store.subscribe(None, since=start - 2, accept=deletions) as (replay, channel):
        assert [(e.type, e.key[2]) for e in replay] == [("DELETED", "a")]
        store.update(key("b"), {**obj("b"), "data": {"x": "1"}})
        store.delete(key("b"))
        assert [(e.type, e.key[2]) for e in [channel.receive_nowait()]] == [("DELETED", "b")]
        with pytest.raises(trio.WouldBlock):
            channel.receive_nowait()
