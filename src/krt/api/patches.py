"""Status patches: the currency of every pure decision in kruntimes.

A decision ("given this Run and this observation, what now?") returns a :data:`StatusPatch`:
a JSON merge patch (RFC 7386) for the object's ``status``, in wire field names, where ``None``
deletes a field. The caller sends it as ``{"status": patch}`` with
``Content-Type: application/merge-patch+json`` and ``metadata.resourceVersion`` set (a
conditional update: a stale writer gets 409 and re-reads, DESIGN.md invariants), or applies it
locally with :func:`apply_merge_patch` and PUTs the whole object to ``/status``.

Lists (``conditions``) are replaced whole by a merge patch, so condition helpers always return
the complete new list.

RFC 7386 is implemented here (a dozen lines) rather than through a package: the available
one (``json-merge-patch``) is unmaintained and untyped.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, TypeAlias

StatusPatch: TypeAlias = dict[str, Any]
"""A JSON merge patch for ``status``; ``None`` values delete fields."""


def apply_merge_patch(target: Mapping[str, Any] | None, patch: Mapping[str, Any]) -> dict[str, Any]:
    """Apply an RFC 7386 JSON merge patch and return the result; the inputs are not modified.

    Args:
        target: the document (``None`` counts as an empty object).
        patch: the merge patch; nested mappings merge, ``None`` deletes, anything else
            (lists included) replaces.

    Returns:
        A new dict.
    """
    result: dict[str, Any] = copy.deepcopy(dict(target)) if target is not None else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        elif isinstance(value, Mapping):
            existing = result.get(key)
            result[key] = apply_merge_patch(
                existing if isinstance(existing, Mapping) else None, value
            )
        else:
            result[key] = copy.deepcopy(value)
    return result
