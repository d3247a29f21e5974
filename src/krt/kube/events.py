"""Kubernetes Events off the hot path: a bounded queue, one writer task, repeat aggregation.

The one Event recorder of the project (control plane, runtimed and gateway all use it).
Callers depend on the :class:`EventSink` protocol; :class:`NullEventSink` drops everything
(tests and components that do not want Events).

``recorder.emit(obj, type_="Warning", reason="StartFailed", message="...")`` is synchronous
and never waits: it puts a small record on a bounded memory channel. When the channel is full the
record is dropped and counted (:attr:`EventRecorder.dropped`): an Event is a diagnostic, and
a burst of them must never slow a reconcile or an invoke (seed 003: the asynchronous start
worker "emits an Event"; it must not block on the API to do so).

An optional :class:`WriteGate` makes Events yield to more urgent writes: each record waits
until the gate opens (the control plane opens it once its Runs have been quiet for a moment,
so a burst's binds, claims and completions do not queue behind Event POSTs at the API
server), but never longer than ``max_delay_seconds`` after it was emitted, so under steady
load Events are still written as fast as before, only later. Timestamps are those of
:meth:`EventRecorder.emit`, not of the write.

The writer task (:meth:`EventRecorder.run`) creates core/v1 Events. A repeat of the same
(object uid, type, reason, message) within the cache bumps the existing Event's ``count``
and ``lastTimestamp`` with a merge patch instead of creating another object, as kubectl's
and client-go's recorders do (a repeat whose patch fails, e.g. because the Event was deleted
or the role may only create Events, is written as a new Event). Each write has a deadline of
:data:`WRITE_DEADLINE_SECONDS`. Write failures are logged and counted, never raised.
"""

from __future__ import annotations

import itertools
import logging
import math
import secrets
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Protocol

import trio

from krt.kube.clock import Clock, SystemClock, format_time
from krt.kube.errors import KubeError
from krt.kube.interface import KubeClient
from krt.kube.resources import EVENTS

__all__ = ["EventRecorder", "EventSink", "NullEventSink", "WriteGate"]

log = logging.getLogger(__name__)

EVENT_TYPES: Final = frozenset({"Normal", "Warning"})
MAX_MESSAGE_CHARS: Final = 1024
MAX_REASON_CHARS: Final = 128
#: Remembered (object, reason, message) combinations for aggregation.
AGGREGATION_CACHE_SIZE: Final = 4096
#: Longest one Event write may take before it is abandoned (seconds).
WRITE_DEADLINE_SECONDS: Final = 5.0
#: Longest an Event waits for a closed :class:`WriteGate`, from its emission (seconds).
MAX_DELAY_SECONDS: Final = 1.0


class EventSink(Protocol):
    """Records Events about objects, fire and forget (what loops and lifecycles depend on)."""

    def emit(self, obj: Mapping[str, Any], *, type_: str, reason: str, message: str) -> None:
        """Queue one Event about ``obj`` (``type_`` is ``Normal`` or ``Warning``); never blocks."""
        ...


class WriteGate(Protocol):
    """Tells an :class:`EventRecorder` when writing would not compete with urgent work."""

    async def wait_open(self) -> None:
        """Return once Events may be written (at once when they may be now)."""
        ...


class NullEventSink:
    """Drops every Event (tests, or components that do not record Events)."""

    def emit(self, obj: Mapping[str, Any], *, type_: str, reason: str, message: str) -> None:
        """Do nothing."""


@dataclass(frozen=True, slots=True)
class _Record:
    involved: dict[str, str]
    namespace: str
    type: str
    reason: str
    message: str
    #: When it was emitted: wall clock (the Event's timestamps) and trio time (its deadline).
    emitted: datetime
    queued_at: float

    @property
    def key(self) -> tuple[str, ...]:
        ref = self.involved
        return (
            ref.get("uid") or f"{ref.get('kind')}/{ref.get('namespace')}/{ref.get('name')}",
            self.type,
            self.reason,
            self.message,
        )


@dataclass
class _Written:
    namespace: str
    name: str
    count: int


def _involved(obj: Mapping[str, Any]) -> dict[str, str]:
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping) or not metadata.get("name"):
        raise ValueError("event: the involved object needs metadata.name")
    ref = {
        "apiVersion": str(obj.get("apiVersion") or ""),
        "kind": str(obj.get("kind") or ""),
        "name": str(metadata["name"]),
    }
    for field in ("namespace", "uid", "resourceVersion"):
        if metadata.get(field):
            ref[field] = str(metadata[field])
    return ref


