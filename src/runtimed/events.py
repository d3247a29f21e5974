"""Compatibility names for runtimed's Event recording; the implementation is :mod:`krt.kube.events`.

Seed 003, Asynchronous Start Boundary: a start failure "emits an Event and a log entry".
runtimed records them with the project's one recorder, :class:`krt.kube.events.EventRecorder`.
This module only keeps the names :mod:`runtimed.daemon` and :mod:`runtimed.functions.lifecycle`
import today; new code imports :mod:`krt.kube.events` directly, and this module goes away once
those two do.
"""

from __future__ import annotations

from krt.kube.clock import Clock
from krt.kube.events import EventRecorder, EventSink, NullEventSink
from krt.kube.interface import KubeClient

__all__ = ["EventSink", "KubeEventSink", "NullEventSink"]


def KubeEventSink(kube: KubeClient, *, component: str, host: str, clock: Clock) -> EventRecorder:  # noqa: N802 - the old class name, kept for importers
    """Build runtimed's :class:`~krt.kube.events.EventRecorder`.

    Args:
        kube: the client.
        component: ``source.component`` of the Events (``runtimed``).
        host: ``source.host`` / ``reportingInstance`` (the Pod name).
        clock: wall clock for the timestamps.

    Raises:
        ValueError: empty ``component``.
    """
    return EventRecorder(kube, component, instance=host, clock=clock)
