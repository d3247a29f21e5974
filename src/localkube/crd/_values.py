"""OpenAPI value validation of a custom resource, worded as kube-apiserver words it.

A small walker of our own rather than the ``jsonschema`` library: Kubernetes' messages
(``spec.x in body should match '^a$'``), field paths (``spec.list[2].name``,
``spec.labels.key`` for map values) and its conversion of each failure into a field error
type (``Required value``, ``Unsupported value``, ``Too long``, ``Too many``,
``Invalid value``) come from kube-openapi's validator order and wording, which
jsonschema's errors do not carry, and the Kubernetes extensions (int-or-string, list
types, embedded resources) need schema-aware code anyway.

Formats checked (strings only, as kube-openapi applies formats only to strings):
``date-time``, ``date``, ``byte``, ``uuid``/``uuid3``/``uuid4``/``uuid5``, ``ipv4``,
``ipv6``, ``cidr``, ``duration``, ``hostname``. ``int32``, ``int64``, ``float``,
``double`` and unknown formats are accepted without checks, exactly as kube-apiserver
does (integers are int64 in Kubernetes whatever their format).
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import ipaddress
import re
from typing import Any

from localkube.crd import _fielderrors as fe
from localkube.crd._schema import SchemaNode
from localkube.errors import FieldError

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


def json_type(value: Any) -> str:
    """Name the JSON type of a decoded value as kube-openapi does.

    Integers beyond int64 are ``number``: Kubernetes decodes them as float64.
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer" if INT64_MIN <= value <= INT64_MAX else "number"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "unknown"


def json_equal(left: Any, right: Any) -> bool:
    """Deep JSON equality that keeps booleans apart from numbers."""
    if isinstance(left, bool) or isinstance(right, bool):
        return isinstance(left, bool) and isinstance(right, bool) and left == right
    if isinstance(left, int | float) and isinstance(right, int | float):
        return left == right
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(json_equal(left[k], right[k]) for k in left)
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(
            json_equal(a, b) for a, b in zip(left, right, strict=True)
        )
    return type(left) is type(right) and bool(left == right)


def join(path: str, name: str) -> str:
    """Join a kube-openapi path and a property name (``spec`` + ``x`` = ``spec.x``)."""
    return f"{path}.{name}" if path else name


def field_of(path: str) -> str:
    """The field string for an error at ``path`` (the root is printed ``<nil>``)."""
    return path or fe.ROOT_FIELD


def validate_value(
    value: Any,
    node: SchemaNode,
    path: str,
    *,
    root: bool = False,
    trusted: frozenset[str] = frozenset(),
) -> list[FieldError]:
    """Validate ``value`` against ``node``; return the field errors in kube-openapi order.

    Args:
        value: the pruned, defaulted JSON value.
        node: its schema node.
        path: kube-openapi path of ``value`` (``""`` for the object root).
        root: skip ``metadata`` (only ``name``/``generateName`` are checked there) and
            accept ``apiVersion``/``kind`` at the root.
        trusted: properties of the object ``value`` whose values passed this schema
            already (they count as present, their contents are not walked again).
    """
    errors: list[FieldError] = []
    _validate(value, node, path, errors, root=root, trusted=trusted)
    return errors


def _type_ok(actual: str, node: SchemaNode) -> bool:
    if node.int_or_string:
        return actual in ("integer", "string")
    if node.type is None:
        return True
    if node.type == "number":
        return actual in ("integer", "number")
    return actual == node.type


#: JSON types of the decoded values whose type alone decides (ints need a range check).
_PLAIN_TYPES: dict[type, str] = {
    str: "string",
    dict: "object",
    list: "array",
    bool: "boolean",
    float: "number",
}


def _validate(
    value: Any,
    node: SchemaNode,
    path: str,
    errors: list[FieldError],
    *,
    root: bool = False,
    trusted: frozenset[str] = frozenset(),
) -> None:
    actual = _PLAIN_TYPES.get(type(value)) or json_type(value)
    if value is None:
        if not node.nullable and (node.type is not None or node.int_or_string):
            errors.append(_type_error(path, node, actual))
        return
    if (node.type != actual or node.int_or_string) and not _type_ok(actual, node):
        errors.append(_type_error(path, node, actual))
        return
    if node.all_of or node.any_of or node.one_of or node.not_ is not None:
        _validate_junctors(value, node, path, errors)
    if actual == "string":
        if (
            node.max_length is not None
            or node.min_length is not None
            or node.pattern_re is not None
            or node.format is not None
        ):
            _validate_string(value, node, path, errors)
    elif actual in ("integer", "number"):
        _validate_number(value, node, path, errors)
    elif actual == "array":
        _validate_array(value, node, path, errors)
    if node.enum is not None and not _in_enum(value, node):
        errors.append(fe.not_supported(field_of(path), value, node.enum))
    if actual == "object":
        _validate_object(value, node, path, errors, root=root, trusted=trusted)


