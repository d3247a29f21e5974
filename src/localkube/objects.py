"""Object metadata rules, as pure functions over plain dicts.

Implements the "Object metadata" and "Status subresource" rules of issue 3 the way
kube-apiserver's generic registry does: uid and creationTimestamp set on create,
``generateName``, ``generation`` starting at 1 and bumped only when something outside
``metadata`` and ``status`` changes, immutable metadata carried over on update,
``status`` separated from the main resource for kinds with a status subresource, and the
finalizer rule "no new finalizers once deletion started". Every rule failure raises
:class:`~localkube.errors.ApiError` before anything is stored.
"""

from __future__ import annotations

import re
import secrets
import uuid
from datetime import UTC, datetime
from typing import Any

from localkube import builtin_types, label_rules, metadata_rules, object_meta
from localkube.errors import ApiError, FieldError, invalid
from localkube.resources import ResourceType

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"

GENERATION_KEYS = frozenset(
    {
        "apps/deployments",
        "apps/replicasets",
        "apiextensions.k8s.io/customresourcedefinitions",
    }
)
"""Built-in kinds that track ``metadata.generation`` (every CRD kind does too)."""

_DNS_LABEL_KEYS = frozenset({"/namespaces", "/services"})
_PATH_SEGMENT_KEYS = frozenset(
    {
        "rbac.authorization.k8s.io/roles",
        "rbac.authorization.k8s.io/rolebindings",
        "rbac.authorization.k8s.io/clusterroles",
        "rbac.authorization.k8s.io/clusterrolebindings",
    }
)


