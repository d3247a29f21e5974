"""The watch stream: initial state, replay, live events, BOOKMARKs, 410 and timeouts.

Wire format (``application/json``, one JSON document per line, chunked)::

    {"type":"ADDED","object":{...}}
    {"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"12"}}}
    {"type":"ERROR","object":{"kind":"Status",...,"code":410,"reason":"Expired"}}

Rules (issue 3, "list and watch"; Kubernetes "Efficient detection of changes"):

* no ``resourceVersion`` or ``"0"``: synthetic ADDED events for the current matching
  objects, then every later change;
* ``resourceVersion=N``: every retained change after N; N older than the history: one
  ERROR event carrying a 410 ``Expired`` Status, then the stream ends; a future N waits
  up to :data:`FUTURE_RESOURCE_VERSION_WAIT` seconds for the store to reach it, then (as
  kube-apiserver's watch cache) sends an ERROR event with a 504 "Too large resource
  version" Status and ends, so a client holding a revision from another store (an
  in-memory server that restarted) re-lists instead of silently missing events;
* with selectors, an object that starts matching arrives as ADDED and one that stops
  matching as DELETED, as kube-apiserver's watch cache does;
* ``allowWatchBookmarks=true``: a BOOKMARK every ``bookmark_interval`` seconds with a
  resourceVersion the client may resume from; ``sendInitialEvents=true`` ends the initial
  events with a BOOKMARK annotated ``k8s.io/initial-events-end``;
* ``timeoutSeconds`` (default 1800 s) ends the stream cleanly.

The stream writes lines through an async ``emit(bytes)`` callback; it never returns
until the watch ends, and is cancelled when the client disconnects.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import trio

from localkube import storage, tables
from localkube.errors import ApiError
from localkube.handlers import ListOptions, for_version, too_large_resource_version, utc_now
from localkube.resources import ResourceType

Emit = Callable[[bytes], Awaitable[None]]
DEFAULT_TIMEOUT = 1800.0
FUTURE_RESOURCE_VERSION_WAIT = 3.0
"""Seconds a watch from a future resourceVersion waits for it (kube-apiserver: 3 s)."""


@dataclass(frozen=True)
class WatchRequest:
    """A parsed watch request.

    Attributes:
        rt: the watched type. namespace: None for all namespaces.
        options: selectors and resourceVersion. bookmarks: ``allowWatchBookmarks``.
        send_initial_events: ``sendInitialEvents``. timeout: seconds until the stream ends.
        table: render objects as Tables (kubectl ``get -w``); include_object as for Tables.
    """

    rt: ResourceType
    namespace: str | None
    options: ListOptions
    bookmarks: bool = False
    send_initial_events: bool = False
    timeout: float = DEFAULT_TIMEOUT
    table: bool = False
    include_object: str = "Metadata"


def transition(
    event: storage.StoredEvent, options: ListOptions, rt: ResourceType | None = None
) -> str | None:
    """Return the event type a selector-filtered watcher sees for ``event`` (None: skip).

    Args:
        event: the store event. options: the watch's selectors.
        rt: the watched type when its objects are converted for serving (selectors then
            apply to the served form, e.g. ``regarding.name`` of events.k8s.io Events).
    """

    if options.selects_all:  # the common case, without converting or matching objects
        if event.type != "MODIFIED":
            return event.type
        return "MODIFIED" if event.old is not None else "ADDED"

    if rt is None:
        return _selected_transition(event, options.matches)

    def matches(obj: dict[str, Any]) -> bool:
        return options.matches(for_version(rt, obj))

    return _selected_transition(event, matches)


def _selected_transition(
    event: storage.StoredEvent, matches: Callable[[dict[str, Any]], bool]
) -> str | None:
    """:func:`transition` for a watch with a selector, ``matches`` deciding for an object."""
    new_match = matches(event.obj)
    if event.type == "ADDED":
        return "ADDED" if new_match else None
    if event.type == "DELETED":
        return "DELETED" if matches(event.old or event.obj) else None
    old_match = event.old is not None and matches(event.old)
    if old_match and new_match:
        return "MODIFIED"
    if new_match:
        return "ADDED"
    if old_match:
        return "DELETED"
    return None


class _SelectedEvents:
    """The store-side filter of a selector-filtered watch (``Store.subscribe(accept=...)``).

    A watch with a label or field selector (runtimed's ``status.assignedPodUID=<uid>``)
    needs only the events it will send; checking them in the writer's task, where the
    event is published, spares the watch a wake-up, a task switch and a loop turn for
    every other object's write (for each Runtime Pod's watch, every other Pod's Runs).
    The event type found then is kept for the watch loop, so it is not worked out twice.
    """

    def __init__(self, options: ListOptions) -> None:
        self.options = options
        self._matches = _matcher(options)
        self.kinds: dict[int, str] = {}
        self.seen = 0
        """The revision of the last event offered, kept or not."""

    def __call__(self, event: storage.StoredEvent) -> bool:
        self.seen = event.revision
        try:
            kind = _selected_transition(event, self._matches)
        except Exception:  # (never raise in the writer's task: the watch loop will)
            return True
        if kind is None:
            return False
        self.kinds[event.revision] = kind
        return True

    def kind(self, event: storage.StoredEvent) -> str | None:
        """The event type to send for an accepted ``event`` (see :func:`transition`)."""
        kind = self.kinds.pop(event.revision, None)
        return kind if kind is not None else transition(event, self.options)


def _matcher(options: ListOptions) -> Callable[[dict[str, Any]], bool]:
    """``options.matches``, unwrapped to the one requirement when that is all there is.

    runtimed's watch has exactly one (``status.assignedPodUID=<uid>``) and is asked about
    every write of its kind, twice (the object before and after): the label selector
    without requirements and the one-element loop are calls it need not make.
    """
    if not options.labels.requirements and len(options.fields.requirements) == 1:
        return options.fields.requirements[0].matches
    return options.matches


class _Encoder:
    def __init__(self, request: WatchRequest, now: Callable[[], datetime]) -> None:
        self.request = request
        self.now = now
        self.columns_sent = False

    def encode(self, kind: str, obj: dict[str, Any], event: storage.StoredEvent | None) -> bytes:
        rt = self.request.rt
        if not self.request.table:
            if event is not None and not rt.conversion:
                return event.line(rt.api_version, kind)
            return storage.encode({"type": kind, "object": for_version(rt, obj)}) + b"\n"
        body = tables.table(
            rt,
            [for_version(rt, obj)],
            list_meta={"resourceVersion": obj["metadata"].get("resourceVersion", "")},
            now=self.now(),
            include_object=self.request.include_object,
            with_columns=not self.columns_sent,
        )
        self.columns_sent = True
        return storage.encode({"type": kind, "object": body}) + b"\n"

    def bookmark(self, revision: int, *, initial_end: bool = False) -> bytes:
        rt = self.request.rt
        meta: dict[str, Any] = {"resourceVersion": str(revision)}
        if initial_end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        return (
            storage.encode(
                {
                    "type": "BOOKMARK",
                    "object": {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": meta},
                }
            )
            + b"\n"
        )


def error_line(error: ApiError) -> bytes:
    """Encode an ERROR watch event carrying ``error``'s Status."""
    return storage.encode({"type": "ERROR", "object": error.status()}) + b"\n"


async def run_watch(
    store: storage.Store,
    request: WatchRequest,
    emit: Emit,
    *,
    now: Callable[[], datetime] = utc_now,
    bookmark_interval: float = 60.0,
) -> None:
    """Stream a watch until ``request.timeout`` passes, the client goes, or events overflow.

    Args:
        store: the object store. request: the parsed request. emit: writes a chunk.
        now: wall clock (Table ages). bookmark_interval: seconds between BOOKMARKs.

    Never raises for a too-old resourceVersion: that is sent as an ERROR event.
    """
    rt = request.rt
    options = request.options
    encoder = _Encoder(request, now)
    converted = rt if rt.conversion else None
    rv = options.resource_version
    since: int | None = int(rv) if rv not in ("", "0") else None
    initial = since is None or request.send_initial_events
    if since is not None and since < store.oldest_revision:
        message = f"too old resource version: {rv} ({store.oldest_revision + 1})"
        await emit(error_line(ApiError(410, "Expired", message)))
        return
    floor = since or 0
    # filtered where the events are published; not for served conversions (the filter
    # runs in the writer's task) nor a future resourceVersion (its wait needs every event)
    selected = (
        _SelectedEvents(options)
        if not options.selects_all and converted is None and floor <= store.revision
        else None
    )
    with (
        trio.move_on_after(request.timeout),
        store.subscribe(rt.storage_key, request.namespace, since=since, accept=selected) as (
            replay,
            channel,
        ),
    ):
        last_sent = store.revision if since is None else since
        chunk: list[bytes] = []
        if initial and since is None:
            for obj in store.list(rt.storage_key, request.namespace):
                if options.matches(for_version(rt, obj)):
                    chunk.append(encoder.encode("ADDED", obj, None))
            last_sent = store.revision
        if selected is not None:  # the replayed events the filter dropped count as seen
            last_sent = max(last_sent, selected.seen)
        for event in replay:
            kind = (
                selected.kind(event)
                if selected is not None
                else transition(event, options, converted)
            )
            if kind is not None:
                chunk.append(encoder.encode(kind, event.obj, event))
            last_sent = max(last_sent, event.revision)
        if request.send_initial_events and request.bookmarks:
            chunk.append(encoder.bookmark(last_sent, initial_end=True))
        if chunk:
            await emit(b"".join(chunk))
        next_bookmark = trio.current_time() + bookmark_interval if request.bookmarks else math.inf
        # a resourceVersion from the future must be reached soon, or the watch fails
        future_deadline = math.inf
        if floor > store.revision:
            future_deadline = trio.current_time() + FUTURE_RESOURCE_VERSION_WAIT
        while True:
            batch: list[bytes] = []
            received: storage.StoredEvent | None = None
            deadline = min(next_bookmark, future_deadline)
            try:
                if deadline == math.inf:  # the common case: no cancel scope per event
                    received = await channel.receive()
                else:
                    with trio.move_on_at(deadline):
                        received = await channel.receive()
            except trio.EndOfChannel:
                return
            if store.revision >= floor:
                future_deadline = math.inf
            elif trio.current_time() >= future_deadline:
                await emit(error_line(too_large_resource_version(floor, store.revision)))
                return
            if received is not None:
                # let the other runnable tasks (concurrent writes) go first, so a burst of
                # events leaves in one chunk rather than one TLS record each
                await trio.lowlevel.cancel_shielded_checkpoint()
                event = received
                while True:
                    # a resourceVersion from the future: skip changes up to it
                    if event.revision <= floor:
                        kind = None
                    elif selected is not None:
                        kind = selected.kind(event)
                    else:
                        kind = transition(event, options, converted)
                    if kind is not None:
                        batch.append(encoder.encode(kind, event.obj, event))
                    last_sent = max(last_sent, event.revision)
                    try:
                        event = channel.receive_nowait()
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break
            if request.bookmarks and trio.current_time() >= next_bookmark:
                if channel.statistics().current_buffer_used == 0:
                    last_sent = max(last_sent, store.revision)
                batch.append(encoder.bookmark(last_sent))
                next_bookmark = trio.current_time() + bookmark_interval
            if batch:
                await emit(b"".join(batch))
