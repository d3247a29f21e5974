"""Server-side field validation of built-in kinds (``fieldValidation=Strict|Warn|Ignore``).

kube-apiserver decodes a built-in body into its Go type; with ``fieldValidation`` Strict or
Warn the decoder also reports every JSON key the type does not declare (case-sensitive,
at any depth, ``spec.containers[0].imagee``). Strict fails the request, Warn (the default
when the parameter is absent, so what controllers and kr8s get) answers normally with one
``Warning`` header per unknown field, Ignore says nothing. kubectl 1.32 sends Strict.

What is checked, as kube-apiserver does (``endpoints/handlers`` create, update, patch):

* create and update: the request body. Strict answers 400 BadRequest ``<Kind> in version
  "<v>" cannot be handled as a <Kind>: strict decoding error: unknown field "a", unknown
  field "b"`` (body order, at most 100);
* every patch type: the patched object. Strict answers 422 Invalid with no kind or name
  (kubectl prints "The request is invalid: ...") and one cause on ``patch``:
  ``Invalid value: "<patched object JSON>"`` for JSON and merge patches, ``"<the patch as
  Go prints a map>"`` for strategic merge patches, then ``: strict decoding error: unknown
  field "..."``.

The declared fields come from Kubernetes 1.32's published schemas
(:mod:`localkube.builtin_schemas`). A schema object with no ``properties`` (``FieldsV1``,
``RawExtension``, a CRD schema's ``JSON`` values, ``x-kubernetes-preserve-unknown-fields``)
takes anything, as the Go types behind them do. Not reproduced: duplicate-key errors
(``duplicate field "x"``; the JSON decoder keeps the last value) and unknown keys inside
JSON patch operations.
"""

from __future__ import annotations

import json
from decimal import Decimal
from enum import StrEnum
from typing import Any, Final

from localkube import builtin_schemas
from localkube.errors import ApiError

#: kube-apiserver stops collecting strict decoding errors after this many.
MAX_REPORTED: Final = 100


class Directive(StrEnum):
    """A ``fieldValidation`` value."""

    IGNORE = "Ignore"
    WARN = "Warn"
    STRICT = "Strict"


def parse_directive(value: str, *, options_kind: str) -> Directive:
    """Read the ``fieldValidation`` query parameter (absent or empty: Warn).

    Args:
        value: the parameter's value (``""`` when absent).
        options_kind: ``CreateOptions``, ``UpdateOptions`` or ``PatchOptions``; words the
            error as kube-apiserver's options validation does.

    Raises:
        ApiError: 422 Invalid for any other value.
    """
    if not value:
        return Directive.WARN
    try:
        return Directive(value)
    except ValueError:
        supported = ", ".join(f'"{d.value}"' for d in sorted(Directive, key=str))
        message = f'Unsupported value: "{value}": supported values: {supported}'
        raise ApiError(
            422,
            "Invalid",
            f'{options_kind}.meta.k8s.io "" is invalid: fieldValidation: {message}',
            details={
                "group": "meta.k8s.io",
                "kind": options_kind,
                "causes": [
                    {
                        "reason": "FieldValueNotSupported",
                        "message": message,
                        "field": "fieldValidation",
                    }
                ],
            },
        ) from None


def _resolve(schema: dict[str, Any]) -> dict[str, Any]:
    defs = builtin_schemas.definitions()
    seen = 0
    while True:
        name = builtin_schemas.ref_name(schema)
        if name is None or name not in defs or seen > 16:
            return schema
        schema = defs[name]
        seen += 1
    # (a chain of plain references is short; the bound only guards a malformed file)


def _unknown(
    value: Any, schema: dict[str, Any], path: str, found: list[str], *, remove: bool
) -> None:
    schema = _resolve(schema)
    if schema.get("x-kubernetes-preserve-unknown-fields") is True:
        return
    if isinstance(value, dict):
        properties = schema.get("properties")
        if isinstance(properties, dict):
            dropped = []
            for key, item in value.items():
                child = f"{path}.{key}" if path else key
                declared = properties.get(key)
                if declared is None:
                    dropped.append(key)
                    if len(found) < MAX_REPORTED:
                        found.append(child)
                elif item is not None:
                    _unknown(item, declared, child, found, remove=remove)
            if remove:
                for key in dropped:
                    del value[key]
            return
        values = schema.get("additionalProperties")
        if isinstance(values, dict):
            for key, item in value.items():
                if item is not None:
                    child = f"{path}.{key}" if path else key
                    _unknown(item, values, child, found, remove=remove)
        return
    if isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            for index, item in enumerate(value):
                if item is not None:
                    _unknown(item, items, f"{path}[{index}]", found, remove=remove)


