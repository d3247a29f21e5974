"""The ``Run`` type (kruntimes.io/v1alpha1): spec and status as frozen dataclasses.

Seeds 001 (Proposed Run Model) and 000 (Run Status API). ``from_dict`` parses what the API
server returns (already validated by the CRD, :mod:`krt.api.schema`), checking only types, so
it stays cheap on runtimed's hot paths; ``to_dict`` writes the wire form back (camelCase,
unset fields omitted). A test checks that every field written here exists in the CRD schema
and every schema field is read here.

Status edits are not made on these objects: decisions return
:data:`~krt.api.patches.StatusPatch` dicts (see :mod:`krt.api.conditions`,
:mod:`krt.api.retry`).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from krt.api import _fields
from krt.api._build import builder
from krt.api.conditions import Condition, parse_conditions
from krt.api.constants import API_VERSION, RUN_KIND
from krt.api.durations import parse_duration
from krt.api.errors import InvalidObjectError
from krt.api.meta import ObjectMeta
from krt.api.phases import Phase, phase_of
from krt.api.resources import parse_resources, run_requests
from krt.api.times import format_time

#: Default file name inline source is written to when ``inlinePath`` is unset (issue 6).
DEFAULT_INLINE_PATH = "script"


@dataclass(frozen=True, slots=True)
class EnvVar:
    """One ``spec.env`` entry (a list-map keyed by ``name``)."""

    name: str
    value: str = ""


@dataclass(frozen=True, slots=True)
class Source:
    """``spec.source``: where the code comes from.

    Either ``inline`` (written to ``inline_path``, default ``script``) or ``repo_url`` checked
    out at ``commit_sha`` (40 hex digits). The CRD enforces the combinations.
    """

    inline: str | None = None
    inline_path: str | None = None
    repo_url: str | None = None
    commit_sha: str | None = None

    @property
    def effective_inline_path(self) -> str:
        """The file inline source is written to (``inlinePath`` or ``script``)."""
        return self.inline_path or DEFAULT_INLINE_PATH

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Source:
        """Parse ``spec.source``."""
        path = "spec.source."
        return _new_source(
            _fields.string(data, "inline", path),
            _fields.string(data, "inlinePath", path),
            _fields.string(data, "repoURL", path),
            _fields.string(data, "commitSHA", path),
        )

    def to_dict(self) -> dict[str, Any]:
        """The wire form."""
        return _omit_none(
            {
                "inline": self.inline,
                "inlinePath": self.inline_path,
                "repoURL": self.repo_url,
                "commitSHA": self.commit_sha,
            }
        )


@dataclass(frozen=True, slots=True)
class TaskMode:
    """``spec.mode.task``: run a process once (seed 001)."""

    entrypoint: str | None = None
    args: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The wire form of the ``task`` object."""
        data: dict[str, Any] = {}
        if self.entrypoint is not None:
            data["entrypoint"] = self.entrypoint
        if self.args:
            data["args"] = list(self.args)
        return data


@dataclass(frozen=True, slots=True)
class FunctionMode:
    """``spec.mode.function``: register ``handler`` and serve invokes until the Run ends."""

    handler: str
    idle_timeout_seconds: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """The wire form of the ``function`` object."""
        data: dict[str, Any] = {"handler": self.handler}
        if self.idle_timeout_seconds is not None:
            data["idleTimeoutSeconds"] = self.idle_timeout_seconds
        return data


