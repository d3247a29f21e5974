"""Kubernetes Events about Runs, sent in the background so no reconcile waits on them.

Seed 003, Asynchronous Start Boundary: a start failure "emits an Event and a log entry".
:class:`EventSink` is what the lifecycle calls (synchronous, never blocks, drops Events
when the buffer is full rather than slowing down work); :class:`KubeEventSink` sends them as
``core/v1`` Events involving the Run from a task in runtimed's nursery.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Mapping
from typing import Any, Protocol

import trio

from krt.kube.client import Kube
from krt.kube.clock import Clock, format_time
from krt.kube.errors import KubeError
from krt.kube.resources import EVENTS

__all__ = ["EventSink", "KubeEventSink", "NullEventSink"]

log = logging.getLogger(__name__)

#: Events waiting to be sent; more are dropped (logged).
EVENT_BUFFER: int = 256


class EventSink(Protocol):
    """Records Events about objects (fire and forget)."""

    def emit(self, obj: Mapping[str, Any], *, type_: str, reason: str, message: str) -> None:
        """Queue one Event about ``obj`` (``type_`` is ``Normal`` or ``Warning``)."""
        ...


class NullEventSink:
    """Drops every Event (tests, or when Events are not wanted)."""

    def emit(self, obj: Mapping[str, Any], *, type_: str, reason: str, message: str) -> None:
        """Do nothing."""


class KubeEventSink:
    """Sends Events through the API from :meth:`run`.

    Args:
        kube: the client.
        component: ``source.component`` of the Events (``runtimed``).
        host: ``source.host`` (the Pod name).
        clock: wall clock for the timestamps.
    """

    def __init__(self, kube: Kube, *, component: str, host: str, clock: Clock) -> None:
        self._kube = kube
        self._component = component
        self._host = host
        self._clock = clock
        self._send, self._receive = trio.open_memory_channel[dict[str, Any]](EVENT_BUFFER)

    def emit(self, obj: Mapping[str, Any], *, type_: str, reason: str, message: str) -> None:
        """Queue an Event about ``obj``; dropped with a log line when the buffer is full."""
        meta = obj.get("metadata") or {}
        now = format_time(self._clock.now())
        event = {
            "metadata": {
                "name": f"{meta.get('name', 'object')}.{secrets.token_hex(8)}",
                "namespace": meta.get("namespace"),
            },
            "involvedObject": {
                "apiVersion": obj.get("apiVersion"),
                "kind": obj.get("kind"),
                "name": meta.get("name"),
                "namespace": meta.get("namespace"),
                "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion"),
            },
            "type": type_,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": self._component, "host": self._host},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self._send.send_nowait(event)
        except trio.WouldBlock:
            log.warning("Event buffer full; dropped %s %s", reason, meta.get("name"))

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Send queued Events until cancelled (failures are logged, never retried)."""
        task_status.started()
        async for event in self._receive:
            try:
                with trio.move_on_after(5.0):
                    await self._kube.create(EVENTS, event)
            except KubeError as exc:
                log.info("cannot record Event %s: %s", event["reason"], exc)
