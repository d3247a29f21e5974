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
(``ObjectMeta.metadata.labels``; :func:`meta_problem` with prefix ``metadata.``, called by
:mod:`localkube.builtin_types`). Their content rules (label syntax, qualified finalizer
names, ownerReference fields required) stay the 422 checks of :mod:`localkube.objects` /
:mod:`localkube.metadata_rules`.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

from localkube.errors import ApiError
from localkube.go_json import (
    BOOL,
    STRING,
    STRING_MAP,
    STRING_SLICE,
    GoScalar,
    GoSlice,
    GoStruct,
    GoType,
    json_kind,
    type_problem,
)

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


def _decode_problem(field: str, value: Any, path: str) -> str | None:
    """Go's decoding error for the scalar ``field`` = ``value`` (``path`` names it)."""
    go_type = SCALAR_FIELDS[field]
    if value is None:
        return None  # null decodes to the zero value
    if go_type == "int64":
        if type(value) is int and _INT64_MIN <= value <= _INT64_MAX:
            return None
        kind = json_kind(value)
        if kind == "number":  # a fraction or out of range: Go names the literal
            kind = f"number {json.dumps(value)}"
        return f"json: cannot unmarshal {kind} into Go struct field ObjectMeta.{path} of type int64"
    if not isinstance(value, str):
        shown = "string" if go_type == "metav1.Time" else go_type
        return (
            f"json: cannot unmarshal {json_kind(value)} into Go struct field "
            f"ObjectMeta.{path} of type {shown}"
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


#: v1.OwnerReference's fields and their Go types (``controller`` etc. are ``*bool``).
OWNER_REFERENCE: Final = GoStruct(
    "v1.OwnerReference",
    {
        "apiVersion": STRING,
        "kind": STRING,
        "name": STRING,
        "uid": GoScalar("types.UID", "string"),
        "controller": BOOL,
        "blockOwnerDeletion": BOOL,
    },
)
#: ObjectMeta's map and list fields and their Go types.
COLLECTION_FIELDS: Final[dict[str, GoType]] = {
    "labels": STRING_MAP,
    "annotations": STRING_MAP,
    "finalizers": STRING_SLICE,
    "ownerReferences": GoSlice("[]v1.OwnerReference", OWNER_REFERENCE),
}
#: ObjectMeta as checked inside a built-in body (its map and list fields; the scalar
#: fields of a built-in object are not type-checked, a documented simplification).
OBJECT_META: Final = GoStruct("v1.ObjectMeta", COLLECTION_FIELDS)


def meta_problem(meta: dict[str, Any], *, prefix: str) -> str | None:
    """Go's decoding error for the first ObjectMeta field (in body order) that fails.

    Args:
        meta: an ObjectMeta object (not changed).
        prefix: the field path before ``<field>`` in the message: ``""`` for a custom
            resource's ``metadata`` (decoded alone), ``"metadata."`` for a built-in body
            (decoded whole).

    Returns:
        ``json: cannot unmarshal ... into Go struct field ObjectMeta.<prefix><field> of type
        ...`` (or Go's time parsing error), or None when every field decodes.
    """
    for field, value in meta.items():
        if field in SCALAR_FIELDS:
            problem = _decode_problem(field, value, prefix + field)
        elif field in COLLECTION_FIELDS:
            problem = type_problem(
                value, COLLECTION_FIELDS[field], struct="ObjectMeta", path=prefix + field
            )
        else:
            continue
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
    problem = type_problem(meta, OBJECT_META, struct=kind, path="metadata")
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
    problem = meta_problem(meta, prefix="")
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
