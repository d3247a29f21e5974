"""An independent admission harness for the committed CRD schemas (used by tests/api).

The harness checks an object the way kube-apiserver does, with independent libraries:
OpenAPI value validation through ``jsonschema`` (the ``x-kubernetes-*`` keys are ignored by
it), the uniqueness of ``x-kubernetes-list-type: map`` keys and ``set`` items (worded as
kube-apiserver's ``spec.env[1]: Duplicate value: {"name":"A"}``), then every ``x-kubernetes-validations`` rule through ``celpy`` with ``self``, and with
``oldSelf`` for transition rules where the old object has a value at the same place (object
properties, map keys, and list-map entries correlated by key). CEL property names that are
reserved words are escaped as Kubernetes does (``function`` -> ``__function__``). It exists so
the CRDs are tested even where localkube's validator differs; tests/api/test_krtapi_crd_localkube.py
runs the same cases through localkube.
"""

from __future__ import annotations

import functools
import json
import operator
import re
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import yaml

ROOT = Path(__file__).resolve().parents[2]
CRD_DIR = ROOT / "charts" / "kruntimes" / "crds"

CEL_RESERVED = {
    "true", "false", "null", "in", "as", "break", "const", "continue", "else", "for",
    "function", "if", "import", "let", "loop", "package", "namespace", "return", "var",
    "void", "while",
}  # fmt: skip

_ENV = celpy.Environment()
_PROGRAMS: dict[str, Any] = {}


def _find(text: Any, pattern: Any) -> Any:
    match = re.search(str(pattern), str(text))
    return celpy.celtypes.StringType(match.group(0) if match else "")


def _find_all(text: Any, pattern: Any) -> Any:
    found = [m.group(0) for m in re.finditer(str(pattern), str(text))]
    return celpy.celtypes.ListType([celpy.celtypes.StringType(item) for item in found])


def _sum(items: Any) -> Any:
    # Kubernetes types the zero of an empty list by its element type; the CRDs only sum doubles.
    return functools.reduce(operator.add, items) if items else celpy.celtypes.DoubleType(0.0)


#: The Kubernetes CEL library functions the CRD rules call (regex and list extensions),
#: written here independently of localkube's.
_K8S_FUNCTIONS = {"find": _find, "findAll": _find_all, "sum": _sum}


def load_crd_schema(filename: str) -> dict[str, Any]:
    """The openAPIV3Schema of a committed CRD file."""
    crd = yaml.safe_load((CRD_DIR / filename).read_text(encoding="utf-8"))
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def _path(parts: Any) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text.lstrip(".")


def _program(expression: str) -> Any:
    if expression not in _PROGRAMS:
        _PROGRAMS[expression] = _ENV.program(_ENV.compile(expression), functions=_K8S_FUNCTIONS)
    return _PROGRAMS[expression]


def _escape(value: Any, schema: dict[str, Any]) -> Any:
    """Rename reserved property names the way Kubernetes exposes them to CEL."""
    if isinstance(value, dict):
        props = schema.get("properties")
        if props is not None:
            return {
                (f"__{k}__" if k in CEL_RESERVED else k): _escape(v, props.get(k, {}))
                for k, v in value.items()
            }
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            return {k: _escape(v, extra) for k, v in value.items()}
        return value
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_escape(v, schema["items"]) for v in value]
    return value


