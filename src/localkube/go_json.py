"""Go ``encoding/json`` type errors for JSON bodies, from a small description of Go types.

kube-apiserver decodes a built-in kind's whole body into its Go struct (``sigs.k8s.io/json``,
a case-sensitive fork of ``encoding/json``). A value of the wrong JSON type anywhere in the
body fails the request with 400 BadRequest and Go's ``UnmarshalTypeError`` text::

    json: cannot unmarshal <json kind> into Go struct field <Struct>.<path> of type <type>

where ``<Struct>`` is the innermost Go struct holding the field and ``<path>`` the dotted
field path from the body's root, without list indices or map keys
(``PodSpec.spec.template.spec.nodeSelector``). An element of a map or slice names the
element's type (``ObjectMeta.metadata.labels of type string``). Go keeps decoding after such
an error and reports the first one, so the first problem in body order is the answer.

This module only describes types (:class:`GoScalar`, :class:`GoMap`, :class:`GoSlice`,
:class:`GoStruct`) and finds the first problem (:func:`type_problem`); which kinds have which
types lives in :mod:`localkube.builtin_types`. A struct lists only the fields localkube
checks: like Go, any other key is left alone (strict field validation is a separate rule).
``null`` decodes everywhere (to the zero value).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

#: Go integer types and their ranges (an out-of-range or fractional number fails).
_INT_RANGES: Final[dict[str, tuple[int, int]]] = {
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
}


@dataclass(frozen=True)
class GoScalar:
    """A Go scalar type.

    Attributes:
        name: the Go type as ``reflect.Type.String()`` prints it (``string``, ``bool``,
            ``int32``, ``v1.LabelSelectorOperator``).
        json_kind: the JSON kind it decodes from: ``string``, ``bool`` or ``number``; a
            ``number`` whose name is an integer type (``int32``, ``int64``) also needs an
            integer literal in range.
    """

    name: str
    json_kind: str


@dataclass(frozen=True)
class GoMap:
    """A Go ``map[string]<elem>`` (``name`` as Go prints it: ``map[string]string``)."""

    name: str
    elem: GoType


@dataclass(frozen=True)
class GoSlice:
    """A Go slice ``[]<elem>`` (``name`` as Go prints it: ``[]string``)."""

    name: str
    elem: GoType


@dataclass(frozen=True)
class GoStruct:
    """A Go struct (only the fields localkube checks).

    Attributes:
        name: the type as a field of it is printed (``v1.PodTemplateSpec``).
        fields: JSON key -> Go type of the field.
    """

    name: str
    fields: Mapping[str, GoType] = field(default_factory=dict)

    @property
    def struct_name(self) -> str:
        """The bare struct name Go's error uses before the field path (``PodTemplateSpec``)."""
        return self.name.rpartition(".")[2]


GoType = GoScalar | GoMap | GoSlice | GoStruct

STRING: Final = GoScalar("string", "string")
BOOL: Final = GoScalar("bool", "bool")
INT32: Final = GoScalar("int32", "number")
STRING_MAP: Final = GoMap("map[string]string", STRING)
STRING_SLICE: Final = GoSlice("[]string", STRING)


def json_kind(value: Any) -> str:
    """The word Go's ``UnmarshalTypeError`` uses for a decoded JSON value."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _error(shown: str, struct: str, path: str, go_type: str) -> str:
    return f"json: cannot unmarshal {shown} into Go struct field {struct}.{path} of type {go_type}"


def _scalar_problem(value: Any, go_type: GoScalar, struct: str, path: str) -> str | None:
    kind = json_kind(value)
    if kind != go_type.json_kind:
        return _error(kind, struct, path, go_type.name)
    bounds = _INT_RANGES.get(go_type.name)
    if bounds is not None and not (type(value) is int and bounds[0] <= value <= bounds[1]):
        # a fraction or out of range: Go names the literal
        return _error(f"number {json.dumps(value)}", struct, path, go_type.name)
    return None


def type_problem(value: Any, go_type: GoType, *, struct: str, path: str) -> str | None:
    """Go's decoding error for ``value`` decoded into ``go_type``, or None when it decodes.

    Args:
        value: a decoded JSON value (not changed).
        go_type: the Go type it is decoded into.
        struct: the bare name of the Go struct holding the field (``DeploymentSpec``).
        path: the dotted JSON field path from the body's root (``spec.template``; ``""``
            for the root itself).

    Returns:
        ``json: cannot unmarshal ... of type ...`` for the first problem in body order.
    """
    if value is None:
        return None
    if isinstance(go_type, GoScalar):
        return _scalar_problem(value, go_type, struct, path)
    if isinstance(go_type, GoSlice):
        if not isinstance(value, list):
            return _error(json_kind(value), struct, path, go_type.name)
        return _first_problem(value, go_type.elem, struct=struct, path=path)
    if not isinstance(value, dict):
        return _error(json_kind(value), struct, path, go_type.name)
    if isinstance(go_type, GoMap):
        return _first_problem(value.values(), go_type.elem, struct=struct, path=path)
    for key, item in value.items():
        field_type = go_type.fields.get(key)
        if field_type is None:
            continue
        problem = type_problem(
            item, field_type, struct=go_type.struct_name, path=f"{path}.{key}" if path else key
        )
        if problem is not None:
            return problem
    return None


def _first_problem(elements: Iterable[Any], elem: GoType, *, struct: str, path: str) -> str | None:
    """The first element's problem: an element names the element's type, same path."""
    for element in elements:
        problem = type_problem(element, elem, struct=struct, path=path)
        if problem is not None:
            return problem
    return None
