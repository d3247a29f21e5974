"""Status writes that can never overwrite someone else's newer state.

DESIGN.md, Invariants, and seed 003 ("only reconciliation updates Run.status"): every status
write is a conditional update. :func:`write_status` PUTs the new status against the
resourceVersion the reconciler read from its cache; if anything changed meanwhile the server
answers 409 and :class:`~krt.kube.errors.Conflict` propagates. The caller does not retry on
the spot with a blind write: it lets the informer deliver the newer object and reconciles
again from that (the work queue requeues the key).

Pod conditions have several writers (the kubelet, runtimed's readiness gate
``kruntimes.io/RuntimedReady``). :func:`patch_pod_condition` sends a strategic merge patch to
``pods/<name>/status`` whose ``conditions`` list is merged by ``type``, so each writer
changes only its own condition (docs/design-notes.md, "runtimed heartbeat").
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from krt.kube.interface import KubeClient, Obj
from krt.kube.resources import PODS, ResourceRef

__all__ = ["patch_pod_condition", "status_unchanged", "write_status"]

CONDITION_STATUSES = frozenset({"True", "False", "Unknown"})


def status_unchanged(obj: Mapping[str, Any], new_status: Mapping[str, Any]) -> bool:
    """Whether writing ``new_status`` would be a no-op (skip the request)."""
    return obj.get("status") == new_status


async def write_status(
    kube: KubeClient,
    ref: ResourceRef,
    obj: Mapping[str, Any],
    new_status: Mapping[str, Any],
) -> Obj:
    """Replace ``obj``'s status with ``new_status``, conditional on ``obj``'s resourceVersion.

    ``obj`` is not modified (cached objects are shared). When ``new_status`` equals the
    current status no request is sent and ``obj`` (copied) is returned.

    Args:
        kube: the client.
        ref: the resource type (it must have the status subresource).
        obj: the object as last read (from the informer cache), with
            ``metadata.resourceVersion``.
        new_status: the complete new ``status``.

    Returns:
        The stored object; its new resourceVersion is what the next write must use.

    Raises:
        Conflict: ``obj`` is stale (someone wrote after it was read): re-read and retry in
            the next reconcile; never overwrite blindly.
        NotFound: the object is gone. Invalid: the status fails the schema (``causes``
            names the fields).
        ApiError, ConnectionFailed: see :meth:`krt.kube.client.Kube.request`.
        ValueError: ``obj`` lacks name, namespace or resourceVersion.
    """
    if status_unchanged(obj, new_status):
        return copy.deepcopy(dict(obj))
    body = {key: value for key, value in obj.items() if key != "status"}
    body["status"] = new_status
    return await kube.replace_status(ref, body)


def _check_condition(condition: Mapping[str, Any]) -> None:
    ctype = condition.get("type")
    if not isinstance(ctype, str) or not ctype:
        raise ValueError("condition.type must be a non-empty string")
    status = condition.get("status")
    if status not in CONDITION_STATUSES:
        raise ValueError(
            f"condition {ctype}: status must be one of {sorted(CONDITION_STATUSES)}, got {status!r}"
        )


async def patch_pod_condition(
    kube: KubeClient,
    namespace: str,
    name: str,
    condition: Mapping[str, Any],
) -> Obj:
    """Set one Pod condition without touching the others (strategic merge on ``status``).

    Args:
        kube: the client.
        namespace: the Pod's namespace.
        name: the Pod's name.
        condition: ``{"type", "status", "reason"?, "message"?, "lastTransitionTime"?,
            "lastProbeTime"?}``; it replaces the condition of the same ``type``.

    Returns:
        The patched Pod.

    Raises:
        NotFound: no such Pod.
        ApiError, ConnectionFailed: see :meth:`krt.kube.client.Kube.request`.
        ValueError: the condition has no ``type`` or an invalid ``status``.
    """
    _check_condition(condition)
    patch = {"status": {"conditions": [dict(condition)]}}
    return await kube.patch(PODS, name, namespace, patch, type="strategic", subresource="status")