def _in_enum(value: Any, node: SchemaNode) -> bool:
    assert node.enum is not None
    if type(value) is str:  # the common case: no deep comparisons
        return value in node.enum_strings
    return any(json_equal(value, e) for e in node.enum)


MAX_PATTERN_RESULTS = 4096
"""Match (and format check) results kept per schema node (values recur: condition types,
reasons, names, the timestamps a status write repeats)."""
MAX_PATTERN_RESULT_CHARS = 256


def _matches_pattern(value: str, node: SchemaNode) -> bool:
    results = node.pattern_results
    found = results.get(value)
    if found is None:
        found = node.pattern_re.search(value) is not None
        if len(value) <= MAX_PATTERN_RESULT_CHARS:
            if len(results) >= MAX_PATTERN_RESULTS:
                results.clear()
            results[value] = found
    return found


def _has_format(value: str, node: SchemaNode) -> bool:
    """:func:`check_format` for ``node.format``, memoized per node as pattern matches are."""
    results = node.format_results
    found = results.get(value)
    if found is None:
        assert node.format is not None
        found = check_format(node.format, value)
        if len(value) <= MAX_PATTERN_RESULT_CHARS:
            if len(results) >= MAX_PATTERN_RESULTS:
                results.clear()
            results[value] = found
    return found


def _type_error(path: str, node: SchemaNode, actual: str) -> FieldError:
    name = path or "."
    detail = f"{name} in body must be of type {node.type_names()}: {fe.go_quote(actual)}"
    return fe.type_invalid(field_of(path), actual, detail)


def _validate_junctors(value: Any, node: SchemaNode, path: str, errors: list[FieldError]) -> None:
    if not (node.all_of or node.any_of or node.one_of or node.not_ is not None):
        return
    name = fe.go_quote(path or ".")
    if node.all_of:
        failed = 0
        for sub in node.all_of:
            sub_errors = validate_value(value, sub, path)
            failed += bool(sub_errors)
            errors.extend(sub_errors)
        if failed:
            extra = ". None validated" if failed == len(node.all_of) else ""
            errors.append(
                fe.invalid(
                    fe.ROOT_FIELD, "", f"{name} must validate all the schemas (allOf){extra}"
                )
            )
    if node.any_of:
        results = [validate_value(value, sub, path) for sub in node.any_of]
        if all(results):
            errors.append(
                fe.invalid(fe.ROOT_FIELD, "", f"{name} must validate at least one schema (anyOf)")
            )
            errors.extend(_fewest(results))
    if node.one_of:
        results = [validate_value(value, sub, path) for sub in node.one_of]
        valid = sum(1 for r in results if not r)
        if valid != 1:
            extra = "Found none valid" if valid == 0 else f"Found {valid} valid alternatives"
            errors.append(
                fe.invalid(
                    fe.ROOT_FIELD,
                    "",
                    f"{name} must validate one and only one schema (oneOf). {extra}",
                )
            )
            if valid == 0:
                errors.extend(_fewest(results))
    if node.not_ is not None and not validate_value(value, node.not_, path):
        errors.append(fe.invalid(fe.ROOT_FIELD, "", f"{name} must not validate the schema (not)"))


def _fewest(results: list[list[FieldError]]) -> list[FieldError]:
    """The failing alternative with the fewest errors (kube-openapi keeps the best match)."""
    return min(results, key=lambda errors: len(errors))


def _validate_child(
    item: Any, node: SchemaNode, path: str, name: str, errors: list[FieldError]
) -> None:
    """:func:`_validate` of the property or map value ``name`` of the object at ``path``.

    A string under a plain string schema (the usual leaf) is checked without building its
    path, which only an error needs; anything else goes to :func:`_validate`.
    """
    if type(item) is str and node.plain_string:
        if node.string_checks:
            _validate_string(item, node, path, errors, name)
        if node.enum is not None and item not in node.enum_strings:
            errors.append(fe.not_supported(field_of(join(path, name)), item, node.enum))
        return
    _validate(item, node, join(path, name), errors)