def now_rfc3339(now: datetime | None = None) -> str:
    """Format a wall-clock time the way Kubernetes does (``2024-01-02T03:04:05Z``)."""
    moment = now or datetime.now(UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def tracks_generation(rt: ResourceType) -> bool:
    """Return whether objects of ``rt`` carry ``metadata.generation``."""
    return bool(rt.crd_name) or rt.storage_key in GENERATION_KEYS


def name_errors(rt: ResourceType, name: str, field: str = "metadata.name") -> list[FieldError]:
    """Return the validation errors of an object name for kind ``rt`` (empty if valid)."""
    if rt.storage_key in _PATH_SEGMENT_KEYS:
        if name in (".", "..") or "/" in name or "%" in name:
            return [
                FieldError(
                    field,
                    "FieldValueInvalid",
                    f'Invalid value: "{name}": may not contain "/" or "%"',
                )
            ]
        return []
    if rt.storage_key in _DNS_LABEL_KEYS:
        if len(name) > 63 or not _LABEL.match(name):
            return [
                FieldError(
                    field,
                    "FieldValueInvalid",
                    f'Invalid value: "{name}": a lowercase RFC 1123 label must consist of lower '
                    "case alphanumeric characters or '-', and must start and end with an "
                    "alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
                    "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
                )
            ]
        return []
    if len(name) > 253 or not _SUBDOMAIN.match(name):
        return [
            FieldError(
                field,
                "FieldValueInvalid",
                f'Invalid value: "{name}": a lowercase RFC 1123 subdomain must consist of lower '
                "case alphanumeric characters, '-' or '.', and must start and end with an "
                "alphanumeric character (e.g. 'example.com', regex used for validation is "
                "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
            )
        ]
    return []


def _check_string_map(meta: dict[str, Any], field: str) -> list[FieldError]:
    value = meta.get(field)
    if value is None:
        return []
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        return [
            FieldError(
                f"metadata.{field}",
                "FieldValueTypeInvalid",
                "Invalid value: must be a map of string to string",
            )
        ]
    if field == "labels":
        return label_rules.label_errors(value)
    return label_rules.annotation_errors(value)


def _metadata_errors(meta: dict[str, Any]) -> list[FieldError]:
    return (
        _check_string_map(meta, "labels")
        + _check_string_map(meta, "annotations")
        + metadata_rules.finalizer_errors(meta)
        + metadata_rules.owner_reference_errors(meta)
    )


def check_body_identity(
    rt: ResourceType, obj: Any, *, namespace: str, name: str | None
) -> dict[str, Any]:
    """Check a request body's kind, apiVersion, namespace and name against the URL.

    Args:
        rt: the served type. obj: the decoded body.
        namespace: URL namespace (``""`` for cluster-scoped). name: URL name (None on create).

    Returns:
        The body with ``apiVersion``/``kind`` filled in if missing (and, for a custom
        object, ``metadata`` decoded as ObjectMeta:
        :func:`localkube.object_meta.decode_object_meta` drops unknown keys).

    Raises:
        ApiError: 400 BadRequest on a mismatch, a body that is not an object, or a
            wrong-typed ObjectMeta field (custom objects: any; built-in kinds: labels,
            annotations, finalizers, ownerReferences, also in pod templates) or another
            wrong-typed field of a built-in body (:mod:`localkube.builtin_types`).
    """
    if not isinstance(obj, dict):
        raise ApiError(400, "BadRequest", "the body of the request must be a JSON object")
    if obj.get("kind", rt.kind) != rt.kind:
        raise ApiError(
            400,
            "BadRequest",
            f"the kind in the data ({obj.get('kind')}) does not match the expected kind ({rt.kind})",
        )
    api_version = obj.get("apiVersion", rt.api_version)
    if api_version != rt.api_version:
        group = api_version.rpartition("/")[0]
        if group != rt.group:
            raise ApiError(
                400,
                "BadRequest",
                f"the API version in the data ({api_version}) does not match the expected API version ({rt.api_version})",
            )
    obj["apiVersion"] = rt.api_version
    obj["kind"] = rt.kind
    meta = obj.get("metadata")
    if meta is None:
        meta = obj["metadata"] = {}
    if not isinstance(meta, dict):
        raise ApiError(400, "BadRequest", "metadata must be an object")
    if rt.crd_name:
        object_meta.decode_object_meta(meta, kind=rt.kind, version=rt.version)
    else:
        builtin_types.check_builtin_types(
            obj, storage_key=rt.storage_key, kind=rt.kind, version=rt.version
        )
    if rt.namespaced:
        body_ns = meta.get("namespace")
        if body_ns and body_ns != namespace:
            raise ApiError(
                400,
                "BadRequest",
                "the namespace of the provided object does not match the namespace sent on the request",
            )
        meta["namespace"] = namespace
    else:
        meta.pop("namespace", None)
    if name is not None and meta.get("name", name) != name:
        raise ApiError(
            400,
            "BadRequest",
            f"the name of the object ({meta.get('name')}) does not match the name on the URL ({name})",
        )
    if name is not None:
        meta["name"] = name
    ordered = {
        "apiVersion": obj.pop("apiVersion"),
        "kind": obj.pop("kind"),
        "metadata": obj.pop("metadata"),
    }
    ordered.update(obj)
    return ordered


def generated_name(prefix: str) -> str:
    """Return ``prefix`` plus five random characters, as ``generateName`` does."""
    return prefix[:58] + "".join(secrets.choice(_GENERATE_ALPHABET) for _ in range(5))


def prepare_create(rt: ResourceType, obj: dict[str, Any], *, now: datetime) -> dict[str, Any]:
    """Apply the create-time metadata rules to a checked body (changes ``obj`` in place).

    Sets uid, creationTimestamp and generation, resolves ``generateName``, drops fields a
    client may not set (resourceVersion, deletionTimestamp), and resets ``status`` for kinds
    with a status subresource (Pods start ``Pending``).

    Raises:
        ApiError: 422 Invalid for a missing or malformed name, bad labels/annotations,
            finalizers or ownerReferences.
    """
    meta = obj["metadata"]
    errors: list[FieldError] = []
    if not meta.get("name"):
        prefix = meta.get("generateName")
        if prefix:
            meta["name"] = generated_name(str(prefix))
        else:
            errors.append(
                FieldError(
                    "metadata.name",
                    "FieldValueRequired",
                    "Required value: name or generateName is required",
                )
            )
    if meta.get("name"):
        errors += name_errors(rt, str(meta["name"]))
    errors += _metadata_errors(meta)
    if errors:
        raise invalid(rt.kind, rt.group, str(meta.get("name", "")), errors)
    meta["uid"] = str(uuid.uuid4())
    meta["creationTimestamp"] = now_rfc3339(now)
    for field in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"):
        meta.pop(field, None)
    meta.pop("managedFields", None)
    if tracks_generation(rt):
        meta["generation"] = 1
    else:
        meta.pop("generation", None)
    if "status" in rt.subresources:
        obj.pop("status", None)
        if rt.storage_key == "/pods":
            obj["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
        elif rt.storage_key == "/namespaces":
            obj["status"] = {"phase": "Active"}
    return obj


def _without(obj: dict[str, Any], *fields: str) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in fields}


_IMMUTABLE_META = (
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "namespace",
    "name",
)


def prepare_update(
    rt: ResourceType, old: dict[str, Any], new: dict[str, Any], *, subresource: str = ""
) -> dict[str, Any]:
    """Apply the update-time rules to a checked body; returns the object to store.

    For the main resource of a kind with a status subresource, ``status`` is kept from
    ``old``; for ``subresource="status"`` only ``status`` is taken from ``new``. Immutable
    metadata comes from ``old``; ``generation`` is settled after admission
    (:func:`settle_generation`).

    Raises:
        ApiError: 422 Invalid when a finalizer is added to an object being deleted, the
            body's ``metadata.uid`` differs from the stored one, or labels/annotations
            are malformed.
    """
    new_uid = new["metadata"].get("uid")
    if new_uid and new_uid != old["metadata"].get("uid"):
        raise invalid(
            rt.kind,
            rt.group,
            str(old["metadata"].get("name", "")),
            [
                FieldError(
                    "metadata.uid",
                    "FieldValueInvalid",
                    f'Invalid value: "{new_uid}": field is immutable',
                )
            ],
        )
    if subresource == "status":
        # stored objects are read-only: share everything but the parts this write replaces
        result = {**old, "metadata": dict(old["metadata"])}
        if "status" in new:
            result["status"] = new["status"]
        else:
            result.pop("status", None)
        result["metadata"]["resourceVersion"] = new["metadata"].get("resourceVersion", "")
        return result
    result = new
    meta = result["metadata"]
    old_meta = old["metadata"]
    errors = _metadata_errors(meta)
    if errors:
        raise invalid(rt.kind, rt.group, str(old_meta.get("name", "")), errors)
    for field in _IMMUTABLE_META:
        if field in old_meta:
            meta[field] = old_meta[field]
        else:
            meta.pop(field, None)
    meta.pop("managedFields", None)
    meta.pop("selfLink", None)
    if "status" in rt.subresources:
        if "status" in old:
            result["status"] = old["status"]
        else:
            result.pop("status", None)
    if old_meta.get("deletionTimestamp"):
        added = [
            f for f in meta.get("finalizers") or [] if f not in (old_meta.get("finalizers") or [])
        ]
        if added:
            quoted = ", ".join(f'"{f}"' for f in added)
            raise invalid(
                rt.kind,
                rt.group,
                str(old_meta.get("name", "")),
                [
                    FieldError(
                        "metadata.finalizers",
                        "FieldValueForbidden",
                        f"Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{{{quoted}}}",
                    )
                ],
            )
    return result


def settle_generation(rt: ResourceType, old: dict[str, Any], new: dict[str, Any]) -> None:
    """Set ``new``'s ``metadata.generation``: the stored one, plus one if anything changed.

    Anything outside ``metadata`` and ``status``. Call it on the admitted object (defaults
    applied, in the storage version), as kube-apiserver decides on the decoded and
    defaulted object: an update that only restates or removes a defaulted value (``port:
    null``) changes nothing, keeps the generation, and is then a no-op write (same
    ``resourceVersion``, no watch event).

    Args:
        rt: the type (only kinds that track ``generation`` are touched).
        old: the stored object. new: the object about to be stored (changed in place).
    """
    if not tracks_generation(rt):
        return
    generation = int(old["metadata"].get("generation", 1))
    if _without(old, "metadata", "status") != _without(new, "metadata", "status"):
        generation += 1
    new["metadata"]["generation"] = generation


def is_deleting(obj: dict[str, Any]) -> bool:
    """Return whether deletion of ``obj`` has started (``deletionTimestamp`` is set)."""
    return bool(obj.get("metadata", {}).get("deletionTimestamp"))


def finalizers_of(obj: dict[str, Any]) -> list[str]:
    """Return ``metadata.finalizers`` (empty list if none)."""
    return list(obj.get("metadata", {}).get("finalizers") or [])
