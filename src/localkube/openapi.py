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
``/openapi/v2`` is not served.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from localkube.resources import ResourceRegistry, ResourceType


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
        "info": {"title": "Kubernetes", "version": "v1.32.0-localkube"},
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
