"""The status a runtimed write sends: the cached status with a decision's patch merged in.

:func:`krt.api.patches.apply_merge_patch` deep-copies the whole target and every patch
value so its result can be edited freely. runtimed never edits the status it sends: it
serialises it once in the write and then drops it (the API server's answer becomes the next
cached object). Under a task burst those deep copies were about a tenth of runtimed's CPU
in its status writes (issue 6: ~55 ``copy.deepcopy`` calls per write for a Run's
conditions), so :func:`merged_status` shares unchanged values with its inputs instead.
The RFC 7386 semantics are those of ``apply_merge_patch``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["merged_status"]


def merged_status(target: Mapping[str, Any] | None, patch: Mapping[str, Any]) -> dict[str, Any]:
    """Apply an RFC 7386 JSON merge patch without copying what it leaves unchanged.

    Neither input is modified, but the result shares nested values (lists, and mappings
    the patch does not touch) with ``target`` and ``patch``: it must be treated as
    read-only, like the informer cache it is built from.

    Args:
        target: the current document (``None`` counts as an empty object).
        patch: the merge patch; nested mappings merge, ``None`` deletes, anything else
            (lists included) replaces.

    Returns:
        A new top-level dict (and new dicts along every merged path).
    """
    result: dict[str, Any] = dict(target) if target is not None else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        elif isinstance(value, Mapping):
            existing = result.get(key)
            result[key] = merged_status(existing if isinstance(existing, Mapping) else None, value)
        else:
            result[key] = value
    return result
