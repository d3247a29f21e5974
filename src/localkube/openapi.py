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
schemas). CRD schemas are included as components so ``kubectl explain`` can read them.

``/openapi/v2`` is served as an empty Swagger 2.0 document (no paths, no definitions), in
JSON or, when asked for, in the gnostic ``openapi.v2.Document`` protobuf encoding that
client-go's ``OpenAPISchema()`` requires. kubectl needs it for a ``kind: List``: its
``fieldValidation`` check says a List has no server-side support, so with
``--validate=strict`` (the default) it validates the List client-side against
``/openapi/v2`` and fails when that is missing. With no definitions kubectl finds no schema
for the List's items and skips their client-side check, then sends each item with
``fieldValidation=Strict`` as for a single object, so the server still validates it.
Building full v2 schemas from the v3 ones would be a large converter for no behaviour the
project depends on.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Final

from localkube.resources import ResourceRegistry, ResourceType

#: The version kube-apiserver's OpenAPI documents carry in ``info.version``.
INFO_VERSION: Final = "v1.32.0-localkube"
#: The protobuf media type of ``/openapi/v2`` (kube-openapi's, and the older ``@`` form).
V2_PROTOBUF_MEDIA_TYPE: Final = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
_V2_PROTOBUF_ACCEPTS: Final = (
    "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
    "application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
)


def _prefix(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def _schema_name(rt: ResourceType) -> str:
    reversed_group = ".".join(reversed(rt.group.split("."))) if rt.group else "io.k8s.api.core"
    return f"{reversed_group}.{rt.version}.{rt.kind}"


def group_version_document(
    registry: ResourceRegistry,
    group: str,
    version: str,
    crd_schemas: dict[tuple[str, str, str], dict[str, Any]] | None = None,
) -> dict[str, Any] | None:
    """Return the OpenAPI v3 document of one group/version, or None if it is not served.

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
        ref = {"$ref": f"#/components/schemas/{_schema_name(rt)}"}
        paths[path] = {
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
        schema = dict(
            (crd_schemas or {}).get((rt.group, rt.version, rt.kind))
            or {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        )
        schema["x-kubernetes-group-version-kind"] = [gvk]
        schemas[_schema_name(rt)] = schema
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
