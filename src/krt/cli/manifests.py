"""The Run objects ``krt run`` and ``krt function create`` send: pure builders over plain data.

Seed 001 (Proposed Run Model): ``spec.source.inline`` with ``inlinePath``, and exactly one of
``spec.mode.task`` (``entrypoint``, ``args``) or ``spec.mode.function`` (``handler``,
``idleTimeoutSeconds``). Durations travel as Go duration strings
(:func:`krt.api.durations.format_duration`); ``--retries N`` is ``maxAttempts = N + 1``.
A Run without a name gets ``metadata.generateName`` so the API server picks a unique one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from krt.api.constants import API_VERSION, RUN_KIND
from krt.api.durations import format_duration

#: ``generateName`` prefix of ``krt run`` without NAME (``run-x7k2q``).
TASK_GENERATE_NAME = "run-"


@dataclass(frozen=True)
class CommonSpec:
    """Fields shared by task and function Runs.

    Attributes:
        runtime: ``spec.runtime``.
        env: ``spec.env`` entries (``{"name", "value"}``).
        timeout_seconds: ``spec.timeout`` in seconds (task: execution limit; function:
            reservation lifetime), or None.
        ttl_seconds: ``spec.ttlSecondsAfterFinished`` in seconds, or None.
        retries: extra attempts after the first (``maxAttempts - 1``), or None.
        backoff_seconds: ``spec.retryPolicy.backoff`` in seconds, or None.
    """

    runtime: str
    env: list[dict[str, str]] = field(default_factory=list)
    timeout_seconds: float | None = None
    ttl_seconds: float | None = None
    retries: int | None = None
    backoff_seconds: float | None = None


def _metadata(name: str | None, namespace: str, generate_prefix: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"namespace": namespace}
    if name:
        meta["name"] = name
    else:
        meta["generateName"] = generate_prefix
    return meta


def _spec(common: CommonSpec) -> dict[str, Any]:
    spec: dict[str, Any] = {"runtime": common.runtime}
    if common.env:
        spec["env"] = list(common.env)
    if common.timeout_seconds is not None:
        spec["timeout"] = format_duration(common.timeout_seconds)
    if common.ttl_seconds is not None:
        spec["ttlSecondsAfterFinished"] = math.ceil(common.ttl_seconds)
    if common.retries is not None or common.backoff_seconds is not None:
        policy: dict[str, Any] = {"maxAttempts": (common.retries or 0) + 1}
        if common.backoff_seconds is not None:
            policy["backoff"] = format_duration(common.backoff_seconds)
        spec["retryPolicy"] = policy
    return spec


def task_run(
    *,
    name: str | None,
    namespace: str,
    common: CommonSpec,
    source: str | None = None,
    source_path: str | None = None,
    entrypoint: str | None = None,
    args: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Build a task Run.

    Args:
        name: the Run name, or None for ``generateName: run-``.
        namespace: the Run's namespace.
        common: runtime, env, timeout, retry and TTL.
        source: inline source text (``--file``), or None.
        source_path: the file name the source is written to (``inlinePath``).
        entrypoint: ``mode.task.entrypoint`` (default: runtimed runs ``inlinePath``).
        args: ``mode.task.args`` (what follows ``--``).

    Returns:
        The Run object to create.
    """
    spec = _spec(common)
    if source is not None:
        spec["source"] = {"inline": source}
        if source_path:
            spec["source"]["inlinePath"] = source_path
    task: dict[str, Any] = {}
    if entrypoint:
        task["entrypoint"] = entrypoint
    if args:
        task["args"] = list(args)
    spec["mode"] = {"task": task}
    return {
        "apiVersion": API_VERSION,
        "kind": RUN_KIND,
        "metadata": _metadata(name, namespace, TASK_GENERATE_NAME),
        "spec": spec,
    }


def function_run(
    *,
    name: str,
    namespace: str,
    common: CommonSpec,
    source: str,
    source_path: str,
    handler: str,
    idle_timeout_seconds: float | None = None,
) -> dict[str, Any]:
    """Build a function Run (seed 001: ``mode.function.handler``, ``idleTimeoutSeconds``).

    Args:
        name: the Run name (functions are addressed by name, so it is required).
        namespace: the Run's namespace.
        common: runtime, env, timeout (reservation lifetime), retries and TTL.
        source: the handler's source text.
        source_path: the file name it is written to (``inlinePath``).
        handler: ``module.function``.
        idle_timeout_seconds: ``idleTimeoutSeconds`` (rounded up to whole seconds), or None.

    Returns:
        The Run object to create.
    """
    spec = _spec(common)
    spec["source"] = {"inline": source, "inlinePath": source_path}
    function: dict[str, Any] = {"handler": handler}
    if idle_timeout_seconds is not None:
        function["idleTimeoutSeconds"] = max(1, math.ceil(idle_timeout_seconds))
    spec["mode"] = {"function": function}
    return {
        "apiVersion": API_VERSION,
        "kind": RUN_KIND,
        "metadata": _metadata(name, namespace, ""),
        "spec": spec,
    }
