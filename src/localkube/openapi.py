"""A minimal OpenAPI v3 discovery: enough for ``kubectl apply`` to use server-side validation.

kubectl 1.32 ``apply``/``create`` with the default ``--validate=strict`` first asks the
server whether it supports the ``fieldValidation`` query parameter: it reads
``/openapi/v3`` (a root listing one document per group/version) and looks, in the
group/version document, for a PATCH operation tagged with the object's
``x-kubernetes-group-version-kind`` that declares a ``fieldValidation`` query parameter.
When that is found it sends ``fieldValidation=Strict`` and leaves validation to the server;
without ``/openapi/v3`` (and ``/openapi/v2``) it fails with "failed to download openapi".

So every group/version document lists, per kind, the object path with a PATCH operation
carrying that parameter. The PATCH request body advertises only JSON patch and merge patch
media types: kubectl then computes strategic merge patches for built-in kinds from its own
compiled-in types, and merge patches for custom kinds (its behaviour without OpenAPI
schemas). The components are the schemas ``kubectl explain`` reads: a built-in kind's
published Kubernetes 1.32 definition with everything it refers to
(:mod:`localkube.builtin_schemas`), and a CRD version's schema made "kube-native" as
apiextensions-apiserver does (:func:`kube_native_schema`: ``metadata`` refers to ObjectMeta,
``apiVersion``/``kind`` get TypeMeta's descriptions), so ``kubectl explain runs.metadata.name``
and ``kubectl explain pods.spec.containers`` work as against a real cluster.

``/openapi/v2`` is served as an empty Swagger 2.0 document (no paths, no definitions), in
JSON or, when asked for, in the gnostic ``openapi.v2.Document`` protobuf encoding that
client-go's ``OpenAPISchema()`` requires. kubectl needs it for a ``kind: List``: its
``fieldValidation`` check says a List has no server-side support, so with
``--validate=strict`` (the default) it validates the List client-side against
``/openapi/v2`` and fails when that is missing. With no definitions kubectl finds no schema
for the List's items and skips their client-side check, then sends each item with
``fieldValidation=Strict`` as for a single object, so the server still validates it.
Publishing definitions there would switch that client-side check on, and ``kubectl
explain`` 1.32 reads only ``/openapi/v3``, so v2 stays empty.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
from typing import Any, Final

from localkube import builtin_schemas
from localkube.resources import ResourceRegistry, ResourceType

#: The version kube-apiserver's OpenAPI documents carry in ``info.version``.
INFO_VERSION: Final = "v1.32.0-localkube"
#: The protobuf media type of ``/openapi/v2`` (kube-openapi's, and the older ``@`` form).
V2_PROTOBUF_MEDIA_TYPE: Final = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
#: What kube-apiserver says of every kind's ``metadata`` (and so of a CRD's).
METADATA_DESCRIPTION: Final = (
    "Standard object's metadata. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"
)
#: TypeMeta's field descriptions, as kube-apiserver gives them to a CRD's root (and, worded
#: a little differently, to its embedded resources).
TYPE_META_DESCRIPTIONS: Final = {
    "apiVersion": "APIVersion defines the versioned schema of this representation of an object. "
    "Servers should convert recognized schemas to the latest internal value, and may reject "
    "unrecognized values. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources",
    "kind": "Kind is a string value representing the REST resource this object represents. "
    "Servers may infer this from the endpoint the client submits requests to. Cannot be "
    "updated. In CamelCase. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds",
    "embedded apiVersion": "apiVersion defines the versioned schema of this representation of "
    "an object. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources",
    "embedded kind": "kind is a string value representing the type of this object. In "
    "CamelCase. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds",
}
_V2_PROTOBUF_ACCEPTS: Final = (
    "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
    "application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
)


def _prefix(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def _schema_name(rt: ResourceType) -> str:
    reversed_group = ".".join(reversed(rt.group.split("."))) if rt.group else "io.k8s.api.core"
    return f"{reversed_group}.{rt.version}.{rt.kind}"


def _object_path(gvk: dict[str, str], ref: dict[str, str]) -> dict[str, Any]:
    """The GET and PATCH operations of one object path (what kubectl looks for)."""
    return {
        "get": {
            "x-kubernetes-action": "get",
            "x-kubernetes-group-version-kind": gvk,
            "responses": {
                "200": {"description": "OK", "content": {"application/json": {"schema": ref}}}
            },
        },
        "patch": {
            "x-kubernetes-action": "patch",
            "x-kubernetes-group-version-kind": gvk,
            "parameters": [
                {
                    "name": "dryRun",
                    "in": "query",
                    "schema": {"type": "string", "uniqueItems": True},
                },
                {
                    "name": "fieldManager",
                    "in": "query",
                    "schema": {"type": "string", "uniqueItems": True},
                },
                {
                    "name": "fieldValidation",
                    "in": "query",
                    "schema": {"type": "string", "uniqueItems": True},
                },
                {
                    "name": "force",
                    "in": "query",
                    "schema": {"type": "boolean", "uniqueItems": True},
                },
            ],
            "requestBody": {
                "content": {
                    "application/json-patch+json": {"schema": {"type": "object"}},
                    "application/merge-patch+json": {"schema": {"type": "object"}},
                },
                "required": True,
            },
            "responses": {
                "200": {"description": "OK", "content": {"application/json": {"schema": ref}}}
            },
        },
    }


@functools.cache
def _builtin_component_schemas(name: str) -> dict[str, Any]:
    # converted once per definition: shared, never changed by callers
    return builtin_schemas.openapi_v3_schemas([name])


def _object_meta_property() -> dict[str, Any]:
    return {
        "allOf": [{"$ref": f"#/components/schemas/{builtin_schemas.OBJECT_META}"}],
        "description": METADATA_DESCRIPTION,
    }


def _type_meta_property(field: str) -> dict[str, Any]:
    return {"type": "string", "description": TYPE_META_DESCRIPTIONS[field]}


def _add_embedded_meta(schema: Any) -> None:
    """Give every ``x-kubernetes-embedded-resource`` object apiVersion, kind and metadata."""
    if not isinstance(schema, dict):
        return
    for value in (schema.get("properties") or {}).values():
        _add_embedded_meta(value)
    for key in ("items", "additionalProperties"):
        _add_embedded_meta(schema.get(key))
    if schema.get("x-kubernetes-embedded-resource") is True:
        properties = schema.setdefault("properties", {})
        properties["apiVersion"] = {
            "type": "string",
            "description": TYPE_META_DESCRIPTIONS["embedded apiVersion"],
        }
        properties["kind"] = {
            "type": "string",
            "description": TYPE_META_DESCRIPTIONS["embedded kind"],
        }
        properties["metadata"] = _object_meta_property()
        required = schema.setdefault("required", [])
        required.extend(f for f in ("kind", "apiVersion") if f not in required)


def kube_native_schema(crd_schema: dict[str, Any]) -> dict[str, Any]:
    """Return a CRD version's ``openAPIV3Schema`` as kube-apiserver publishes it.

    apiextensions-apiserver replaces the schema's ``metadata`` (``type: object`` in a CRD)
    with a reference to ObjectMeta, and ``apiVersion``/``kind`` with TypeMeta's, at the
    root and in every ``x-kubernetes-embedded-resource`` object; so ``kubectl explain
    <kind>.metadata.name`` finds ObjectMeta's fields. The reference is wrapped in ``allOf``
    (OpenAPI v3 ignores a ``$ref``'s sibling ``description``).

    Args:
        crd_schema: the CRD version's ``openAPIV3Schema`` (not changed).

    Returns:
        A new schema; it refers to ObjectMeta, which the document must include.
    """
    schema = copy.deepcopy(crd_schema)
    _add_embedded_meta(schema)
    properties = schema.setdefault("properties", {})
    properties["metadata"] = _object_meta_property()
    properties["apiVersion"] = _type_meta_property("apiVersion")
    properties["kind"] = _type_meta_property("kind")
    return schema


def group_version_document(
    registry: ResourceRegistry,
    group: str,
    version: str,
    crd_schemas: dict[tuple[str, str, str], dict[str, Any]] | None = None,
) -> dict[str, Any] | None:
    """Return the OpenAPI v3 document of one group/version, or None if it is not served.

    A built-in kind's schema is its Kubernetes 1.32 definition, with every definition it
    refers to; a CRD version's is :func:`kube_native_schema` of its ``openAPIV3Schema``
    (with ObjectMeta's definitions), or an open object when the CRD has none.

    Args:
        registry: served types. group, version: the document's group/version.
        crd_schemas: ``(group, version, kind) -> openAPIV3Schema`` of CRD versions.
    """
    types = [rt for rt in registry.in_group_version(group, version) if rt.stored]
    if not registry.in_group_version(group, version):
        return None
    paths: dict[str, Any] = {}
    schemas: dict[str, Any] = {}
    base = "/" + _prefix(group, version)
    for rt in types:
        gvk = {"group": rt.group, "version": rt.version, "kind": rt.kind}
        path = (
            f"{base}/namespaces/{{namespace}}/{rt.plural}/{{name}}"
            if rt.namespaced
            else f"{base}/{rt.plural}/{{name}}"
        )
        builtin = (
            None if rt.crd_name else builtin_schemas.definition_name(rt.group, rt.version, rt.kind)
        )
        name = builtin or _schema_name(rt)
        ref = {"$ref": f"#/components/schemas/{name}"}
        paths[path] = _object_path(gvk, ref)
        if builtin is not None:
            schemas.update(_builtin_component_schemas(builtin))
            continue
        crd_schema = (crd_schemas or {}).get((rt.group, rt.version, rt.kind))
        if crd_schema is None:
            schema: dict[str, Any] = {
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": True,
            }
        else:
            schema = kube_native_schema(crd_schema)
            schemas.update(_builtin_component_schemas(builtin_schemas.OBJECT_META))
        schema["x-kubernetes-group-version-kind"] = [gvk]
        schemas[name] = schema
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": INFO_VERSION},
        "paths": paths,
        "components": {"schemas": schemas},
    }


def root_document(
    registry: ResourceRegistry, documents: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """Return the ``/openapi/v3`` root listing one URL per group/version.

    Args:
        registry: served types (unused beyond ``documents``' keys, kept for symmetry).
        documents: ``"api/v1" | "apis/g/v" -> document``; each URL carries a content hash
            so kubectl's disk cache notices changes.
    """
    del registry
    paths = {}
    for prefix, doc in documents.items():
        digest = hashlib.sha512(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:64].upper()
        paths[prefix] = {"serverRelativeURL": f"/openapi/v3/{prefix}?hash={digest}"}
    return {"paths": paths}


def all_documents(
    registry: ResourceRegistry, crd_schemas: dict[tuple[str, str, str], dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """Return every group/version document keyed by its path prefix."""
    result: dict[str, dict[str, Any]] = {}
    for group, versions in registry.groups():
        for version in versions:
            doc = group_version_document(registry, group, version, crd_schemas)
            if doc is not None:
                result[_prefix(group, version)] = doc
    return result


def v2_document() -> dict[str, Any]:
    """Return the ``/openapi/v2`` document: Swagger 2.0 with no paths and no definitions."""
    return {
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": INFO_VERSION},
        "paths": {},
        "definitions": {},
    }


def wants_v2_protobuf(accept: str) -> bool:
    """Whether an ``Accept`` header asks ``/openapi/v2`` for protobuf (client-go does)."""
    offered = [part.split(";")[0].strip().lower() for part in accept.split(",")]
    return any(media in _V2_PROTOBUF_ACCEPTS for media in offered)


def _length_delimited(field: int, payload: bytes) -> bytes:
    # a proto3 string/message field; these payloads are all shorter than 128 bytes
    if len(payload) >= 0x80:
        raise ValueError(f"field {field}: {len(payload)} bytes needs a multi-byte length")
    return bytes([field << 3 | 2, len(payload)]) + payload


def v2_protobuf() -> bytes:
    """Return :func:`v2_document` as a gnostic ``openapi.v2.Document`` protobuf message.

    Fields (gnostic ``OpenAPIv2.proto``): ``swagger`` = 1, ``info`` = 2 (``title`` = 1,
    ``version`` = 2), ``paths`` = 8 and ``definitions`` = 9 (present, empty).
    """
    info = _length_delimited(1, b"Kubernetes") + _length_delimited(2, INFO_VERSION.encode())
    return (
        _length_delimited(1, b"2.0")
        + _length_delimited(2, info)
        + _length_delimited(8, b"")
        + _length_delimited(9, b"")
    )
