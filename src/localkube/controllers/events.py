"""Events (``kubectl describe`` shows them), written in the background so a slow API
never delays a container or a reconcile.

The node reports Pod Events with the kubelet's reasons: Scheduled (from
``default-scheduler``), Pulled, Created, Started, Killing, BackOff, Unhealthy, Failed; the
controllers report SuccessfulCreate/SuccessfulDelete (ReplicaSets) and ScalingReplicaSet
(Deployments). Events go through a bounded queue; when it is full, new events are dropped
(they are diagnostics, never state).

Repeated Events are aggregated as client-go's ``EventCorrelator`` does: an Event with the
same source, involved object (and field path), type, reason and message as one already
written bumps that object's ``count`` and ``lastTimestamp`` (merge patch) instead of adding
an object. Without it a probe failing every second would add 86 400 Events a day per Pod
to the store. The writer remembers the last ``AGGREGATE_CACHE`` distinct Events.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import trio

from localkube.controllers.common import now_rfc3339 as rfc3339
from localkube.controllers.kubeapi import ApiStatusError, Kube, collection_path

log = logging.getLogger(__name__)

QUEUE_SIZE = 1000
#: Distinct Events remembered for aggregation (least recently seen forgotten first).
AGGREGATE_CACHE = 4096

_AggregateKey = tuple[str, ...]


def aggregate_key(event: Mapping[str, Any]) -> _AggregateKey:
    """What makes two Events the same occurrence (client-go ``getEventKey``)."""
    inv = event.get("involvedObject") or {}
    src = event.get("source") or {}
    return (
        str(src.get("component", "")),
        str(src.get("host", "")),
        str(inv.get("kind", "")),
        str(inv.get("namespace", "")),
        str(inv.get("name", "")),
        str(inv.get("uid", "")),
        str(inv.get("fieldPath", "")),
        str(event.get("type", "")),
        str(event.get("reason", "")),
        str(event.get("message", "")),
    )


class EventRecorder:
    """Queue and write ``v1`` Events.

    Args:
        kube: API client. node_name: the reporting host.
    """

    def __init__(self, kube: Kube, node_name: str) -> None:
        self.kube = kube
        self.node_name = node_name
        self._send, self._receive = trio.open_memory_channel[dict[str, Any]](QUEUE_SIZE)

    def record(
        self,
        obj: Mapping[str, Any],
        etype: str,
        reason: str,
        message: str,
        *,
        field_path: str = "",
        component: str = "kubelet",
    ) -> None:
        """Queue one Event about ``obj`` (``etype`` Normal or Warning); never blocks.

        Args:
            obj: the object concerned (``kind``/``apiVersion`` default to a v1 Pod).
            etype, reason, message: the Event's type, reason and message.
            field_path: ``involvedObject.fieldPath`` (``spec.containers{name}``).
            component: the reporting component.
        """
        meta = obj.get("metadata", {})
        now = time.time()
        involved: dict[str, Any] = {
            "apiVersion": obj.get("apiVersion", "v1"),
            "kind": obj.get("kind", "Pod"),
            "namespace": meta.get("namespace", ""),
            "name": meta.get("name", ""),
            "uid": meta.get("uid", ""),
        }
        if field_path:
            involved["fieldPath"] = field_path
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "generateName": f"{meta.get('name', 'object')}.",
                "namespace": meta.get("namespace", "default"),
            },
            "involvedObject": involved,
            "type": etype,
            "reason": reason,
            "message": message,
            "source": {"component": component, "host": self.node_name},
            "reportingComponent": component,
            "reportingInstance": self.node_name,
            "firstTimestamp": rfc3339(now),
            "lastTimestamp": rfc3339(now),
            "count": 1,
        }
        try:
            self._send.send_nowait(event)
        except trio.WouldBlock:
            log.debug("event queue full; dropped %s %s", reason, message)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Write queued Events, aggregating repeats; never returns unless cancelled."""
        written: OrderedDict[_AggregateKey, tuple[str, int]] = OrderedDict()
        task_status.started()
        async for event in self._receive:
            try:
                await self._write(event, written)
            except Exception as exc:  # noqa: BLE001 - diagnostics only: log and go on
                log.debug("event %s not written: %s", event["reason"], exc)

    async def _write(
        self, event: dict[str, Any], written: OrderedDict[_AggregateKey, tuple[str, int]]
    ) -> None:
        ns = event["metadata"]["namespace"]
        path = collection_path("v1", "events", ns)
        key = aggregate_key(event)
        seen = written.pop(key, None)
        if seen is not None:
            name, count = seen
            try:
                await self.kube.merge_patch(
                    f"{path}/{name}",
                    {"count": count + 1, "lastTimestamp": event["lastTimestamp"]},
                )
            except ApiStatusError as exc:
                if exc.code != 404:
                    raise
                # the first one is gone (deleted, expired): start a new one below
            else:
                written[key] = (name, count + 1)
                return
        created = await self.kube.create(path, event)
        written[key] = (str(created["metadata"]["name"]), int(event.get("count", 1)))
        while len(written) > AGGREGATE_CACHE:
            written.popitem(last=False)
