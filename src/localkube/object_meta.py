"""Decoding a custom resource's ``metadata`` into ObjectMeta, as kube-apiserver does.

kube-apiserver keeps a custom resource as unstructured JSON, but decodes its ``metadata``
into the typed ``metav1.ObjectMeta`` (apiextensions-apiserver ``schemaobjectmeta``) on every
create, update and patch: a known field of the wrong JSON type fails the request with 400
BadRequest and Go's decoding message (``json: cannot unmarshal number into Go struct field
ObjectMeta.generateName of type string``), and a field ObjectMeta does not have is dropped.
Clients that decode ObjectMeta strictly (client-go informers) would otherwise fail on the
stored object.

The map and list fields (labels, annotations, finalizers, ownerReferences) are decoded the
same way: a value that is not a JSON object/array of the right element type is a 400 with
Go's message (``... Go struct field ObjectMeta.labels of type map[string]string``), for
built-in kinds too, whose whole body kube-apiserver decodes into the typed object
(``ObjectMeta.metadata.labels``). Their content rules (label syntax, qualified finalizer
names, ownerReference fields required) stay the 422 checks of :mod:`localkube.objects` /
:mod:`localkube.metadata_rules`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
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


#: ObjectMeta's map and list fields: (Go type of the field, Go type of one element).
COLLECTION_FIELDS: Final[dict[str, tuple[str, str]]] = {
    "labels": ("map[string]string", "string"),
    "annotations": ("map[string]string", "string"),
    "finalizers": ("[]string", "string"),
    "ownerReferences": ("[]v1.OwnerReference", "v1.OwnerReference"),
}
#: v1.OwnerReference's fields and their Go types (``controller`` etc. are ``*bool``).
_OWNER_REFERENCE_FIELDS: Final[dict[str, str]] = {
    "apiVersion": "string",
    "kind": "string",
    "name": "string",
    "uid": "types.UID",
    "controller": "bool",
    "blockOwnerDeletion": "bool",
}


def _unmarshal_error(value: Any, struct: str, path: str, go_type: str) -> str:
    return (
        f"json: cannot unmarshal {_json_kind(value)} into Go struct field "
        f"{struct}.{path} of type {go_type}"
    )


def _owner_reference_problem(ref: dict[str, Any], path: str) -> str | None:
    for field, value in ref.items():
        go_type = _OWNER_REFERENCE_FIELDS.get(field)
        if go_type is None or value is None:
            continue
        expected = bool if go_type == "bool" else str
        if not isinstance(value, expected):
            return _unmarshal_error(value, "OwnerReference", f"{path}.{field}", go_type)
    return None


def _collection_problem(field: str, value: Any, path: str) -> str | None:
    """Go's decoding error for the map/list ``field`` = ``value`` (``path`` names it)."""
    go_type, element_type = COLLECTION_FIELDS[field]
    if value is None:
        return None
    is_map = go_type.startswith("map")
    if not isinstance(value, dict if is_map else list):
        return _unmarshal_error(value, "ObjectMeta", path, go_type)
    elements: Iterable[Any] = value.values() if isinstance(value, dict) else value
    for element in elements:
        if element is None:
            continue  # null decodes to the zero value; the 422 checks word it
        if element_type == "string":
            if not isinstance(element, str):
                return _unmarshal_error(element, "ObjectMeta", path, element_type)
        elif not isinstance(element, dict):
            return _unmarshal_error(element, "ObjectMeta", path, element_type)
        else:
            problem = _owner_reference_problem(element, path)
            if problem is not None:
                return problem
    return None


def check_collection_types(meta: dict[str, Any], *, kind: str, version: str) -> None:
    """Refuse a built-in object whose ``metadata`` map/list fields do not decode.

    kube-apiserver decodes a built-in kind's whole body into its Go type, so a wrong-typed
    ``metadata.labels`` (for example) fails decoding with 400, never validation's 422.

    Args:
        meta: the request body's ``metadata`` object (not changed).
        kind: the resource kind (``Pod``). version: the API version served (``v1``);
            both only word the error.

    Raises:
        ApiError: 400 BadRequest ``<Kind> in version "<version>" cannot be handled as a
            <Kind>: json: cannot unmarshal <json type> into Go struct field
            ObjectMeta.metadata.<field> of type <go type>`` for the first wrong-typed
            labels, annotations, finalizers or ownerReferences value.
    """
    for field, value in meta.items():
        if field in COLLECTION_FIELDS:
            problem = _collection_problem(field, value, f"metadata.{field}")
            if problem is not None:
                raise ApiError(
                    400,
                    "BadRequest",
                    f'{kind} in version "{version}" cannot be handled as a {kind}: {problem}',
                )


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
            ObjectMeta.<field> of type <go type>`` for the first field (in body order)
            that does not decode; an element of a map or list names the element's type
            (``ObjectMeta.labels of type string``), an ownerReference's field its struct
            (``OwnerReference.ownerReferences.uid of type types.UID``).
    """
    for field, value in meta.items():
        if field in SCALAR_FIELDS:
            problem = _decode_problem(field, value)
        elif field in COLLECTION_FIELDS:
            problem = _collection_problem(field, value, field)
        else:
            continue
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
