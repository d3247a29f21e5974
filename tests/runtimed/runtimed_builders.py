"""Builders of Run objects for the runtimed tests (plain dicts, as the API server returns them)."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

from krt.api import Run
from krt.api.patches import apply_merge_patch

POD_UID = "pod-uid-1"
POD_NAME = "runtime-bash-abc"
NOW = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)

_uids = itertools.count(1)


def run_dict(
    *,
    name: str = "r1",
    namespace: str = "ns",
    uid: str | None = None,
    phase: str | None = "Scheduled",
    attempt: int = 1,
    pod_uid: str | None = POD_UID,
    source: dict[str, Any] | None = None,
    task: dict[str, Any] | None = None,
    timeout: str | None = None,
    retry: dict[str, Any] | None = None,
    cancel: bool = False,
    start_time: datetime | None = None,
    retry_after: datetime | None = None,
    rv: str = "10",
    function: bool = False,
) -> dict[str, Any]:
    """A Run dict; status only when ``phase`` is given."""
    spec: dict[str, Any] = {
        "runtime": "bash",
        "source": source if source is not None else {"inline": "echo hi\n"},
        "mode": {"function": {"handler": "main.handle"}}
        if function
        else {"task": task if task is not None else {}},
    }
    if timeout is not None:
        spec["timeout"] = timeout
    if retry is not None:
        spec["retryPolicy"] = retry
    if cancel:
        spec["cancelRequested"] = True
    obj: dict[str, Any] = {
        "apiVersion": "kruntimes.io/v1alpha1",
        "kind": "Run",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid or f"run-uid-{next(_uids)}",
            "resourceVersion": rv,
        },
        "spec": spec,
    }
    if phase is not None:
        status: dict[str, Any] = {"phase": phase, "attempt": attempt}
        if pod_uid is not None:
            status["assignedPod"] = POD_NAME
            status["assignedPodUID"] = pod_uid
        if start_time is not None:
            status["startTime"] = start_time.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        if retry_after is not None:
            status["retryAfter"] = retry_after.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        obj["status"] = status
    return obj


def make_run(**kwargs: Any) -> Run:
    """A parsed Run (see :func:`run_dict`)."""
    return Run.from_dict(run_dict(**kwargs))


def running(**kwargs: Any) -> Run:
    """A Running Run claimed one second before :data:`NOW`."""
    kwargs.setdefault("start_time", NOW - timedelta(seconds=1))
    return make_run(phase="Running", **kwargs)


def patched(run: Run, patch: dict[str, Any]) -> Run:
    """The Run after a status merge patch."""
    data = run.to_dict()
    data["status"] = apply_merge_patch(data.get("status"), patch)
    return Run.from_dict(data)
