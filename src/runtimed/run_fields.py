"""Small readers of Run object fields shared by the task and function lifecycles.

Both lifecycles key their work queues by ``namespace/name`` and fence on the Run's UID,
resourceVersion and ``status.assignedPodUID``; one definition keeps them reading the same
fields the same way (missing fields read as ``""``).
"""

from __future__ import annotations

from krt.kube.client import Obj

__all__ = ["assigned_pod_uid", "queue_key", "resource_version", "run_uid"]


def run_uid(obj: Obj) -> str:
    """``metadata.uid`` (``""`` when absent)."""
    return str((obj.get("metadata") or {}).get("uid") or "")


def resource_version(obj: Obj) -> str:
    """``metadata.resourceVersion`` (``""`` when absent)."""
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def queue_key(obj: Obj) -> str:
    """The work-queue key ``namespace/name``."""
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def assigned_pod_uid(obj: Obj | None) -> str:
    """``status.assignedPodUID`` (``""`` when unassigned or ``obj`` is None)."""
    if obj is None:
        return ""
    return str((obj.get("status") or {}).get("assignedPodUID") or "")
