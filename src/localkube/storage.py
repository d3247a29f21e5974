"""The object store: one global revision, durable backends, event history and watch fan-out.

Design:

* Every object lives in an in-memory index (``storage key -> (namespace, name) -> object``)
  that serves all reads. A write first commits to the :class:`Backend` (one SQLite
  transaction, so a crash never leaves a half-applied write) and only then changes the index
  and publishes the event, so the index never runs ahead of what is durable.
* One revision counter for the whole store, persisted with every write, so
  ``resourceVersion`` keeps increasing across restarts.
* A bounded history of events (``history_limit``) serves watch replay from a
  resourceVersion and exact-revision lists; asking for a revision older than the history
  raises :class:`Gone` (HTTP 410), like a compacted etcd.
* Watch fan-out: each subscriber gets a bounded trio memory channel; publishing never
  blocks the writer. A subscriber that falls ``buffer`` events behind is closed (its
  stream ends and the client re-watches), as kube-apiserver drops slow watchers.
  :meth:`StoredEvent.line` encodes the wire line once per event and apiVersion and shares
  the bytes across watchers.

One process at a time owns a state directory (an exclusive ``flock`` beside the database),
so two servers never interleave writes.

All methods are synchronous: trio runs one task at a time, so a check-and-set inside one
call is atomic. SQLite runs in WAL mode with ``synchronous=NORMAL`` (no fsync per commit;
a commit takes tens of microseconds), which is why it is called on the event loop rather
than through a worker thread.
"""

from __future__ import annotations

import builtins
import fcntl
import json
import os
import sqlite3
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import trio

ObjectKey = tuple[str, str, str]
"""``(storage_key, namespace, name)``; namespace is ``""`` for cluster-scoped objects."""


class StoreError(Exception):
    """Base class of store failures."""


class NotFound(StoreError):
    """The object does not exist."""


class AlreadyExists(StoreError):
    """An object with that key exists."""


class Conflict(StoreError):
    """A precondition (resourceVersion) did not hold."""


class Gone(StoreError):
    """The requested revision is older than the retained event history."""


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, check_circular=False)
"""Built once: ``json.dumps`` with these options builds a new encoder on every call.

No circular-reference check (a dict of every container's id, per call: ~10% of the
encoding): what is encoded is decoded JSON or built from it, never circular."""


def encode(obj: Any) -> bytes:
    """Encode a JSON value compactly (the one encoder used for storage and the wire)."""
    return _ENCODER.encode(obj).encode()


@dataclass
class StoredEvent:
    """A change to one object, as kept in history and sent to watchers.

    Attributes:
        type: ``ADDED``, ``MODIFIED`` or ``DELETED``.
        key: the object's :data:`ObjectKey`.
        revision: the store revision of the change (the object's resourceVersion).
        obj: the object after the change (for DELETED: the last state, with ``revision``).
        old: the object before the change (None for ADDED).
        encoded: ``obj`` as committed (:func:`encode`), reused for the watch line and the
            write's response; None when not encoded (DELETED).
    """

    type: str
    key: ObjectKey
    revision: int
    obj: dict[str, Any]
    old: dict[str, Any] | None
    encoded: bytes | None = field(default=None, repr=False)
    _lines: dict[tuple[str, str], bytes] = field(default_factory=dict, repr=False)

    def line(self, api_version: str | None = None, event_type: str | None = None) -> bytes:
        """Return the watch line ``{"type":...,"object":...}\\n``, encoded once and cached.

        Args:
            api_version: rewrite ``apiVersion`` (serving another version of the kind);
                None keeps the stored one.
            event_type: the type a watcher sees, when not :attr:`type` (an object that
                starts or stops matching a selector arrives as ADDED or DELETED); the
                object's bytes are the same.
        """
        version = api_version or self.obj.get("apiVersion", "")
        kind = event_type or self.type
        cached = self._lines.get((kind, version))
        if cached is None:
            obj = self.obj
            data = self.encoded
            if obj.get("apiVersion") != version:
                obj = {**obj, "apiVersion": version}
                data = None
            if data is None:
                data = encode(obj)
            cached = b'{"type":"' + kind.encode() + b'","object":' + data + b"}\n"
            self._lines[(kind, version)] = cached
        return cached