def _validate_string(
    value: str, node: SchemaNode, path: str, errors: list[FieldError], name: str | None = None
) -> None:
    """The string keywords' errors of ``value`` at ``path`` (joined with ``name`` if given).

    The field path and its printed name are built only when there is an error.
    """
    too_long = node.max_length is not None and len(value) > node.max_length
    too_short = node.min_length is not None and len(value) < node.min_length
    unmatched = node.pattern_re is not None and not _matches_pattern(value, node)
    malformed = node.format is not None and not _has_format(value, node)
    if not (too_long or too_short or unmatched or malformed):
        return
    if name is not None:
        path = join(path, name)
    if too_long and node.max_length is not None:
        errors.append(fe.too_long(field_of(path), node.max_length))
    if too_short:
        errors.append(
            fe.invalid(
                field_of(path),
                value,
                f"{path or '.'} in body should be at least {node.min_length} chars long",
            )
        )
    if unmatched:
        errors.append(
            fe.invalid(
                field_of(path), value, f"{path or '.'} in body should match '{node.pattern}'"
            )
        )
    if malformed:
        detail = f"{path or '.'} in body must be of type {node.format}: {fe.go_quote(value)}"
        errors.append(fe.type_invalid(field_of(path), value, detail))


def _num(limit: float | int) -> str:
    return fe.go_float(float(limit)) if isinstance(limit, float) else str(limit)


def _validate_number(
    value: float | int, node: SchemaNode, path: str, errors: list[FieldError]
) -> None:
    name = path or "."
    field = field_of(path)
    if node.multiple_of is not None:
        quotient = value / node.multiple_of
        if not float(quotient).is_integer():
            errors.append(
                fe.invalid(
                    field, value, f"{name} in body should be a multiple of {_num(node.multiple_of)}"
                )
            )
    if node.maximum is not None:
        if node.exclusive_maximum and value >= node.maximum:
            errors.append(
                fe.invalid(field, value, f"{name} in body should be less than {_num(node.maximum)}")
            )
        elif value > node.maximum:
            errors.append(
                fe.invalid(
                    field,
                    value,
                    f"{name} in body should be less than or equal to {_num(node.maximum)}",
                )
            )
    if node.minimum is not None:
        if node.exclusive_minimum and value <= node.minimum:
            errors.append(
                fe.invalid(
                    field, value, f"{name} in body should be greater than {_num(node.minimum)}"
                )
            )
        elif value < node.minimum:
            errors.append(
                fe.invalid(
                    field,
                    value,
                    f"{name} in body should be greater than or equal to {_num(node.minimum)}",
                )
            )


def _validate_array(
    value: list[Any], node: SchemaNode, path: str, errors: list[FieldError]
) -> None:
    name = path or "."
    field = field_of(path)
    if node.items is not None:
        for index, item in enumerate(value):
            _validate(item, node.items, f"{path}[{index}]", errors)
    if node.min_items is not None and len(value) < node.min_items:
        errors.append(
            fe.invalid(
                field, len(value), f"{name} in body should have at least {node.min_items} items"
            )
        )
    if node.max_items is not None and len(value) > node.max_items:
        errors.append(fe.too_many(field, len(value), node.max_items))
    if node.list_type == "set":
        _check_set(value, path, errors)
    elif node.list_type == "map":
        _check_map_list(value, node.list_map_keys, path, errors)


def _check_set(value: list[Any], path: str, errors: list[FieldError]) -> None:
    seen: list[Any] = []
    for index, item in enumerate(value):
        if any(json_equal(item, s) for s in seen):
            errors.append(fe.duplicate(f"{path}[{index}]", item))
        else:
            seen.append(item)


