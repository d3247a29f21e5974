"""A memo of CEL rule outcomes, so unchanged values are not evaluated again."""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

Outcome = tuple[str, str] | None
"""A rule's result: None when it holds, else the field error's ``(reason, message)``."""

CacheKey = tuple[int, Hashable, Hashable]
"""``(id(rule), self key, oldSelf key)``; see :class:`ValueKeys`."""

ABSENT = "\x00absent"
"""The oldSelf key of a transition rule evaluated without an old value."""
MAX_CACHED_VALUE_CHARS = 16 * 1024
SUBTREE_PROBES = 32
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, check_circular=False)
"""Built once (``json.dumps`` with options builds an encoder per call); admitted values are
decoded JSON, never circular, so no circular-reference bookkeeping."""


def canonical_json(value: Any) -> str | None:
    """Return the JSON text of ``value`` as a cache key, or None when it is too large.

    Key order is kept (not sorted): CEL map iteration follows it.
    """
    text = _ENCODER.encode(value)
    return text if len(text) <= MAX_CACHED_VALUE_CHARS else None


class ValueKeys:
    """Cache keys for one value as the rules of its schema node read it.

    A rule that uses ``self`` whole is keyed by the value's JSON text. A rule that reads
    only named fields (``self.a``, ``has(self.b)``) is keyed by those fields alone: a tuple
    with, per field, None when absent, the string itself for a string, else a 1-tuple of
    its JSON text (so ``"1"`` and ``1`` never share a key). Field parts are computed once
    per value and shared by every rule of the node. None means "too large to cache": the
    value's JSON, or the selected fields together, exceed 16 KiB.

    Args:
        value: the JSON value ``self`` (or ``oldSelf``) is bound to.
    """

    def __init__(self, value: Any) -> None:
        self._value = value
        self._whole: str | None = None
        self._whole_done = False
        self._fields: dict[str, tuple[Hashable, int]] = {}
        self._keys: dict[tuple[str, ...], Hashable] = {}

    def key(self, fields: tuple[str, ...] | None) -> Hashable:
        """The key for a rule reading ``fields`` (JSON property names; None: the whole)."""
        if fields is None or not isinstance(self._value, dict):
            if not self._whole_done:
                self._whole = canonical_json(self._value)
                self._whole_done = True
            return self._whole
        found = self._keys.get(fields, ABSENT)
        if found is ABSENT:
            parts = []
            size = 0
            for name in fields:
                part, length = self._field(name)
                parts.append(part)
                size += length
            found = self._keys[fields] = tuple(parts) if size <= MAX_CACHED_VALUE_CHARS else None
        return found

    def _field(self, name: str) -> tuple[Hashable, int]:
        cached = self._fields.get(name)
        if cached is None:
            assert isinstance(self._value, dict)
            if name not in self._value:
                cached = (None, 0)
            else:
                item = self._value[name]
                if type(item) is str:
                    cached = (item, len(item))
                else:
                    text = _ENCODER.encode(item)
                    cached = ((text,), len(text))
            self._fields[name] = cached
        return cached


class RuleResultCache:
    """A bounded memo of rule outcomes keyed by (rule, self key, oldSelf key).

    CEL rules are pure functions of ``self`` and ``oldSelf``, so an outcome can be reused
    whenever the same rule sees the same values again. That is the common case for
    custom resources: status writes and controller updates repeat an unchanged ``spec``,
    and a rule reading a few fields of ``status`` sees the same fields again. cel-python's
    interpreter costs about 0.1-1 ms per rule evaluation. The cache holds at most
    ``max_entries`` outcomes (oldest dropped first); values too large to key
    (:class:`ValueKeys`) are not cached. It also keeps the errors of whole subtrees under
    the object root (``spec``), so an unchanged ``spec`` costs one lookup instead of a walk
    over its rules. Not thread-safe; one per validator.

    Args:
        max_entries: capacity (entries).
    """

    def __init__(self, max_entries: int = 4096) -> None:
        # OrderedDicts: evicting the oldest entry of a plain dict (``next(iter(d))``) scans
        # the slots its earlier evictions left empty (microseconds once churning)
        self._entries: OrderedDict[CacheKey, Outcome] = OrderedDict()
        self._max = max_entries
        self._subtrees: OrderedDict[tuple[int, str, str], tuple[tuple[str, str, str], ...]] = (
            OrderedDict()
        )
        self._subtree_stats: dict[int, list[int]] = {}

    def __contains__(self, key: CacheKey) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: CacheKey) -> Outcome:
        """The stored outcome for ``key`` (which must be present)."""
        return self._entries[key]

    def put(self, key: CacheKey, outcome: Outcome) -> None:
        """Store ``outcome``, evicting the oldest entry when full."""
        if len(self._entries) >= self._max:
            self._entries.popitem(last=False)
        self._entries[key] = outcome

    def subtree_worth_trying(self, node_id: int) -> bool:
        """Whether :meth:`subtree_get` has paid off for this schema node so far.

        After ``SUBTREE_PROBES`` lookups with fewer than a quarter answered, the node's
        subtree (a ``status`` that changes on every write) is walked rule by rule only.
        """
        lookups, hits = self._subtree_stats.get(node_id, (0, 0))
        return lookups < SUBTREE_PROBES or hits * 4 >= lookups

    def subtree_get(self, key: tuple[int, str, str]) -> tuple[tuple[str, str, str], ...] | None:
        """The ``(field, reason, message)`` errors of every rule under a subtree, if known.

        Args:
            key: ``(id(schema node), JSON of the value, JSON of the old value or ABSENT)``.
        """
        found = self._subtrees.get(key)
        stats = self._subtree_stats.setdefault(key[0], [0, 0])
        stats[0] += 1
        stats[1] += found is not None
        return found

    def subtree_put(
        self, key: tuple[int, str, str], errors: tuple[tuple[str, str, str], ...]
    ) -> None:
        """Store a subtree's rule errors, evicting the oldest entry when full."""
        if len(self._subtrees) >= self._max:
            self._subtrees.popitem(last=False)
        self._subtrees[key] = errors
