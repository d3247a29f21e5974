"""A memo of CEL rule outcomes, so unchanged values are not evaluated again."""

from __future__ import annotations

import json
from typing import Any

Outcome = tuple[str, str] | None
"""A rule's result: None when it holds, else the field error's ``(reason, message)``."""

ABSENT = "\x00absent"
MAX_CACHED_VALUE_CHARS = 16 * 1024


def canonical_json(value: Any) -> str | None:
    """Return the JSON text of ``value`` as a cache key, or None when it is too large.

    Key order is kept (not sorted): CEL map iteration follows it.
    """
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return text if len(text) <= MAX_CACHED_VALUE_CHARS else None


class RuleResultCache:
    """A bounded memo of rule outcomes keyed by (rule, self JSON, oldSelf JSON).

    CEL rules are pure functions of ``self`` and ``oldSelf``, so an outcome can be reused
    whenever the same rule sees the same values again. That is the common case for
    custom resources: status writes and controller updates repeat an unchanged ``spec``,
    and cel-python's interpreter costs about 0.1 ms per rule evaluation. The cache holds at
    most ``max_entries`` outcomes (oldest dropped first) and skips values whose JSON is
    longer than 16 KiB. Not thread-safe; one per validator.

    Args:
        max_entries: capacity (entries).
    """

    def __init__(self, max_entries: int = 4096) -> None:
        self._entries: dict[tuple[int, str, str], Outcome] = {}
        self._max = max_entries

    def __contains__(self, key: tuple[int, str, str]) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: tuple[int, str, str]) -> Outcome:
        """The stored outcome for ``key`` (which must be present)."""
        return self._entries[key]

    def put(self, key: tuple[int, str, str], outcome: Outcome) -> None:
        """Store ``outcome``, evicting the oldest entry when full."""
        if len(self._entries) >= self._max:
            del self._entries[next(iter(self._entries))]
        self._entries[key] = outcome