def _check_map_list(
    value: list[Any], keys: tuple[str, ...], path: str, errors: list[FieldError]
) -> None:
    # keys made of strings (condition types, names: the usual case) are compared in a set;
    # any other key by JSON equality (which keeps 1, 1.0 and true apart as Go does); the
    # two kinds never equal each other
    seen_strings: set[tuple[Any, ...]] = set()
    seen: list[dict[str, Any]] = []
    for index, item in enumerate(value):
        if not isinstance(item, dict):
            continue
        parts = tuple(item.get(k) for k in keys)
        if all(part is None or type(part) is str for part in parts):
            duplicate = parts in seen_strings
            seen_strings.add(parts)
            if duplicate:
                errors.append(fe.duplicate(f"{path}[{index}]", dict(zip(keys, parts, strict=True))))
            continue
        key_values = dict(zip(keys, parts, strict=True))
        if any(json_equal(key_values, s) for s in seen):
            errors.append(fe.duplicate(f"{path}[{index}]", key_values))
        else:
            seen.append(key_values)


def _validate_object(
    value: dict[str, Any],
    node: SchemaNode,
    path: str,
    errors: list[FieldError],
    *,
    root: bool,
    trusted: frozenset[str] = frozenset(),
) -> None:
    if node.max_properties is not None and len(value) > node.max_properties:
        errors.append(fe.too_many(field_of(path), len(value), node.max_properties))
    if node.min_properties is not None and len(value) < node.min_properties:
        errors.append(
            fe.invalid(
                field_of(path),
                node.min_properties,
                f"{path or '.'} in body should have at least {node.min_properties} properties",
            )
        )
    for key in node.required:
        if key not in value and not (root and key in ("apiVersion", "kind", "metadata")):
            errors.append(fe.required(join(path, key)))
    for key, child in node.properties.items():
        if key not in value or key in trusted:
            continue
        if root and key == "metadata":
            _validate_root_metadata(value[key], child, errors)
        elif not (root and key in ("apiVersion", "kind")):
            _validate_child(value[key], child, path, key, errors)
    if isinstance(node.additional, SchemaNode):
        for key, item in value.items():
            if key not in node.properties and key not in trusted:
                _validate_child(item, node.additional, path, key, errors)
    if node.embedded:
        for key in ("apiVersion", "kind"):
            if not value.get(key):
                errors.append(fe.required(join(path, key), "must not be empty"))


def _validate_root_metadata(metadata: Any, node: SchemaNode, errors: list[FieldError]) -> None:
    """Kubernetes honours only ``metadata.name`` and ``metadata.generateName`` restrictions."""
    if not isinstance(metadata, dict):
        return
    for key in ("name", "generateName"):
        child = node.properties.get(key)
        if child is not None and key in metadata:
            _validate(metadata[key], child, f"metadata.{key}", errors)


_DATE_TIME = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})?$"
)
_DATE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})$")
_UUID = re.compile(
    r"^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$"
)
_DURATION = re.compile(r"^(\d+(\.\d+)?\s*(ns|us|µs|ms|s|m|h|d|w)\s*)+$")
_HOSTNAME = re.compile(
    r"^(?=.{1,255}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$"
)


def _valid_date(year: str, month: str, day: str) -> bool:
    try:
        dt.date(int(year), int(month), int(day))
    except ValueError:
        return False
    return True


def check_format(fmt: str, value: str) -> bool:
    """Whether the string ``value`` satisfies format ``fmt`` (unknown formats pass)."""
    if fmt == "date-time":
        match = _DATE_TIME.match(value)
        if match is None:
            return False
        hour, minute, second = (int(g) for g in match.group(4, 5, 6))
        return _valid_date(*match.group(1, 2, 3)) and hour < 24 and minute < 60 and second < 61
    if fmt == "date":
        date_match = _DATE.match(value)
        return date_match is not None and _valid_date(*date_match.group(1, 2, 3))
    if fmt == "byte":
        try:
            base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            return False
        return True
    if fmt in ("uuid", "uuid3", "uuid4", "uuid5"):
        return bool(_UUID.match(value))
    if fmt == "ipv4":
        return _parses(ipaddress.IPv4Address, value)
    if fmt == "ipv6":
        return _parses(ipaddress.IPv6Address, value)
    if fmt == "cidr":
        return _parses(lambda v: ipaddress.ip_network(v, strict=False), value) and "/" in value
    if fmt == "duration":
        return bool(_DURATION.match(value))
    if fmt == "hostname":
        return bool(_HOSTNAME.match(value))
    return True


def _parses(parse: Any, value: str) -> bool:
    try:
        parse(value)
    except ValueError:
        return False
    return True