def _with_int_or_string_types(schema: Any) -> Any:
    """A copy where ``x-kubernetes-int-or-string`` nodes get ``type: [integer, string]``."""
    if isinstance(schema, list):
        return [_with_int_or_string_types(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    copy = {key: _with_int_or_string_types(value) for key, value in schema.items()}
    if copy.get("x-kubernetes-int-or-string") is True and "type" not in copy:
        copy["type"] = ["integer", "string"]
    return copy


class Admission:
    """Validate objects against one CRD schema (see the module docstring)."""

    def __init__(self, schema: dict[str, Any]) -> None:
        self.schema = schema
        self.json = jsonschema.Draft7Validator(_with_int_or_string_types(schema))

    def errors(self, obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[str]:
        """All error messages for a create (``old`` None) or an update."""
        found = [
            f"{_path(e.absolute_path)}: {e.message} ({e.validator}={e.validator_value!r})"
            for e in self.json.iter_errors(obj)
        ]
        if found:
            return found
        _list_duplicates(self.schema, obj, "", found)
        self._walk(self.schema, obj, old, old is not None, "", found)
        return found

    def _walk(
        self, schema: dict[str, Any], value: Any, old: Any, has_old: bool, path: str, out: list[str]
    ) -> None:
        for entry in schema.get("x-kubernetes-validations", []):
            expression = entry["rule"]
            transition = "oldSelf" in expression
            if transition and not has_old:
                continue
            activation = {"self": celpy.json_to_cel(_escape(value, schema))}
            if transition:
                activation["oldSelf"] = celpy.json_to_cel(_escape(old, schema))
            result = _program(expression).evaluate(activation)
            if isinstance(result, celpy.CELEvalError):
                out.append(f"{path}: evaluation error in {expression}: {result}")
            elif result is not True and result != celpy.celtypes.BoolType(True):
                out.append(f"{path}: {entry['message']}")
        if isinstance(value, dict):
            for name, sub in schema.get("properties", {}).items():
                if name in value:
                    old_sub = old.get(name) if has_old and isinstance(old, dict) else None
                    present = has_old and isinstance(old, dict) and name in old
                    self._walk(
                        sub, value[name], old_sub, present, f"{path}.{name}".lstrip("."), out
                    )
            extra = schema.get("additionalProperties")
            if isinstance(extra, dict):
                for key, item in value.items():
                    present = has_old and isinstance(old, dict) and key in old
                    old_item = old.get(key) if present else None
                    self._walk(extra, item, old_item, present, f"{path}[{key}]", out)
        elif isinstance(value, list) and isinstance(schema.get("items"), dict):
            keys = schema.get("x-kubernetes-list-map-keys")
            old_by_key: dict[Any, Any] = {}
            if keys and has_old and isinstance(old, list):
                old_by_key = {tuple(o.get(k) for k in keys): o for o in old}
            for index, item in enumerate(value):
                key = tuple(item.get(k) for k in keys) if keys and isinstance(item, dict) else None
                present = key is not None and key in old_by_key
                self._walk(
                    schema["items"],
                    item,
                    old_by_key.get(key) if present else None,
                    present,
                    f"{path}[{index}]",
                    out,
                )


def _list_duplicates(schema: dict[str, Any], value: Any, path: str, out: list[str]) -> None:
    """Report repeated list-map keys and set items, as kube-apiserver's structural check."""
    if isinstance(value, dict):
        for name, item in value.items():
            sub = schema.get("properties", {}).get(name)
            if sub is None and isinstance(schema.get("additionalProperties"), dict):
                sub = schema["additionalProperties"]
            if sub is not None:
                _list_duplicates(sub, item, f"{path}.{name}".lstrip("."), out)
    elif isinstance(value, list):
        list_type = schema.get("x-kubernetes-list-type")
        seen: list[Any] = []
        for index, item in enumerate(value):
            if list_type == "map":
                key = {k: item[k] for k in schema["x-kubernetes-list-map-keys"] if k in item}
            elif list_type == "set":
                key = item
            else:
                key = None
            if key is not None and key in seen:
                text = json.dumps(key, separators=(",", ":"))
                out.append(f"{path}[{index}]: Duplicate value: {text}")
            elif key is not None:
                seen.append(key)
            if isinstance(schema.get("items"), dict):
                _list_duplicates(schema["items"], item, f"{path}[{index}]", out)


def matches(errors: list[str], expect: str) -> bool:
    """True when one error contains every ``&&``-separated part of ``expect``."""
    parts = expect.split("&&")
    return any(all(part in error for part in parts) for error in errors)