def unknown_fields(obj: dict[str, Any], definition: str, *, remove: bool = False) -> list[str]:
    """Return the paths of the fields ``obj`` has that ``definition`` does not declare.

    Args:
        obj: a decoded JSON object; changed only with ``remove``.
        definition: a definition name (``io.k8s.api.core.v1.Pod``;
            :func:`localkube.builtin_schemas.definition_name`).
        remove: also delete those fields from ``obj``, as decoding into the Go type does
            (it has nowhere to keep them).

    Returns:
        Dotted paths with list indices (``spec.containers[0].imagee``) in body order, at
        most :data:`MAX_REPORTED` (all are removed); a map entry's key is a path element
        (``a.key.field``). A value of the wrong JSON type is not looked into (decoding
        reports it).

    Raises:
        KeyError: no such definition.
    """
    found: list[str] = []
    _unknown(obj, builtin_schemas.definitions()[definition], "", found, remove=remove)
    return found


def strict_decoding_error(paths: list[str]) -> str:
    """``strict decoding error: unknown field "a", unknown field "b"``."""
    return "strict decoding error: " + ", ".join(unknown_field(p) for p in paths)


def unknown_field(path: str) -> str:
    """``unknown field "<path>"``: one strict decoding error, and one Warn warning's text."""
    return f"unknown field {json.dumps(path, ensure_ascii=False)}"


def body_error(kind: str, version: str, paths: list[str]) -> ApiError:
    """The 400 of a create or update body with unknown fields under Strict."""
    return ApiError(
        400,
        "BadRequest",
        f'{kind} in version "{version}" cannot be handled as a {kind}: '
        + strict_decoding_error(paths),
    )


def patch_error(shown: str, paths: list[str]) -> ApiError:
    """The 422 of a patch whose result has unknown fields under Strict.

    Args:
        shown: the invalid value kube-apiserver shows: the patched object as JSON (JSON
            and merge patches) or the patch as Go prints a map (strategic merge patches,
            :func:`go_map_text`).
        paths: the unknown fields.
    """
    message = f"Invalid value: {_go_quote(shown)}: {strict_decoding_error(paths)}"
    return ApiError(
        422,
        "Invalid",
        f' "" is invalid: patch: {message}',
        details={"causes": [{"reason": "FieldValueInvalid", "message": message, "field": "patch"}]},
    )


def _go_quote(text: str) -> str:
    # Go's %q: a double-quoted string with Go escapes (JSON's are the same for these texts)
    return json.dumps(text, ensure_ascii=False)


def go_map_text(value: Any) -> str:
    """Return ``value`` as Go's ``fmt.Sprintf("%+v", ...)`` prints a decoded JSON value.

    Maps print as ``map[k1:v1 k2:v2]`` with sorted keys, lists as ``[a b]``, strings bare,
    null as ``<nil>``; kube-apiserver shows a strategic merge patch this way in its 422.
    """
    if isinstance(value, dict):
        items = " ".join(f"{key}:{go_map_text(value[key])}" for key in sorted(value))
        return f"map[{items}]"
    if isinstance(value, list):
        return "[" + " ".join(go_map_text(item) for item in value) + "]"
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return _go_float(value)
    return str(value)


def _go_float(value: float) -> str:
    """A float64 as Go's ``%v`` prints it: shortest digits, exponent below 1e-4 or from 1e6."""
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "+Inf" if value > 0 else "-Inf"
    if value == 0:
        return "0"
    sign, digits, exponent = Decimal(repr(value)).normalize().as_tuple()
    assert isinstance(exponent, int)
    text = "".join(map(str, digits))
    point = len(text) + exponent  # digits before the decimal point
    magnitude = point - 1
    minus = "-" if sign else ""
    if magnitude < -4 or magnitude >= 6:
        mantissa = text[0] + ("." + text[1:] if len(text) > 1 else "")
        return f"{minus}{mantissa}e{'-' if magnitude < 0 else '+'}{abs(magnitude):02d}"
    if point <= 0:
        return f"{minus}0.{'0' * -point}{text}"
    if point >= len(text):
        return f"{minus}{text}{'0' * (point - len(text))}"
    return f"{minus}{text[:point]}.{text[point:]}"
