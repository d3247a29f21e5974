"""ConfigMap and Secret payload rules: value types, keys, size, and Secret ``stringData``.

kube-apiserver decodes these kinds into Go structs, so a number where a string belongs, or
Secret ``data`` that is not base64, is a decoding error (400 BadRequest, "cannot be handled
as a ..."); then validation checks every key (``IsConfigMapKey``) and the 1 MiB total size
(422 Invalid). Secret ``stringData`` is write-only: its entries are base64-encoded into
``data`` (overwriting the same keys) and the field is never stored.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any

from localkube.errors import ApiError, FieldError

MAX_PAYLOAD_BYTES = 1024 * 1024
"""Largest total size of a ConfigMap's or Secret's keys and values (bytes)."""
CONFIG_KEY_MAX = 253
"""Longest key in ``data``/``binaryData``/``stringData`` (characters)."""

_CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
_BASE64 = re.compile(r"^[A-Za-z0-9+/]*={0,2}$")
_JSON_TYPE = {bool: "bool", int: "number", float: "number", list: "array", dict: "object"}


def _cannot_decode(kind: str, detail: str) -> ApiError:
    return ApiError(
        400, "BadRequest", f'{kind} in version "v1" cannot be handled as a {kind}: {detail}'
    )


def _string_map(obj: dict[str, Any], kind: str, field: str) -> dict[str, str]:
    """Return ``obj[field]`` checked to be a map of strings (null values read as "")."""
    value = obj.get(field)
    if value is None:
        return {}
    if not isinstance(value, dict):
        got = "string" if isinstance(value, str) else _JSON_TYPE.get(type(value), "value")
        raise _cannot_decode(
            kind,
            f"json: cannot unmarshal {got} into Go struct field {kind}.{field} of type "
            "map[string]string",
        )
    for key, item in value.items():
        if item is None:
            value[key] = ""
        elif not isinstance(item, str):
            raise _cannot_decode(
                kind,
                f"json: cannot unmarshal {_JSON_TYPE.get(type(item), 'value')} into Go struct "
                f"field {kind}.{field} of type string",
            )
    return value


def _base64_values(obj: dict[str, Any], kind: str, field: str) -> dict[str, bytes]:
    """Decode the base64 values of ``obj[field]`` (Go's StdEncoding, newlines ignored)."""
    decoded: dict[str, bytes] = {}
    for key, item in _string_map(obj, kind, field).items():
        text = item.replace("\r", "").replace("\n", "")
        try:
            if not _BASE64.match(text):
                raise binascii.Error("bad character")
            decoded[key] = base64.b64decode(text, validate=True)
        except binascii.Error:
            offset = next(
                (
                    i
                    for i, c in enumerate(text)
                    if not (c.isascii() and (c.isalnum() or c in "+/="))
                ),
                len(text),
            )
            raise _cannot_decode(kind, f"illegal base64 data at input byte {offset}") from None
    return decoded


def config_key_problems(key: str) -> list[str]:
    """Return why ``key`` is not a valid ConfigMap/Secret key (``IsConfigMapKey``)."""
    problems: list[str] = []
    if len(key) > CONFIG_KEY_MAX:
        problems.append(f"must be no more than {CONFIG_KEY_MAX} characters")
    if not _CONFIG_KEY.match(key):
        problems.append(
            "a valid config key must consist of alphanumeric characters, '-', '_' or '.' "
            "(e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is "
            "'[-._a-zA-Z0-9]+')"
        )
    if key == ".":
        problems.append("must not be '.'")
    elif key == "..":
        problems.append("must not be '..'")
    elif key.startswith(".."):
        problems.append("must not start with '..'")
    return problems


def _key_errors(field: str, keys: list[str]) -> list[FieldError]:
    return [
        FieldError(
            f"{field}[{key}]",
            "FieldValueInvalid",
            f"Invalid value: {json.dumps(key, ensure_ascii=False)}: {problem}",
        )
        for key in keys
        for problem in config_key_problems(key)
    ]


def _too_long(field: str) -> FieldError:
    return FieldError(
        field, "FieldValueTooLong", f"Too long: may not be more than {MAX_PAYLOAD_BYTES} bytes"
    )


def configmap_errors(obj: dict[str, Any], old: dict[str, Any] | None) -> list[FieldError]:
    """Validate a ConfigMap's ``data`` and ``binaryData``.

    Raises:
        ApiError: 400 when a value has the wrong JSON type or binaryData is not base64.

    Returns:
        Field errors for bad keys, keys in both maps, or more than 1 MiB in total.
    """
    data = _string_map(obj, "ConfigMap", "data")
    binary = _base64_values(obj, "ConfigMap", "binaryData")
    errors = _key_errors("data", list(data)) + _key_errors("binaryData", list(binary))
    errors += [
        FieldError(
            f"data[{key}]",
            "FieldValueInvalid",
            f"Invalid value: {json.dumps(key)}: duplicate of key present in binaryData",
        )
        for key in data
        if key in binary
    ]
    size = sum(len(k) + len(v.encode()) for k, v in data.items())
    size += sum(len(k) + len(v) for k, v in binary.items())
    if size > MAX_PAYLOAD_BYTES:
        errors.append(_too_long("[]"))
    return errors


def fold_string_data(obj: dict[str, Any]) -> None:
    """Move a Secret's ``stringData`` into ``data`` (base64), as the v1 conversion does.

    Raises:
        ApiError: 400 when ``stringData`` is not a map of strings.
    """
    if "stringData" not in obj:
        return
    string_data = _string_map(obj, "Secret", "stringData")
    del obj["stringData"]
    if not string_data:
        return
    data = obj.get("data")
    if data is None:
        data = obj["data"] = {}
    if isinstance(data, dict):  # anything else is rejected by secret_errors
        for key, value in string_data.items():
            data[key] = base64.b64encode(value.encode()).decode()


def secret_errors(obj: dict[str, Any], old: dict[str, Any] | None) -> list[FieldError]:
    """Validate a Secret's ``data`` (after :func:`fold_string_data`).

    Raises:
        ApiError: 400 when a value is not a base64 string.

    Returns:
        Field errors for bad keys or more than 1 MiB of decoded data.
    """
    data = _base64_values(obj, "Secret", "data")
    errors = _key_errors("data", list(data))
    if sum(len(k) + len(v) for k, v in data.items()) > MAX_PAYLOAD_BYTES:
        errors.append(_too_long("data"))
    return errors
