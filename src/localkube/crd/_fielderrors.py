"""Field errors worded the way kube-apiserver words them for custom resources.

kube-apiserver turns kube-openapi validation results into ``field.Error`` values
(``k8s.io/apimachinery/pkg/util/validation/field``) and prints them as
``<field>: <Type>: <value>: <detail>``. The helpers here build
:class:`localkube.errors.FieldError` values with the same field strings, cause types and
message bodies, including Go's formatting of the offending value (strings quoted with
``%q``, numbers with ``%v``, compound values as JSON).
"""

from __future__ import annotations

import json
import math
from typing import Any

from localkube.errors import FieldError

ROOT_FIELD = "<nil>"
"""How Kubernetes prints the empty field path (errors about the object root)."""


class UnsupportedSchema(ValueError):
    """A CRD schema that localkube refuses to serve.

    Raised at CRD create time (by :class:`localkube.crd.CRDValidator`) when the schema is not
    structural, uses a keyword localkube does not implement, or has an
    ``x-kubernetes-validations`` rule that does not compile or uses a CEL function, macro or
    construct localkube cannot evaluate faithfully. The API server answers it as a 422
    ``Invalid`` for the CRD instead of silently skipping the rule.

    Attributes:
        path: where in the schema the problem is, e.g.
            ``openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule``.
        detail: what is wrong, naming the unsupported function, macro or keyword.
    """

    def __init__(self, path: str, detail: str) -> None:
        super().__init__(f"{path}: {detail}")
        self.path = path
        self.detail = detail


def go_float(value: float) -> str:
    """Format a float the way Go's ``%v`` does (shortest repr, ``e+XX`` exponents)."""
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    if value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    text = repr(value)
    if "e" in text:
        mantissa, exponent = text.split("e")
        sign = "-" if exponent.startswith("-") else "+"
        digits = exponent.lstrip("+-").rjust(2, "0")
        return f"{mantissa}e{sign}{digits}"
    return text


def go_quote(text: str) -> str:
    """Quote a string like Go's ``%q`` / ``strconv.Quote`` (close enough: JSON escapes)."""
    return json.dumps(text, ensure_ascii=False)


def format_bad_value(value: Any) -> str:
    """Render a bad value the way ``field.Error.ErrorBody`` does."""
    if value is None:
        return go_quote("null")
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return go_float(value)
    if isinstance(value, str):
        return go_quote(value)
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True)


def _body(kind: str, value: Any, detail: str, *, with_value: bool = True) -> str:
    text = f"{kind}: {format_bad_value(value)}" if with_value else kind
    return f"{text}: {detail}" if detail else text


def required(field: str, detail: str = "") -> FieldError:
    """``Required value`` (``FieldValueRequired``)."""
    return FieldError(
        field, "FieldValueRequired", _body("Required value", "", detail, with_value=False)
    )


def forbidden(field: str, detail: str) -> FieldError:
    """``Forbidden`` (``FieldValueForbidden``)."""
    return FieldError(
        field, "FieldValueForbidden", _body("Forbidden", "", detail, with_value=False)
    )


def invalid(field: str, value: Any, detail: str) -> FieldError:
    """``Invalid value: <value>: <detail>`` (``FieldValueInvalid``)."""
    return FieldError(field, "FieldValueInvalid", _body("Invalid value", value, detail))


def type_invalid(field: str, value: Any, detail: str) -> FieldError:
    """``Invalid value: <value>: <detail>`` (``FieldValueTypeInvalid``)."""
    return FieldError(field, "FieldValueTypeInvalid", _body("Invalid value", value, detail))


def duplicate(field: str, value: Any) -> FieldError:
    """``Duplicate value: <value>`` (``FieldValueDuplicate``)."""
    return FieldError(field, "FieldValueDuplicate", _body("Duplicate value", value, ""))


def not_supported(field: str, value: Any, supported: list[Any]) -> FieldError:
    """``Unsupported value: <value>: supported values: "a", "b"`` (``FieldValueNotSupported``).

    String enum members are quoted as they are; other members as their JSON text, quoted.
    """
    names = [v if isinstance(v, str) else json.dumps(v, separators=(",", ":")) for v in supported]
    detail = "supported values: " + ", ".join(go_quote(n) for n in names) if names else ""
    return FieldError(field, "FieldValueNotSupported", _body("Unsupported value", value, detail))


def too_long(field: str, max_length: int) -> FieldError:
    """``Too long: may not be more than N bytes`` (``FieldValueTooLong``).

    Kubernetes counts ``maxLength`` in characters but words the message in bytes.
    """
    unit = "byte" if max_length == 1 else "bytes"
    detail = f"may not be more than {max_length} {unit}"
    return FieldError(field, "FieldValueTooLong", _body("Too long", "", detail, with_value=False))


def too_many(field: str, actual: int, maximum: int) -> FieldError:
    """``Too many: <actual>: must have at most N items`` (``FieldValueTooMany``)."""
    unit = "item" if maximum == 1 else "items"
    return FieldError(
        field, "FieldValueTooMany", _body("Too many", actual, f"must have at most {maximum} {unit}")
    )