def _parse_mode(data: Mapping[str, Any] | None) -> TaskMode | FunctionMode:
    if data is None:
        return TaskMode()
    task = _fields.mapping(data, "task", "spec.mode.")
    function = _fields.mapping(data, "function", "spec.mode.")
    if (task is None) == (function is None):
        raise InvalidObjectError(
            "spec.mode", "exactly one of spec.mode.task or spec.mode.function must be set"
        )
    if task is not None:
        path = "spec.mode.task."
        return _new_task_mode(
            _fields.string(task, "entrypoint", path), _fields.string_list(task, "args", path)
        )
    assert function is not None
    path = "spec.mode.function."
    return FunctionMode(
        handler=_fields.required_string(function, "handler", path),
        idle_timeout_seconds=_fields.integer(function, "idleTimeoutSeconds", path),
    )


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """``spec.retryPolicy`` (seed 003 Retry; semantics in :mod:`krt.api.retry`).

    Attributes:
        max_attempts: total attempts including the first; 1 (the default) means no retry.
        backoff: Go duration before the second attempt, doubling for each later one; ``None``
            uses :data:`krt.api.retry.DEFAULT_BACKOFF_SECONDS`.
        retryable_reasons: failure reasons that may retry; ``None`` means every retryable
            reason (:data:`krt.api.retry.RETRYABLE_REASONS`).
    """

    max_attempts: int = 1
    backoff: str | None = None
    retryable_reasons: tuple[str, ...] | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RetryPolicy:
        """Parse ``spec.retryPolicy``."""
        path = "spec.retryPolicy."
        reasons = (
            _fields.string_list(data, "retryableReasons", path)
            if data.get("retryableReasons") is not None
            else None
        )
        return _new_retry_policy(
            _fields.integer(data, "maxAttempts", path) or 1,
            _fields.string(data, "backoff", path),
            reasons,
        )

    def to_dict(self) -> dict[str, Any]:
        """The wire form."""
        return _omit_none(
            {
                "maxAttempts": self.max_attempts,
                "backoff": self.backoff,
                "retryableReasons": list(self.retryable_reasons)
                if self.retryable_reasons is not None
                else None,
            }
        )


@dataclass(frozen=True, slots=True)
class RunSpec:
    """``Run.spec``.

    Everything except ``cancel_requested`` and ``ttl_seconds_after_finished`` is immutable
    after creation (seed 000, Spec Transition Rules; enforced by the CRD).
    """

    runtime: str
    source: Source | None = None
    mode: TaskMode | FunctionMode = field(default_factory=TaskMode)
    env: tuple[EnvVar, ...] = ()
    timeout: str | None = None
    retry_policy: RetryPolicy | None = None
    cancel_requested: bool = False
    ttl_seconds_after_finished: int | None = None
    requests: Mapping[str, int] | None = None

    @property
    def is_function(self) -> bool:
        """True for a function-mode Run."""
        return isinstance(self.mode, FunctionMode)

    @property
    def timeout_seconds(self) -> float | None:
        """``spec.timeout`` in seconds, or ``None`` when unset.

        A stored value longer than Go's maximum duration (admitted before the CRD bounded
        it) reads as that maximum, about 292 years.

        Raises:
            DurationError: the stored string is not a positive Go duration.
        """
        if self.timeout is None:
            return None
        return parse_duration(self.timeout, field="spec.timeout", positive=True, clamp=True)

    @property
    def effective_requests(self) -> dict[str, int]:
        """``resources.requests`` with ``runs`` defaulted to 1."""
        return run_requests(self.requests)

    @property
    def effective_retry_policy(self) -> RetryPolicy:
        """``retryPolicy`` or the default (one attempt)."""
        return self.retry_policy or RetryPolicy()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunSpec:
        """Parse ``spec``.

        Raises:
            InvalidObjectError: a field has the wrong type, ``runtime`` is missing, or both or
                neither of ``mode.task`` / ``mode.function`` are set.
            ResourceError: ``resources.requests`` is malformed.
        """
        path = "spec."
        source = _fields.mapping(data, "source", path)
        retry = _fields.mapping(data, "retryPolicy", path)
        resources = _fields.mapping(data, "resources", path)
        env_raw = data.get("env")
        env: list[EnvVar] = []
        if env_raw is not None:
            if not isinstance(env_raw, list):
                raise InvalidObjectError("spec.env", "must be a list of {name, value}")
            for index, item in enumerate(env_raw):
                if type(item) is not dict and not isinstance(item, Mapping):
                    raise InvalidObjectError(f"spec.env[{index}]", "must be an object")
                name = item.get("name")
                value = item.get("value")
                if type(name) is not str or not name or not (value is None or type(value) is str):
                    # the checked readers (and the item's path) only off the common case
                    item_path = f"spec.env[{index}]."
                    name = _fields.required_string(item, "name", item_path)
                    value = _fields.string(item, "value", item_path)
                env.append(_new_env_var(name, value or ""))
        return _new_spec(
            _fields.required_string(data, "runtime", path),
            Source.from_dict(source) if source is not None else None,
            _parse_mode(_fields.mapping(data, "mode", path)),
            tuple(env),
            _fields.string(data, "timeout", path),
            RetryPolicy.from_dict(retry) if retry is not None else None,
            bool(_fields.boolean(data, "cancelRequested", path)),
            _fields.integer(data, "ttlSecondsAfterFinished", path),
            parse_resources(resources.get("requests"), field="spec.resources.requests")
            if resources is not None and resources.get("requests") is not None
            else None,
        )

    def to_dict(self) -> dict[str, Any]:
        """The wire form."""
        mode = (
            {"function": self.mode.to_dict()}
            if isinstance(self.mode, FunctionMode)
            else {"task": self.mode.to_dict()}
        )
        data: dict[str, Any] = {"runtime": self.runtime, "mode": mode}
        if self.source is not None:
            data["source"] = self.source.to_dict()
        if self.env:
            data["env"] = [{"name": e.name, "value": e.value} for e in self.env]
        if self.timeout is not None:
            data["timeout"] = self.timeout
        if self.retry_policy is not None:
            data["retryPolicy"] = self.retry_policy.to_dict()
        if self.cancel_requested:
            data["cancelRequested"] = True
        if self.ttl_seconds_after_finished is not None:
            data["ttlSecondsAfterFinished"] = self.ttl_seconds_after_finished
        if self.requests is not None:
            data["resources"] = {"requests": dict(self.requests)}
        return data


