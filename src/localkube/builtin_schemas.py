"""Kubernetes 1.32's published schemas of the built-in kinds, from ``kubernetes-validate``.

kube-apiserver knows every built-in kind as a Go type and publishes those types in its
OpenAPI documents. localkube has no Go types; it reads the same definitions (generated from
Kubernetes' ``api/openapi-spec``, field names, descriptions and ``x-kubernetes-*``
extensions included) from the ``kubernetes-validate`` package, which ships them as JSON
Schema for each Kubernetes release. Two users:

* :mod:`localkube.openapi` publishes them, converted back to OpenAPI v3 component schemas,
  so ``kubectl explain pods.spec`` and ``kubectl explain <crd>.metadata.name`` (the
  ObjectMeta every kind refers to) work as against a real cluster;
* :mod:`localkube.field_validation` walks them to find the fields a request body has that
  the kind does not declare (``fieldValidation=Strict``/``Warn``).

The package's files are JSON Schema, not OpenAPI: ``type`` is a list with ``"null"``,
references point into ``#/$defs/``, ``IntOrString`` and ``Quantity`` are ``oneOf`` unions,
and ``apiVersion``/``kind`` of each kind carry an added ``enum``. :func:`openapi_v3_schemas`
undoes those differences.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from importlib import resources
from typing import Any, Final

#: The Kubernetes release whose schemas are served (localkube reports 1.32).
KUBERNETES_VERSION: Final = "1.32.0"
_LOCAL_REF: Final = "#/$defs/"
_V3_REF: Final = "#/components/schemas/"
#: Definitions that are strings on the wire although the files give a ``oneOf`` union.
_STRING_UNIONS: Final[dict[str, dict[str, str]]] = {
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": {
        "type": "string",
        "format": "int-or-string",
    },
    "io.k8s.apimachinery.pkg.api.resource.Quantity": {"type": "string"},
}
#: ObjectMeta's definition name (every kind's ``metadata`` refers to it).
OBJECT_META: Final = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"


class SchemasMissing(RuntimeError):
    """The installed ``kubernetes-validate`` has no schemas for :data:`KUBERNETES_VERSION`."""


@functools.cache
def definitions() -> dict[str, dict[str, Any]]:
    """Return every Kubernetes 1.32 definition by name (``io.k8s.api.core.v1.Pod``).

    Read once from the ``kubernetes-validate`` package (about 1.3 MB of JSON); the result is
    shared: callers must not change it.

    Raises:
        SchemasMissing: the package is there but lacks this release's definitions.
    """
    folder = resources.files("kubernetes_validate") / "kubernetes-json-schema"
    path = folder / f"v{KUBERNETES_VERSION}-local" / "_definitions.json"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SchemasMissing(
            f"kubernetes-validate has no schemas for Kubernetes {KUBERNETES_VERSION}"
        ) from None
    found: dict[str, dict[str, Any]] = json.loads(text)["$defs"]
    return found


@functools.cache
def _names_by_gvk() -> dict[tuple[str, str, str], str]:
    found: dict[tuple[str, str, str], str] = {}
    for name, schema in definitions().items():
        for gvk in schema.get("x-kubernetes-group-version-kind") or []:
            found.setdefault((gvk["group"], gvk["version"], gvk["kind"]), name)
    return found


def definition_name(group: str, version: str, kind: str) -> str | None:
    """Return the definition name of a built-in kind, or None if Kubernetes has no such kind.

    Args:
        group: API group (``""`` for core). version: ``v1``. kind: ``Pod``.
    """
    return _names_by_gvk().get((group, version, kind))


def ref_name(schema: dict[str, Any]) -> str | None:
    """The definition a schema node refers to (``$ref``), or None."""
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith(_LOCAL_REF):
        return ref[len(_LOCAL_REF) :]
    return None


def _referenced(schema: Any) -> Iterable[str]:
    if isinstance(schema, dict):
        name = ref_name(schema)
        if name is not None:
            yield name
        for value in schema.values():
            yield from _referenced(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from _referenced(value)


def closure(names: Iterable[str]) -> list[str]:
    """Return ``names`` and every definition they refer to, transitively, in first-seen order."""
    defs = definitions()
    seen: dict[str, None] = {}
    pending = [n for n in names if n in defs]
    while pending:
        name = pending.pop(0)
        if name in seen:
            continue
        seen[name] = None
        pending.extend(n for n in _referenced(defs[name]) if n not in seen and n in defs)
    return list(seen)


def _to_v3(schema: Any) -> Any:
    """One JSON Schema node of the package as kube-apiserver's OpenAPI v3 writes it."""
    if isinstance(schema, list):
        return [_to_v3(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    result: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "type" and isinstance(value, list):
            types = [t for t in value if t != "null"]
            if len(types) == 1:
                result["type"] = types[0]
        elif key == "$ref":
            continue
        elif key in ("properties", "patternProperties", "definitions") and isinstance(value, dict):
            result[key] = {name: _to_v3(item) for name, item in value.items()}
        else:
            result[key] = _to_v3(value)
    name = ref_name(schema)
    if name is not None:
        ref = {"$ref": _V3_REF + name}
        if not result:
            return ref
        # OpenAPI v3 ignores a $ref's siblings: kube-openapi wraps it in allOf
        return {"allOf": [ref], **result}
    return result


def openapi_v3_schema(name: str) -> dict[str, Any]:
    """Return one definition as an OpenAPI v3 component schema.

    Raises:
        KeyError: no such definition.
    """
    schema = definitions()[name]
    if name in _STRING_UNIONS:
        converted: dict[str, Any] = {
            **_STRING_UNIONS[name],
            **{k: v for k, v in schema.items() if k == "description"},
        }
        return converted
    converted = _to_v3(schema)
    if schema.get("x-kubernetes-group-version-kind"):
        # the package adds enums to a kind's apiVersion/kind; the published schema has none
        for field in ("apiVersion", "kind"):
            prop = converted.get("properties", {}).get(field)
            if isinstance(prop, dict):
                prop.pop("enum", None)
    return dict(converted)


def openapi_v3_schemas(names: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Return ``names`` and every definition they refer to as OpenAPI v3 component schemas."""
    return {name: openapi_v3_schema(name) for name in closure(names)}