class EventRecorder:
    """Records Events for objects without blocking the caller.

    Args:
        kube: the client (needs ``create`` and, for aggregation, ``patch`` on Events).
        component: ``source.component`` / ``reportingComponent``, e.g. ``runtimed``.
        instance: ``reportingInstance`` / ``source.host`` (e.g. the Pod name); optional.
        capacity: records buffered before new ones are dropped (>= 1).
        clock: wall clock for timestamps.
        gate: when given, each Event waits for the gate to open, at most
            ``max_delay_seconds`` from its emission (see the module docstring).
        max_delay_seconds: that bound, seconds (>= 0).

    Raises:
        ValueError: empty component, capacity < 1 or a negative or NaN ``max_delay_seconds``.
    """

    def __init__(
        self,
        kube: KubeClient,
        component: str,
        *,
        instance: str = "",
        capacity: int = 256,
        clock: Clock | None = None,
        gate: WriteGate | None = None,
        max_delay_seconds: float = MAX_DELAY_SECONDS,
    ) -> None:
        if not component:
            raise ValueError("component must not be empty")
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        if not max_delay_seconds >= 0:
            raise ValueError(f"max_delay_seconds must be >= 0, got {max_delay_seconds}")
        self._gate = gate
        self._max_delay = max_delay_seconds
        # Event names: the object's name, this recorder's random prefix, a serial number
        # (unique without a random draw per Event)
        self._name_prefix = secrets.token_hex(4)
        self._serial = itertools.count()
        self._kube = kube
        self.component = component
        self.instance = instance
        self._clock: Clock = clock or SystemClock()
        self._send, self._receive = trio.open_memory_channel[_Record](capacity)
        self._recent: OrderedDict[tuple[str, ...], _Written] = OrderedDict()
        #: Records dropped because the buffer was full.
        self.dropped = 0
        #: Events created, and repeats folded into an existing Event.
        self.created = 0
        self.aggregated = 0
        #: Writes that failed (logged).
        self.failed = 0

    def emit(self, obj: Mapping[str, Any], *, type_: str, reason: str, message: str) -> None:
        """Queue an Event about ``obj``; never blocks.

        When the buffer is full the Event is dropped and counted in :attr:`dropped`.

        Args:
            obj: the involved object (needs ``metadata.name``; ``kind``, ``apiVersion``,
                ``namespace``, ``uid`` and ``resourceVersion`` are copied when present).
            type_: ``Normal`` or ``Warning``.
            reason: short UpperCamelCase reason (at most 128 characters).
            message: human-readable text; cut to 1024 characters.

        Raises:
            ValueError: unknown type, empty or over-long reason, or ``obj`` without a name.
        """
        if type_ not in EVENT_TYPES:
            raise ValueError(f"event type must be one of {sorted(EVENT_TYPES)}, got {type_!r}")
        if not reason or len(reason) > MAX_REASON_CHARS:
            raise ValueError(f"event reason must be 1..{MAX_REASON_CHARS} characters")
        involved = _involved(obj)
        record = _Record(
            involved=involved,
            namespace=involved.get("namespace") or "default",
            type=type_,
            reason=reason,
            message=message[:MAX_MESSAGE_CHARS],
            emitted=self._clock.now(),
            queued_at=trio.current_time() if self._gate is not None else -math.inf,
        )
        try:
            self._send.send_nowait(record)
        except trio.WouldBlock:
            self.dropped += 1
            log.debug("event buffer full; dropped %s %s", reason, involved.get("name"))

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Write queued Events until cancelled.

        Args:
            task_status: ``started()`` at once.
        """
        task_status.started()
        async for record in self._receive:
            if self._gate is not None:
                with trio.move_on_at(record.queued_at + self._max_delay):
                    await self._gate.wait_open()
            try:
                with trio.fail_after(WRITE_DEADLINE_SECONDS):
                    await self._write(record)
            except (KubeError, trio.TooSlowError) as exc:
                self.failed += 1
                log.info(
                    "event %s for %s not written: %s",
                    record.reason,
                    record.involved.get("name"),
                    exc,
                )

    async def _write(self, record: _Record) -> None:
        now = format_time(record.emitted)
        key = record.key
        previous = self._recent.get(key)
        if previous is not None:
            try:
                await self._kube.patch(
                    EVENTS,
                    previous.name,
                    previous.namespace,
                    {"count": previous.count + 1, "lastTimestamp": now},
                    type="merge",
                )
            except KubeError as exc:
                log.debug("event %s not aggregated (%s); writing a new one", record.reason, exc)
                del self._recent[key]
            else:
                previous.count += 1
                self._recent.move_to_end(key)
                self.aggregated += 1
                return
        name = f"{record.involved['name']}.{self._name_prefix}{next(self._serial):x}"
        body: dict[str, Any] = {
            "metadata": {"name": name, "namespace": record.namespace},
            "involvedObject": record.involved,
            "type": record.type,
            "reason": record.reason,
            "message": record.message,
            "count": 1,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "reportingInstance": self.instance,
        }
        if self.instance:
            body["source"]["host"] = self.instance
        await self._kube.create(EVENTS, body)
        self.created += 1
        self._recent[key] = _Written(record.namespace, name, 1)
        if len(self._recent) > AGGREGATION_CACHE_SIZE:
            self._recent.popitem(last=False)
