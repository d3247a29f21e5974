"""Kubernetes Events for the control plane's user-visible decisions (Scheduled, PodLost, ...).

Loops call :meth:`Recorder.record` synchronously; it never blocks and never fails the
caller: Events go through a bounded memory channel to one sender task, and are dropped (and
counted) when the channel is full or the API refuses them. An Event is a courtesy to the
user, never part of the state machine.

Used only until :mod:`krt.kube` ships its shared ``EventRecorder``; the :class:`Recorder`
protocol is the seam.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Protocol

import trio

from krt.kube.client import Kube
from krt.kube.clock import format_time
from krt.kube.errors import KubeError
from krt.kube.resources import EVENTS

log = logging.getLogger(__name__)

COMPONENT = "krt-controlplane"
#: Events waiting to be sent; more are dropped.
BUFFER = 1024
#: Longest Event message the API accepts is 1 KiB in practice; keep the head.
MAX_MESSAGE_CHARS = 1024


class Recorder(Protocol):
    """Something that records an Event about an object."""

    def record(self, obj: Mapping[str, Any], *, type: str, reason: str, message: str) -> None:  # noqa: A002 - Kubernetes' field name
        """Record an Event (``type`` ``Normal`` or ``Warning``) about ``obj``; never blocks."""
        ...


class NullRecorder:
    """Drops every Event (tests of the loops that do not look at Events)."""

    def record(self, obj: Mapping[str, Any], *, type: str, reason: str, message: str) -> None:  # noqa: A002
        """Drop the Event."""


def event_body(
    obj: Mapping[str, Any],
    *,
    type: str,
    reason: str,
    message: str,
    now: datetime,  # noqa: A002
) -> dict[str, Any]:
    """The ``v1`` Event about ``obj`` (pure).

    Args:
        obj: the involved object (``apiVersion``, ``kind``, ``metadata``).
        type: ``Normal`` or ``Warning``. reason: CamelCase reason. message: detail.
        now: wall-clock time (aware).
    """
    meta = obj.get("metadata") or {}
    name = str(meta.get("name", "unknown"))
    stamp = format_time(now)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{name}.{secrets.token_hex(8)}",
            "namespace": meta.get("namespace") or "default",
        },
        "involvedObject": {
            "apiVersion": obj.get("apiVersion", ""),
            "kind": obj.get("kind", ""),
            "name": name,
            "namespace": meta.get("namespace", ""),
            "uid": meta.get("uid", ""),
            "resourceVersion": meta.get("resourceVersion", ""),
        },
        "reason": reason,
        "message": message[:MAX_MESSAGE_CHARS],
        "type": type,
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


class ApiEventRecorder:
    """Sends Events to the API from one background task (:meth:`run`).

    Args:
        kube: the client.
        now: the wall clock.
    """

    def __init__(self, kube: Kube, *, now: Callable[[], datetime]) -> None:
        self._kube = kube
        self._now = now
        self._send, self._receive = trio.open_memory_channel[dict[str, Any]](BUFFER)
        #: Events dropped (buffer full or API error).
        self.dropped = 0
        #: Events sent.
        self.sent = 0

    def record(self, obj: Mapping[str, Any], *, type: str, reason: str, message: str) -> None:  # noqa: A002
        """Queue an Event; drop it if the buffer is full."""
        body = event_body(obj, type=type, reason=reason, message=message, now=self._now())
        try:
            self._send.send_nowait(body)
        except trio.WouldBlock:
            self.dropped += 1

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Send queued Events until cancelled."""
        task_status.started()
        async for body in self._receive:
            try:
                await self._kube.create(EVENTS, body)
                self.sent += 1
            except KubeError as exc:
                self.dropped += 1
                log.debug("event %s dropped: %s", body["reason"], exc)