class Backend(Protocol):
    """Durable storage under the store. Writes are atomic: all of them or none."""

    def load(self) -> tuple[int, list[tuple[ObjectKey, dict[str, Any]]]]:
        """Return the last committed revision and every stored object."""
        ...

    def commit(
        self,
        revision: int,
        puts: list[tuple[ObjectKey, bytes]],
        deletes: list[ObjectKey],
    ) -> None:
        """Durably apply ``puts`` (encoded objects) and ``deletes`` and record ``revision``.

        Raises:
            StoreError: the write failed; nothing was applied.
        """
        ...

    def close(self) -> None:
        """Release resources."""
        ...


class MemoryBackend:
    """A backend that keeps nothing: the store's index is the only copy (tests)."""

    def load(self) -> tuple[int, list[tuple[ObjectKey, dict[str, Any]]]]:
        """Return revision 0 and no objects."""
        return 0, []

    def commit(
        self,
        revision: int,
        puts: list[tuple[ObjectKey, bytes]],
        deletes: list[ObjectKey],
    ) -> None:
        """Do nothing (the in-memory index holds the data)."""

    def close(self) -> None:
        """Do nothing."""


# An upsert rewrites an existing row in place (same rowid: one table page and no index
# change), where INSERT OR REPLACE deletes the row and appends a new one (table pages for
# both and the primary-key index): about a third less CPU per write and fewer WAL pages.
_PUT = (
    "INSERT INTO objects (rkey, namespace, name, data, rev) VALUES (?, ?, ?, ?, ?)"
    " ON CONFLICT (rkey, namespace, name) DO UPDATE SET data=excluded.data, rev=excluded.rev"
)


class SqliteBackend:
    """SQLite storage in one file, WAL mode, ``synchronous=NORMAL``, exclusive locking.

    Each row keeps the revision that wrote it, and ``meta`` the revision of the last write
    that was not a single put (deletions); the store's revision is the larger of the two,
    so the common write, one object put, is a single SQLite statement.

    One server at a time: an exclusive ``flock`` on ``<path>.lock`` is held while open.

    Args:
        path: the database file (created with its tables if missing).

    Raises:
        StoreError: another process holds the database.
        sqlite3.Error: the file is not a usable database.
    """

    def __init__(self, path: Path) -> None:
        self._lock = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock)
            raise StoreError(f"{path} is in use by another localkube process") from None
        try:
            self._conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
            # one process owns the database (the flock above): exclusive locking skips the
            # file-lock syscalls of every transaction and the WAL's shared-memory index
            self._conn.execute("PRAGMA locking_mode=EXCLUSIVE")
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS objects (rkey TEXT NOT NULL, namespace TEXT NOT NULL,"
                " name TEXT NOT NULL, data BLOB NOT NULL, rev INTEGER NOT NULL DEFAULT 0,"
                " PRIMARY KEY (rkey, namespace, name))"
            )
            columns = [row[1] for row in self._conn.execute("PRAGMA table_info(objects)")]
            if "rev" not in columns:  # a database from before the column
                self._conn.execute("ALTER TABLE objects ADD COLUMN rev INTEGER NOT NULL DEFAULT 0")
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL)"
            )
        except sqlite3.Error:
            os.close(self._lock)
            raise

    def load(self) -> tuple[int, list[tuple[ObjectKey, dict[str, Any]]]]:
        """Return the stored revision and objects."""
        row = self._conn.execute("SELECT value FROM meta WHERE key='revision'").fetchone()
        latest_put = self._conn.execute("SELECT max(rev) FROM objects").fetchone()
        revision = max(int(row[0]) if row else 0, int(latest_put[0] or 0))
        objects = [
            ((rkey, ns, name), json.loads(data))
            for rkey, ns, name, data in self._conn.execute(
                "SELECT rkey, namespace, name, data FROM objects"
            )
        ]
        return revision, objects

    def commit(
        self,
        revision: int,
        puts: list[tuple[ObjectKey, bytes]],
        deletes: list[ObjectKey],
    ) -> None:
        """Apply one write atomically: one statement for a single put, else one transaction.

        Raises:
            StoreError: SQLite failed; nothing was applied (the transaction rolled back).
        """
        conn = self._conn
        try:
            if len(puts) == 1 and not deletes:
                # the common write: one statement, its own transaction; the row keeps the
                # revision (load takes the largest), so meta needs no second statement
                ((k, data),) = puts
                conn.execute(_PUT, (k[0], k[1], k[2], data, revision))
                return
            conn.execute("BEGIN")
            if puts:
                conn.executemany(_PUT, [(k[0], k[1], k[2], data, revision) for k, data in puts])
            if deletes:
                conn.executemany(
                    "DELETE FROM objects WHERE rkey=? AND namespace=? AND name=?", deletes
                )
            conn.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES ('revision', ?)", (revision,)
            )
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise StoreError(f"storage write failed: {exc}") from exc

    def close(self) -> None:
        """Close the database and release the lock."""
        self._conn.close()
        os.close(self._lock)


