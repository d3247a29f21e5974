"""The three PATCH bodies kube-apiserver accepts, as pure functions over JSON values.

* JSON merge patch (RFC 7386, ``application/merge-patch+json``): written here; it is a
  dozen lines and the RFC's reference algorithm.
* JSON patch (RFC 6902, ``application/json-patch+json``): delegated to the ``jsonpatch``
  library.
* Strategic merge patch (``application/strategic-merge-patch+json``), built-in kinds only,
  with these documented simplifications of Kubernetes' schema-driven algorithm:

  - maps merge like a merge patch (``null`` deletes a key);
  - lists are merged by key only for the fields in :data:`MERGE_KEYS`, which are chosen by
    field name rather than by the Go type (``containers``, ``initContainers``, ``env``,
    ``volumes``, ``imagePullSecrets`` by ``name``; ``volumeMounts`` by ``mountPath``;
    ``ports`` by ``containerPort`` when items carry it, else by ``port``; ``conditions`` by
    ``type``; ``ownerReferences`` by ``uid``); ``finalizers`` merges as a set of strings;
    every other list is replaced;
  - directives: ``$patch: delete`` on a list item removes the item with that key,
    ``$patch: replace`` on a map or list item replaces instead of merging,
    ``$deleteFromPrimitiveList/<field>`` removes strings from a set-merged list;
    ``$setElementOrder/<field>`` and ``$retainKeys`` are accepted and ignored.

Errors raise :class:`PatchError`, which the HTTP layer answers as ``422``/``400``.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch  # type: ignore[import-untyped]
import jsonpointer  # type: ignore[import-untyped]

MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "imagePullSecrets": "name",
    "resourceClaims": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "conditions": "type",
    "ownerReferences": "uid",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
}
"""List fields merged by key in a strategic merge patch (by field name, see module doc)."""

SET_LISTS = frozenset({"finalizers"})
"""List fields of strings merged as sets in a strategic merge patch."""


class PatchError(ValueError):
    """A patch that is malformed or cannot be applied (a failed ``test``, a bad path)."""


def merge_patch(target: Any, patch: Any) -> Any:
    """Apply an RFC 7386 JSON merge patch.

    Args:
        target: the current JSON value (not modified).
        patch: the patch; a non-object replaces ``target`` entirely.

    Returns:
        A new JSON value.
    """
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def json_patch(target: Any, operations: Any) -> Any:
    """Apply an RFC 6902 JSON patch.

    Args:
        target: the current JSON value (not modified).
        operations: a list of ``{"op": ..., "path": ..., ...}`` operations.

    Returns:
        A new JSON value.

    Raises:
        PatchError: the body is not a list of operations, or an operation fails.
    """
    if not isinstance(operations, list):
        raise PatchError("a JSON patch must be a list of operations")
    try:
        return jsonpatch.JsonPatch(operations).apply(target, in_place=False)
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as exc:
        raise PatchError(str(exc)) from exc
    except (KeyError, TypeError, ValueError) as exc:
        raise PatchError(f"invalid JSON patch operation: {exc}") from exc


def _merge_key_for(field: str, items: list[Any]) -> str | None:
    if field == "ports":
        for item in items:
            if isinstance(item, dict) and "containerPort" in item:
                return "containerPort"
        return "port"
    return MERGE_KEYS.get(field)


def _merge_keyed_list(field: str, current: list[Any], patch: list[Any]) -> list[Any]:
    key = _merge_key_for(field, current + patch)
    if key is None or not all(isinstance(i, dict) for i in patch):
        return [i for i in copy.deepcopy(patch) if not _is_directive_item(i)]
    if any(isinstance(i, dict) and i.get("$patch") == "replace" for i in patch):
        return [copy.deepcopy(i) for i in patch if not _is_directive_item(i)]
    result = copy.deepcopy(current)
    for item in patch:
        if key not in item:
            raise PatchError(f"map in list {field} does not contain the merge key {key!r}")
        index = next(
            (n for n, c in enumerate(result) if isinstance(c, dict) and c.get(key) == item[key]),
            None,
        )
        if item.get("$patch") == "delete":
            if index is not None:
                del result[index]
            continue
        if index is None:
            result.append(strategic_merge_patch({}, item))
        else:
            result[index] = strategic_merge_patch(result[index], item)
    return result


def _is_directive_item(item: Any) -> bool:
    return isinstance(item, dict) and "$patch" in item and len(item) == 1


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """Apply a (simplified) strategic merge patch; see the module docstring for the rules.

    Args:
        target: the current JSON object (not modified).
        patch: the patch object.

    Returns:
        A new JSON value.

    Raises:
        PatchError: a keyed list item lacks its merge key, or an unknown ``$patch`` value.
    """
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    directive = patch.get("$patch")
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if directive == "delete":
        return None
    if directive is not None:
        raise PatchError(f"unknown $patch directive {directive!r}")
    result: dict[str, Any] = copy.deepcopy(target) if isinstance(target, dict) else {}
    deletions: dict[str, list[Any]] = {}
    for key, value in patch.items():
        if key.startswith("$deleteFromPrimitiveList/"):
            deletions[key.split("/", 1)[1]] = list(value or [])
            continue
        if key.startswith("$setElementOrder/") or key == "$retainKeys":
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list) and isinstance(result.get(key), list):
            if key in SET_LISTS:
                merged = list(result[key])
                merged.extend(v for v in value if v not in merged)
                result[key] = merged
            else:
                result[key] = _merge_keyed_list(key, result[key], value)
        elif isinstance(value, list):
            result[key] = [i for i in copy.deepcopy(value) if not _is_directive_item(i)]
        elif isinstance(value, dict):
            merged_value = strategic_merge_patch(result.get(key), value)
            if merged_value is None:
                result.pop(key, None)
            else:
                result[key] = merged_value
        else:
            result[key] = value
    for key, values in deletions.items():
        if isinstance(result.get(key), list):
            result[key] = [v for v in result[key] if v not in values]
    return result