class EndpointProtocol(StrEnum):
    """``status.endpoint.protocol`` (seed 000: HTTPS is the public protocol)."""

    HTTP = "HTTP"
    HTTPS = "HTTPS"


@dataclass(frozen=True, slots=True)
class Endpoint:
    """``status.endpoint`` of a function Run.

    Attributes:
        protocol: HTTPS (HTTP only for local development).
        url: the invoke URL (:func:`krt.api.endpoint.function_endpoint_url`), <= 2048 bytes.
        ca_bundle: PEM trust bundle (decoded bytes, <= 16 KiB), or ``None`` when the gateway
            certificate chains to a root the client already trusts.
    """

    protocol: EndpointProtocol
    url: str
    ca_bundle: bytes | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Endpoint:
        """Parse ``status.endpoint`` (``caBundle`` is base64 on the wire)."""
        path = "status.endpoint."
        try:
            protocol = EndpointProtocol(str(data.get("protocol")))
        except ValueError:
            raise InvalidObjectError(
                "status.endpoint.protocol", f"must be HTTP or HTTPS, got {data.get('protocol')!r}"
            ) from None
        encoded = _fields.string(data, "caBundle", path)
        try:
            bundle = base64.b64decode(encoded, validate=True) if encoded is not None else None
        except binascii.Error:
            raise InvalidObjectError("status.endpoint.caBundle", "is not valid base64") from None
        return cls(
            protocol=protocol, url=_fields.required_string(data, "url", path), ca_bundle=bundle
        )

    def to_dict(self) -> dict[str, Any]:
        """The wire form."""
        data: dict[str, Any] = {"protocol": self.protocol.value, "url": self.url}
        if self.ca_bundle is not None:
            data["caBundle"] = base64.b64encode(self.ca_bundle).decode("ascii")
        return data