@dataclass
class _Subscriber:
    storage_key: str | None
    namespace: str | None
    send: trio.MemorySendChannel[StoredEvent]
    overflowed: bool = False
    accept: Callable[[StoredEvent], bool] | None = None


class Store:
    """The object store. See the module docstring for the design.

    Args:
        backend: where writes go durably (:class:`MemoryBackend` or :class:`SqliteBackend`).
        history_limit: how many events to keep for watch replay (older revisions get 410).
        watch_buffer: events a subscriber may fall behind before it is closed.
    """

    def __init__(
        self, backend: Backend, *, history_limit: int = 10_000, watch_buffer: int = 10_000
    ) -> None:
        self._backend = backend
        self._index: dict[str, dict[tuple[str, str], dict[str, Any]]] = {}
        revision, objects = backend.load()
        for (rkey, ns, name), obj in objects:
            self._index.setdefault(rkey, {})[(ns, name)] = obj
        self._revision = revision
        self._history: deque[StoredEvent] = deque(maxlen=history_limit)
        self._compacted = revision
        self._subscribers: list[_Subscriber] = []
        # the same subscribers by kind (None: every kind), so a write visits only its own
        # kind's watches and the followers of every kind, not every watch of the server
        self._subscribers_of: dict[str | None, list[_Subscriber]] = {}
        self._watch_buffer = watch_buffer
        self._last_event: StoredEvent | None = None
        self._kind_revisions: dict[str, int] = {}

    @property
    def revision(self) -> int:
        """The revision of the last write (0 for an empty new store)."""
        return self._revision

    @property
    def oldest_revision(self) -> int:
        """Revisions strictly greater than this can be replayed; older ones are Gone."""
        return self._compacted

    def kind_revision(self, storage_key: str) -> int:
        """The revision of the last write to one kind in this process (0 if none yet).

        Lets a reader keep what it derived from a kind (RBAC decisions) until it changes.
        """
        return self._kind_revisions.get(storage_key, 0)

    def close(self) -> None:
        """Close every subscriber and the backend."""
        for sub in self._subscribers:
            sub.send.close()
        self._subscribers.clear()
        self._subscribers_of.clear()
        self._backend.close()

    def encoded(self, obj: Any) -> bytes | None:
        """Return ``obj``'s JSON bytes if it is the object the last write committed.

        A write's response is the object it stored; answering with the bytes already
        encoded for the backend saves encoding it again. Stored objects are read-only, so
        identity means equal content.

        Args:
            obj: any value (usually a handler's result).

        Returns:
            The committed encoding (:func:`encode`), or None for anything else.
        """
        last = self._last_event
        return last.encoded if last is not None and last.obj is obj else None

    # reads -------------------------------------------------------------------

    def get(self, storage_key: str, namespace: str, name: str) -> dict[str, Any] | None:
        """Return the stored object (read-only: copy before changing) or None."""
        return self._index.get(storage_key, {}).get((namespace, name))

    def list(self, storage_key: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """Return the objects of one kind sorted by (namespace, name); read-only.

        Args:
            storage_key: e.g. ``/pods``. namespace: restrict to one namespace, None for all.
        """
        objects = self._index.get(storage_key, {})
        keys = sorted(k for k in objects if namespace is None or k[0] == namespace)
        return [objects[k] for k in keys]

    def count(self, storage_key: str, namespace: str | None = None) -> int:
        """Return how many objects of one kind exist (in one namespace if given)."""
        objects = self._index.get(storage_key, {})
        if namespace is None:
            return len(objects)
        return sum(1 for k in objects if k[0] == namespace)

    def namespaces_in_use(self) -> dict[str, builtins.list[str]]:
        """Return ``{namespace: [storage keys with objects there]}`` (namespace cleanup)."""
        used: dict[str, builtins.list[str]] = {}
        for rkey, objects in self._index.items():
            for ns, _ in objects:
                if ns and rkey not in used.setdefault(ns, []):
                    used[ns].append(rkey)
        return used

    def list_at(
        self, storage_key: str, namespace: str | None, revision: int
    ) -> builtins.list[dict[str, Any]]:
        """Return the objects of one kind as they were at ``revision`` (exact list).

        Rolls the current state back through the event history.

        Raises:
            Gone: ``revision`` is older than the retained history.
            Conflict: ``revision`` is in the future.
        """
        if revision > self._revision:
            raise Conflict(f"Too large resource version: {revision}, current: {self._revision}")
        if revision < self._compacted:
            raise Gone(f"The resourceVersion {revision} is too old")
        state = {
            k: v
            for k, v in self._index.get(storage_key, {}).items()
            if namespace is None or k[0] == namespace
        }
        for event in reversed(self._history):
            if event.revision <= revision:
                break
            rkey, ns, name = event.key
            if rkey != storage_key or (namespace is not None and ns != namespace):
                continue
            if event.old is None:
                state.pop((ns, name), None)
            else:
                state[(ns, name)] = event.old
        return [state[k] for k in sorted(state)]

    # writes ------------------------------------------------------------------

    def _stamp(self, obj: dict[str, Any], revision: int) -> None:
        obj.setdefault("metadata", {})["resourceVersion"] = str(revision)

    def _commit(
        self,
        kind: str,
        key: ObjectKey,
        obj: dict[str, Any],
        old: dict[str, Any] | None,
    ) -> StoredEvent:
        revision = self._revision + 1
        self._stamp(obj, revision)
        data: bytes | None = None
        if kind == "DELETED":
            self._backend.commit(revision, [], [key])
        else:
            data = encode(obj)
            self._backend.commit(revision, [(key, data)], [])
        self._revision = revision
        self._kind_revisions[key[0]] = revision
        objects = self._index.setdefault(key[0], {})
        if kind == "DELETED":
            objects.pop((key[1], key[2]), None)
        else:
            objects[(key[1], key[2])] = obj
        event = StoredEvent(kind, key, revision, obj, old, data)
        self._last_event = event
        if len(self._history) == self._history.maxlen:
            self._compacted = self._history[0].revision
        self._history.append(event)
        self._publish(event)
        return event

    def create(self, key: ObjectKey, obj: dict[str, Any]) -> dict[str, Any]:
        """Store a new object and stamp its resourceVersion. Takes ownership of ``obj``.

        Raises:
            AlreadyExists: an object with ``key`` exists.
            StoreError: the backend write failed (nothing changed).
        """
        if self.get(*key) is not None:
            raise AlreadyExists(key)
        return self._commit("ADDED", key, obj, None).obj

    def update(
        self, key: ObjectKey, obj: dict[str, Any], *, expected_revision: int | None = None
    ) -> dict[str, Any]:
        """Replace an object and stamp a new resourceVersion. Takes ownership of ``obj``.

        An update that changes nothing (``obj`` equals the stored object but for its
        resourceVersion) is not written, as in Kubernetes: the stored object is returned
        with its resourceVersion and no watch event is sent (``kubectl`` then says
        "(no change)").

        Args:
            key: the object's key. obj: the new object.
            expected_revision: the resourceVersion the caller read; None for unconditional.

        Raises:
            NotFound: no such object. Conflict: the stored resourceVersion differs.
            StoreError: the backend write failed (nothing changed).
        """
        old = self.get(*key)
        if old is None:
            raise NotFound(key)
        if expected_revision is not None and old["metadata"]["resourceVersion"] != str(
            expected_revision
        ):
            raise Conflict(key)
        if _same_but_version(obj, old):
            return old
        return self._commit("MODIFIED", key, obj, old).obj

    def delete(
        self,
        key: ObjectKey,
        *,
        expected_revision: int | None = None,
        final: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Remove an object; returns its final state stamped with the deletion revision.

        Args:
            key: the object's key. expected_revision: as for :meth:`update`.
            final: the state the DELETED event carries (an update that removed the last
                finalizer); default the stored state. Takes ownership.

        Raises:
            NotFound: no such object. Conflict: the stored resourceVersion differs.
            StoreError: the backend write failed (nothing changed).
        """
        old = self.get(*key)
        if old is None:
            raise NotFound(key)
        if expected_revision is not None and old["metadata"]["resourceVersion"] != str(
            expected_revision
        ):
            raise Conflict(key)
        if final is None:
            final = {**old, "metadata": dict(old["metadata"])}
        return self._commit("DELETED", key, final, old).obj

    # watch -------------------------------------------------------------------

    def _publish(self, event: StoredEvent) -> None:
        rkey, ns, _ = event.key
        dead: list[_Subscriber] = []
        for group in (self._subscribers_of.get(rkey), self._subscribers_of.get(None)):
            for sub in group or ():
                if sub.namespace is not None and sub.namespace != ns:
                    continue
                if sub.accept is not None and not sub.accept(event):
                    continue
                try:
                    sub.send.send_nowait(event)
                except trio.WouldBlock:
                    sub.overflowed = True
                    dead.append(sub)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    dead.append(sub)
        for sub in dead:
            sub.send.close()
            self._unsubscribe(sub)

    def _unsubscribe(self, sub: _Subscriber) -> None:
        if sub in self._subscribers:
            self._subscribers.remove(sub)
            group = self._subscribers_of[sub.storage_key]
            group.remove(sub)
            if not group:
                del self._subscribers_of[sub.storage_key]

    def end_watches(self, storage_key: str) -> None:
        """End every subscription to one kind (its CRD was deleted: the kind is gone).

        Subscribers still receive the events already queued, then ``EndOfChannel``; as on
        kube-apiserver, their watch streams close and clients re-list (and get 404).
        Subscribers to every kind (``storage_key`` None) are not affected.
        """
        for sub in list(self._subscribers_of.get(storage_key, ())):
            sub.send.close()
            self._unsubscribe(sub)

    def history_since(
        self, revision: int, storage_key: str | None, namespace: str | None
    ) -> builtins.list[StoredEvent]:
        """Return retained events after ``revision`` for one kind (and namespace).

        Raises:
            Gone: ``revision`` is older than the retained history.
        """
        if revision < self._compacted:
            raise Gone(f"too old resource version: {revision} ({self._compacted})")
        result = []
        for event in reversed(self._history):
            if event.revision <= revision:
                break
            if storage_key is not None and event.key[0] != storage_key:
                continue
            if namespace is not None and event.key[1] != namespace:
                continue
            result.append(event)
        result.reverse()
        return result

    @contextmanager
    def subscribe(
        self,
        storage_key: str | None,
        namespace: str | None = None,
        *,
        since: int | None = None,
        accept: Callable[[StoredEvent], bool] | None = None,
    ) -> Iterator[tuple[builtins.list[StoredEvent], trio.MemoryReceiveChannel[StoredEvent]]]:
        """Subscribe to future events, atomically with a replay of past ones.

        Args:
            storage_key: one kind, or None for every kind (controllers).
            namespace: one namespace, or None for all.
            since: also return retained events after this revision (None: no replay).
            accept: only events for which this returns True (replayed or later); a
                controller that needs few of a kind's events is then not woken for the
                rest. Called in the writer's task: it must be quick and never raise.

        Yields:
            ``(replay, channel)``: the replayed events and a channel of every later event.
            The channel ends (``EndOfChannel``) if the subscriber falls too far behind.

        Raises:
            Gone: ``since`` is older than the retained history.
        """
        replay = [] if since is None else self.history_since(since, storage_key, namespace)
        if accept is not None:
            replay = [event for event in replay if accept(event)]
        send, receive = trio.open_memory_channel[StoredEvent](self._watch_buffer)
        sub = _Subscriber(storage_key, namespace, send, accept=accept)
        self._subscribers.append(sub)
        self._subscribers_of.setdefault(storage_key, []).append(sub)
        try:
            with receive:
                yield replay, receive
        finally:
            self._unsubscribe(sub)
            send.close()


async def receive_batch(channel: trio.MemoryReceiveChannel[StoredEvent]) -> list[StoredEvent]:
    """Wait for the next event; return it with every event already queued behind it.

    A follower (garbage collector, namespace controller) then handles a burst of writes
    in one wake-up instead of one task switch per event.

    Args:
        channel: a subscription's channel (:meth:`Store.subscribe`).

    Returns:
        One or more events, oldest first.

    Raises:
        trio.EndOfChannel: the subscription ended and every queued event was taken.
    """
    batch = [await channel.receive()]
    while True:
        try:
            batch.append(channel.receive_nowait())
        except (trio.WouldBlock, trio.EndOfChannel):
            return batch


def open_store(state_dir: Path | None, *, history_limit: int = 10_000) -> Store:
    """Open the store: SQLite at ``state_dir/localkube.db``, or memory when None.

    Raises:
        StoreError: the database cannot be opened.
    """
    if state_dir is None:
        return Store(MemoryBackend(), history_limit=history_limit)
    state_dir.mkdir(parents=True, exist_ok=True)
    try:
        backend = SqliteBackend(state_dir / "localkube.db")
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open {state_dir / 'localkube.db'}: {exc}") from exc
    return Store(backend, history_limit=history_limit)


def _same_but_version(new: dict[str, Any], old: dict[str, Any]) -> bool:
    """Whether ``new`` equals ``old`` apart from ``metadata.resourceVersion``."""
    if new.keys() != old.keys():
        return False
    # everything but metadata first: a real change (a status write) shows there, cheaply
    for name, value in new.items():
        if name != "metadata" and value != old[name]:
            return False
    if "metadata" not in new:
        return True
    value, old_meta = new["metadata"], old["metadata"]
    if not isinstance(value, dict):
        return False
    if {k for k in value if k != "resourceVersion"} != {
        k for k in old_meta if k != "resourceVersion"
    }:
        return False
    return not any(v != old_meta[k] for k, v in value.items() if k != "resourceVersion")
