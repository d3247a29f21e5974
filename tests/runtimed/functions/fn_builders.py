"""Function Run dicts for the function lifecycle tests (as the API server returns them)."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from typing import Any

from krt.api import Run
from krt.api.constants import REGISTRATION_CLEANUP_FINALIZER

POD_UID = "pod-uid-1"
POD_NAME = "runtime-python-abc"
NOW = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)
_uids = itertools.count(1)


def fn_dict(
    *,
    name: str = "f1",
    namespace: str = "ns",
    uid: str | None = None,
    phase: str | None = "Scheduled",
    attempt: int = 1,
    pod_uid: str | None = POD_UID,
    handler: str = "main.invoke",
    inline: str = "def invoke(request):\n    return {'ok': True}\n",
    idle: int | None = None,
    timeout: str | None = None,
    retry: dict[str, Any] | None = None,
    cancel: bool = False,
    finalizer: bool = False,
    deleting: bool = False,
    start_time: datetime | None = None,
    retry_after: datetime | None = None,
    extra_status: dict[str, Any] | None = None,
    runtime: str = "python",
) -> dict[str, Any]:
    """A function Run dict; status only when ``phase`` is given."""
    function: dict[str, Any] = {"handler": handler}
    if idle is not None:
        function["idleTimeoutSeconds"] = idle
    spec: dict[str, Any] = {
        "runtime": runtime,
        "source": {"inline": inline},
        "mode": {"function": function},
    }
    if timeout is not None:
        spec["timeout"] = timeout
    if retry is not None:
        spec["retryPolicy"] = retry
    if cancel:
        spec["cancelRequested"] = True
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": uid or f"0000{next(_uids):04d}-fn",
        "resourceVersion": "10",
    }
    if finalizer:
        meta["finalizers"] = [REGISTRATION_CLEANUP_FINALIZER]
    if deleting:
        meta["deletionTimestamp"] = "2026-11-29T09:00:00Z"
    obj: dict[str, Any] = {
        "apiVersion": "kruntimes.io/v1alpha1",
        "kind": "Run",
        "metadata": meta,
        "spec": spec,
    }
    if phase is not None:
        status: dict[str, Any] = {"phase": phase, "attempt": attempt}
        if pod_uid is not None:
            status["assignedPod"] = POD_NAME
            status["assignedPodUID"] = pod_uid
        if start_time is not None:
            status["startTime"] = start_time.strftime("%Y-%m-%dT%H:%M:%SZ")
        if retry_after is not None:
            status["retryAfter"] = retry_after.strftime("%Y-%m-%dT%H:%M:%SZ")
        status.update(extra_status or {})
        obj["status"] = status
    return obj


def fn_run(**kwargs: Any) -> Run:
    """A parsed function Run (see :func:`fn_dict`)."""
    return Run.from_dict(fn_dict(**kwargs))
