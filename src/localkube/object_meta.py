"""Decoding a custom resource's ``metadata`` into ObjectMeta, as kube-apiserver does.

kube-apiserver keeps a custom resource as unstructured JSON, but decodes its ``metadata``
into the typed ``metav1.ObjectMeta`` (apiextensions-apiserver ``schemaobjectmeta``) on every
create, update and patch: a known field of the wrong JSON type fails the request with 400
BadRequest and Go's decoding message (``json: cannot unmarshal number into Go struct field
ObjectMeta.generateName of type string``), and a field ObjectMeta does not have is dropped.
Clients that decode ObjectMeta strictly (client-go informers) would otherwise fail on the
stored object.

The map and list fields (labels, annotations, finalizers, ownerReferences) keep the 422
checks of :mod:`localkube.objects` / :mod:`localkube.metadata_rules`; this module decides
the scalar fields and which keys exist.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

from localkube.errors import ApiError

#: ObjectMeta's scalar fields and the Go type each is decoded into.
SCALAR_FIELDS: Final[dict[str, str]] = {
    "name": "string",
    "generateName": "string",
    "namespace": "string",
    "selfLink": "string",
    "uid": "types.UID",
    "resourceVersion": "string",
    "generation": "int64",
    "creationTimestamp": "metav1.Time",
    "deletionTimestamp": "metav1.Time",
    "deletionGracePeriodSeconds": "int64",
}
#: Every JSON key of ObjectMeta (apimachinery 1.32); any other ``metadata`` key is dropped.
KNOWN_FIELDS: Final = frozenset(
    {*SCALAR_FIELDS, "labels", "annotations", "ownerReferences", "finalizers", "managedFields"}
)
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1
#: RFC 3339 as Go's ``time.Parse(time.RFC3339, ...)`` accepts it (metav1.Time's decoder).
_RFC3339: Final = re.compile(
    r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})", re.ASCII
)


def _json_kind(value: Any) -> str:
    """The word Go's ``UnmarshalTypeError`` uses for a JSON value."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _decode_problem(field: str, value: Any) -> str | None:
    """Go's decoding error for ``metadata.<field>`` = ``value``, or None when it decodes."""
    go_type = SCALAR_FIELDS[field]
    if value is None:
        return None  # null decodes to the zero value
    if go_type == "int64":
        if type(value) is int and _INT64_MIN <= value <= _INT64_MAX:
            return None
        kind = _json_kind(value)
        if kind == "number":  # a fraction or out of range: Go names the literal
            kind = f"number {json.dumps(value)}"
        return (
            f"json: cannot unmarshal {kind} into Go struct field ObjectMeta.{field} of type int64"
        )
    if not isinstance(value, str):
        shown = "string" if go_type == "metav1.Time" else go_type
        return (
            f"json: cannot unmarshal {_json_kind(value)} into Go struct field "
            f"ObjectMeta.{field} of type {shown}"
        )
    if go_type == "metav1.Time" and not _RFC3339.fullmatch(value):
        # Go names the layout element it stopped at; only the year is worded exactly
        detail = (
            f'cannot parse "{value}" as "2006"'
            if not re.match(r"\d{4}", value, re.ASCII)
            else "not an RFC 3339 time"
        )
        return f'parsing time "{value}" as "2006-01-02T15:04:05Z07:00": {detail}'
    return None


def decode_object_meta(meta: dict[str, Any], *, kind: str, version: str) -> None:
    """Check ``meta`` as ObjectMeta decoding does; drop the keys ObjectMeta lacks, and nulls.

    Implements kube-apiserver's decoding of a custom resource's ``metadata`` (see the
    module docstring). ``meta`` is changed in place only when it decodes: on error nothing
    is changed.

    Args:
        meta: the request body's ``metadata`` object.
        kind: the resource kind (``Run``). version: the API version served (``v1alpha1``);
            both only word the error.

    Raises:
        ApiError: 400 BadRequest ``<Kind> in version "<version>" cannot be handled as a
            <Kind>: json: cannot unmarshal <json type> into Go struct field
            ObjectMeta.<field> of type <go type>`` for the first wrong-typed scalar field.
    """
    for field in SCALAR_FIELDS:
        if field in meta:
            problem = _decode_problem(field, meta[field])
            if problem is not None:
                raise ApiError(
                    400,
                    "BadRequest",
                    f'{kind} in version "{version}" cannot be handled as a {kind}: {problem}',
                )
    for key in [
        k for k in meta if k not in KNOWN_FIELDS or (k in SCALAR_FIELDS and meta[k] is None)
    ]:
        del meta[key]