@dataclass(frozen=True, slots=True)
class RunStatus:
    """``Run.status`` (seed 000, Run Status API).

    Attributes:
        phase: lifecycle phase (Pending when the Run has no status yet).
        reason: machine reason of the latest failure, retry or terminal outcome.
        message: human-readable, bounded summary.
        assigned_pod: Runtime Pod name; set and cleared together with ``assigned_pod_uid``.
        assigned_pod_uid: that Pod's UID (disambiguates Pod-name reuse).
        endpoint: function Runs: where to invoke.
        start_time: when runtimed claimed the Run (``spec.timeout`` counts from here).
        completion_time: when the Run became terminal.
        attempt: current attempt, 1-based; 0 before the first bind.
        retry_after: while in retry backoff, when the next attempt may start.
        outputs: a Succeeded task's bounded outputs.
        conditions: list-map by type (``Scheduled``, ``Running``, ``Ready``).
        observed_generation: ``metadata.generation`` the last status writer saw.
    """

    phase: Phase = Phase.PENDING
    reason: str | None = None
    message: str | None = None
    assigned_pod: str | None = None
    assigned_pod_uid: str | None = None
    endpoint: Endpoint | None = None
    start_time: datetime | None = None
    completion_time: datetime | None = None
    attempt: int = 0
    retry_after: datetime | None = None
    outputs: Mapping[str, str] | None = None
    conditions: tuple[Condition, ...] = ()
    observed_generation: int | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunStatus:
        """Parse ``status`` (an empty dict is a fresh Pending status)."""
        path = "status."
        endpoint = _fields.mapping(data, "endpoint", path)
        try:
            phase = phase_of(_fields.string(data, "phase", path))
        except ValueError as error:
            raise InvalidObjectError("status.phase", str(error)) from None
        return _new_status(
            phase,
            _fields.string(data, "reason", path),
            _fields.string(data, "message", path),
            _fields.string(data, "assignedPod", path),
            _fields.string(data, "assignedPodUID", path),
            Endpoint.from_dict(endpoint) if endpoint is not None else None,
            _fields.timestamp(data, "startTime", path),
            _fields.timestamp(data, "completionTime", path),
            _fields.integer(data, "attempt", path) or 0,
            _fields.timestamp(data, "retryAfter", path),
            _fields.string_map(data, "outputs", path),
            parse_conditions(data.get("conditions")),
            _fields.integer(data, "observedGeneration", path),
        )

    def to_dict(self) -> dict[str, Any]:
        """The wire form."""
        data = _omit_none(
            {
                "phase": self.phase.value,
                "reason": self.reason,
                "message": self.message,
                "assignedPod": self.assigned_pod,
                "assignedPodUID": self.assigned_pod_uid,
                "endpoint": self.endpoint.to_dict() if self.endpoint is not None else None,
                "startTime": _time_or_none(self.start_time),
                "completionTime": _time_or_none(self.completion_time),
                "attempt": self.attempt or None,
                "retryAfter": _time_or_none(self.retry_after),
                "outputs": dict(self.outputs) if self.outputs is not None else None,
                "observedGeneration": self.observed_generation,
            }
        )
        if self.conditions:
            data["conditions"] = [condition.to_dict() for condition in self.conditions]
        return data


@dataclass(frozen=True, slots=True)
class Run:
    """A kruntimes.io/v1alpha1 ``Run``.

    Attributes:
        metadata: object metadata.
        spec: the desired execution.
        status: the observed lifecycle state.
    """

    metadata: ObjectMeta
    spec: RunSpec
    status: RunStatus = field(default_factory=RunStatus)

    @property
    def key(self) -> str:
        """``namespace/name``: the key of per-object work queues."""
        return f"{self.metadata.namespace}/{self.metadata.name}"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Run:
        """Parse a Run as returned by the API server.

        Args:
            data: the object (``apiVersion``/``kind`` are checked when present).

        Raises:
            InvalidObjectError: wrong ``apiVersion``/``kind`` or a malformed field (the error
                names the field).
            ResourceError: malformed ``resources.requests``.
        """
        _fields.check_kind(data, API_VERSION, RUN_KIND)
        metadata = _fields.mapping(data, "metadata", "") or {}
        spec = _fields.mapping(data, "spec", "")
        if spec is None:
            raise InvalidObjectError("spec", "is required")
        status = _fields.mapping(data, "status", "") or {}
        return _new_run(
            ObjectMeta.from_dict(metadata),
            RunSpec.from_dict(spec),
            RunStatus.from_dict(status),
        )

    def to_dict(self) -> dict[str, Any]:
        """The full wire form (``apiVersion``, ``kind``, ``metadata``, ``spec``, ``status``)."""
        data: dict[str, Any] = {
            "apiVersion": API_VERSION,
            "kind": RUN_KIND,
            "metadata": self.metadata.to_dict(),
            "spec": self.spec.to_dict(),
        }
        status = self.status.to_dict()
        if status != {"phase": Phase.PENDING.value}:
            data["status"] = status
        return data


# Positional constructors in field order (see krt.api._build: the parsers' hot path).
_new_env_var = builder(EnvVar)
_new_source = builder(Source)
_new_task_mode = builder(TaskMode)
_new_retry_policy = builder(RetryPolicy)
_new_spec = builder(RunSpec)
_new_status = builder(RunStatus)
_new_run = builder(Run)


def _omit_none(data: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in data.items() if value is not None}


def _time_or_none(moment: datetime | None) -> str | None:
    return format_time(moment) if moment is not None else None
