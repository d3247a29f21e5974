"""Typed field readers shared by the ``from_dict`` parsers: one isinstance check per field.

Objects come from the API server already validated against the CRD, so these checks only
make a hand-written or corrupted object fail with the field's path instead of an
``AttributeError`` deep inside a reconciler.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from krt.api.errors import InvalidObjectError
from krt.api.times import parse_time


def mapping(data: Mapping[str, Any], key: str, path: str) -> Mapping[str, Any] | None:
    value = data.get(key)
    if value is None or type(value) is dict:  # the common case, without the ABC check
        return value
    if not isinstance(value, Mapping):
        raise InvalidObjectError(f"{path}{key}", f"must be an object, got {type(value).__name__}")
    return value


def string(data: Mapping[str, Any], key: str, path: str) -> str | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidObjectError(f"{path}{key}", f"must be a string, got {type(value).__name__}")
    return value


def required_string(data: Mapping[str, Any], key: str, path: str) -> str:
    value = string(data, key, path)
    if not value:
        raise InvalidObjectError(f"{path}{key}", "is required")
    return value


def integer(data: Mapping[str, Any], key: str, path: str) -> int | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidObjectError(f"{path}{key}", f"must be an integer, got {value!r}")
    return value


def boolean(data: Mapping[str, Any], key: str, path: str) -> bool | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, bool):
        raise InvalidObjectError(f"{path}{key}", f"must be a boolean, got {value!r}")
    return value


def string_list(data: Mapping[str, Any], key: str, path: str) -> tuple[str, ...]:
    value = data.get(key)
    if value is None:
        return ()
    if not isinstance(value, list):
        raise InvalidObjectError(f"{path}{key}", "must be a list of strings")
    for item in value:  # a loop, not all(<generator>): half the cost on every event
        if not isinstance(item, str):
            raise InvalidObjectError(f"{path}{key}", "must be a list of strings")
    return tuple(value)


def string_map(data: Mapping[str, Any], key: str, path: str) -> dict[str, str] | None:
    value = data.get(key)
    if value is None:
        return None
    if type(value) is not dict and not isinstance(value, Mapping):
        raise InvalidObjectError(f"{path}{key}", "must be a map of strings to strings")
    for k, v in value.items():  # a loop, not all(<generator>): half the cost
        if not isinstance(k, str) or not isinstance(v, str):
            raise InvalidObjectError(f"{path}{key}", "must be a map of strings to strings")
    return dict(value)


def timestamp(data: Mapping[str, Any], key: str, path: str) -> datetime | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidObjectError(f"{path}{key}", f"must be a string, got {type(value).__name__}")
    try:
        return parse_time(value)
    except InvalidObjectError:  # the field's path is spelled out for the error only
        return parse_time(value, field=f"{path}{key}")


def check_kind(data: Mapping[str, Any], api_version_expected: str, kind: str) -> None:
    api_version = data.get("apiVersion")
    if api_version is not None and api_version != api_version_expected:
        raise InvalidObjectError(
            "apiVersion", f"must be {api_version_expected}, got {api_version!r}"
        )
    actual = data.get("kind")
    if actual is not None and actual != kind:
        raise InvalidObjectError("kind", f"must be {kind}, got {actual!r}")
