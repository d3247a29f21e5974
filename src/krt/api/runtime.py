"""The ``Runtime`` type (kruntimes.io/v1alpha1): a pool of warm Runtime Pods.

Issue 5: ``spec.replicas``, ``spec.capacity.resources`` (per Pod, default ``runs: 2``),
``spec.template`` (a PodTemplateSpec whose runtime container runs the Runtime Server; kept as
a plain dict, the Runtime controller edits it), ``spec.daemonImage`` (the runtimed sidecar
image, a default when unset) and ``spec.port`` (the Runtime Server's gRPC port in the Pod).
Status: ``readyReplicas`` and conditions.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from krt.api import _fields
from krt.api.conditions import Condition, parse_conditions
from krt.api.constants import API_VERSION, DEFAULT_RUNTIME_SERVER_PORT, RUNTIME_KIND
from krt.api.errors import InvalidObjectError
from krt.api.meta import ObjectMeta
from krt.api.resources import parse_resources, runtime_capacity


@dataclass(frozen=True, slots=True)
class RuntimeSpec:
    """``Runtime.spec``.

    Attributes:
        template: the Pod template (``metadata`` and ``spec`` with at least one container).
        replicas: number of Runtime Pods (default 1).
        capacity: ``capacity.resources`` as written (no defaults); see
            :attr:`effective_capacity`.
        daemon_image: runtimed sidecar image, or ``None`` for the control plane's default.
        port: the Runtime Server's gRPC port inside the Pod.
    """

    template: Mapping[str, Any]
    replicas: int = 1
    capacity: Mapping[str, int] | None = None
    daemon_image: str | None = None
    port: int = DEFAULT_RUNTIME_SERVER_PORT

    @property
    def effective_capacity(self) -> dict[str, int]:
        """Per-Pod capacity with ``runs`` defaulted to 2."""
        return runtime_capacity(self.capacity)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RuntimeSpec:
        """Parse ``spec``.

        Raises:
            InvalidObjectError: ``template`` is missing or a field has the wrong type.
            ResourceError: ``capacity.resources`` is malformed.
        """
        path = "spec."
        template = _fields.mapping(data, "template", path)
        if template is None:
            raise InvalidObjectError("spec.template", "is required")
        capacity = _fields.mapping(data, "capacity", path)
        replicas = _fields.integer(data, "replicas", path)
        port = _fields.integer(data, "port", path)
        return cls(
            template=template,
            replicas=1 if replicas is None else replicas,
            capacity=parse_resources(capacity.get("resources"), field="spec.capacity.resources")
            if capacity is not None and capacity.get("resources") is not None
            else None,
            daemon_image=_fields.string(data, "daemonImage", path),
            port=DEFAULT_RUNTIME_SERVER_PORT if port is None else port,
        )

    def to_dict(self) -> dict[str, Any]:
        """The wire form."""
        data: dict[str, Any] = {
            "replicas": self.replicas,
            "template": copy.deepcopy(dict(self.template)),
            "port": self.port,
        }
        if self.capacity is not None:
            data["capacity"] = {"resources": dict(self.capacity)}
        if self.daemon_image is not None:
            data["daemonImage"] = self.daemon_image
        return data


@dataclass(frozen=True, slots=True)
class RuntimeStatus:
    """``Runtime.status``.

    Attributes:
        ready_replicas: Runtime Pods ready (Pod Ready, runtimed heartbeat fresh).
        replicas: Runtime Pods that exist.
        observed_generation: ``metadata.generation`` the controller last reconciled.
        conditions: list-map by type (``Available``, ``Progressing``).
    """

    ready_replicas: int = 0
    replicas: int = 0
    observed_generation: int | None = None
    conditions: tuple[Condition, ...] = ()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RuntimeStatus:
        """Parse ``status``."""
        path = "status."
        return cls(
            ready_replicas=_fields.integer(data, "readyReplicas", path) or 0,
            replicas=_fields.integer(data, "replicas", path) or 0,
            observed_generation=_fields.integer(data, "observedGeneration", path),
            conditions=parse_conditions(data.get("conditions")),
        )

    def to_dict(self) -> dict[str, Any]:
        """The wire form."""
        data: dict[str, Any] = {"readyReplicas": self.ready_replicas, "replicas": self.replicas}
        if self.observed_generation is not None:
            data["observedGeneration"] = self.observed_generation
        if self.conditions:
            data["conditions"] = [condition.to_dict() for condition in self.conditions]
        return data


@dataclass(frozen=True, slots=True)
class Runtime:
    """A kruntimes.io/v1alpha1 ``Runtime``."""

    metadata: ObjectMeta
    spec: RuntimeSpec
    status: RuntimeStatus = field(default_factory=RuntimeStatus)

    @property
    def key(self) -> str:
        """``namespace/name``."""
        return f"{self.metadata.namespace}/{self.metadata.name}"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Runtime:
        """Parse a Runtime as returned by the API server.

        Raises:
            InvalidObjectError: wrong ``apiVersion``/``kind`` or a malformed field.
            ResourceError: malformed ``capacity.resources``.
        """
        _fields.check_kind(data, API_VERSION, RUNTIME_KIND)
        spec = _fields.mapping(data, "spec", "")
        if spec is None:
            raise InvalidObjectError("spec", "is required")
        return cls(
            metadata=ObjectMeta.from_dict(_fields.mapping(data, "metadata", "") or {}),
            spec=RuntimeSpec.from_dict(spec),
            status=RuntimeStatus.from_dict(_fields.mapping(data, "status", "") or {}),
        )

    def to_dict(self) -> dict[str, Any]:
        """The full wire form."""
        data: dict[str, Any] = {
            "apiVersion": API_VERSION,
            "kind": RUNTIME_KIND,
            "metadata": self.metadata.to_dict(),
            "spec": self.spec.to_dict(),
        }
        if self.status != RuntimeStatus():
            data["status"] = self.status.to_dict()
        return data
