"""The parts of Kubernetes ``ObjectMeta`` that kruntimes reads, kept with the original dict.

Only the fields components act on are parsed; everything else (``managedFields``,
``ownerReferences``, ...) stays in :attr:`ObjectMeta.raw` so ``to_dict`` round-trips an
object a component read and writes back whole.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from krt.api import _fields
from krt.api._build import builder
from krt.api.times import format_time


@dataclass(frozen=True, slots=True)
class ObjectMeta:
    """``metadata`` of a Run or Runtime.

    Attributes:
        name: object name.
        namespace: object namespace (both CRDs are namespaced).
        uid: the immutable object UID (``""`` before creation).
        resource_version: for conditional updates (``""`` before creation).
        generation: ``metadata.generation`` (0 before creation).
        creation_timestamp: set by the API server.
        deletion_timestamp: set once deletion was requested (finalizers still pending).
        finalizers: ``metadata.finalizers``.
        labels: ``metadata.labels``.
        annotations: ``metadata.annotations``.
        raw: the metadata dict as read (unparsed fields survive ``to_dict``).
    """

    name: str
    namespace: str = ""
    uid: str = ""
    resource_version: str = ""
    generation: int = 0
    creation_timestamp: datetime | None = None
    deletion_timestamp: datetime | None = None
    finalizers: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def is_deleting(self) -> bool:
        """True once ``deletionTimestamp`` is set."""
        return self.deletion_timestamp is not None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ObjectMeta:
        """Parse ``metadata``.

        Raises:
            InvalidObjectError: ``name`` is missing or a field has the wrong type.
        """
        path = "metadata."
        return _new_meta(
            _fields.string(data, "name", path) or "",
            _fields.string(data, "namespace", path) or "",
            _fields.string(data, "uid", path) or "",
            _fields.string(data, "resourceVersion", path) or "",
            _fields.integer(data, "generation", path) or 0,
            _fields.timestamp(data, "creationTimestamp", path),
            _fields.timestamp(data, "deletionTimestamp", path),
            _fields.string_list(data, "finalizers", path),
            _fields.string_map(data, "labels", path) or {},
            _fields.string_map(data, "annotations", path) or {},
            data,
        )

    def to_dict(self) -> dict[str, Any]:
        """The wire form: :attr:`raw` with the parsed fields written over it."""
        data: dict[str, Any] = dict(self.raw)
        data["name"] = self.name
        for key, value in (
            ("namespace", self.namespace),
            ("uid", self.uid),
            ("resourceVersion", self.resource_version),
        ):
            if value:
                data[key] = value
            else:
                data.pop(key, None)
        if self.generation:
            data["generation"] = self.generation
        for key, moment in (
            ("creationTimestamp", self.creation_timestamp),
            ("deletionTimestamp", self.deletion_timestamp),
        ):
            if moment is None:
                data.pop(key, None)
            elif _fields.timestamp(self.raw, key, "metadata.") != moment:
                data[key] = format_time(moment)  # changed since read; else keep the raw text
        for key, values in (("labels", self.labels), ("annotations", self.annotations)):
            if values:
                data[key] = dict(values)
            else:
                data.pop(key, None)
        if self.finalizers:
            data["finalizers"] = list(self.finalizers)
        else:
            data.pop("finalizers", None)
        return data


# Positional constructor in field order (see krt.api._build: the parsers' hot path).
_new_meta = builder(ObjectMeta)
