"""Which fields of ``self`` (or ``oldSelf``) a parsed CEL expression reads.

A rule such as ``has(self.assignedPod) == has(self.assignedPodUID)`` depends only on two
fields of ``self``, however large the rest of the value is. The rule walk uses this to key
its outcome memo by those fields alone (a status write that changes ``conditions`` then
reuses the outcome) and to convert only those fields to CEL values.

The analysis is conservative: it answers None, meaning "the whole value", whenever the
variable appears anywhere other than as the target of a plain field selection
(``self.x``, ``has(self.x)``): bare ``self``, ``self == oldSelf``, ``size(self)``,
``self.all(...)``, ``self.matches(...)``, ``self[...]`` and ``oldSelf.value()`` all read
the whole value. A macro variable that shadows the name only adds fields, never hides a
read, so the answer is always a superset of what evaluation can touch.
"""

from __future__ import annotations

from typing import Any

import lark


def field_reads(tree: lark.Tree[Any], variable: str) -> frozenset[str] | None:
    """Return the CEL field names selected on ``variable``, or None if it is used whole.

    Args:
        tree: a cel-python parse tree (``celpy.Environment.compile``).
        variable: ``self`` or ``oldSelf``.

    Returns:
        The escaped CEL names (``__function__`` for ``function``) of the fields that
        ``variable.<name>`` selects anywhere in ``tree`` (empty when the variable is not
        used), or None when some use needs more than those fields.
    """
    fields: set[str] = set()
    stack: list[lark.Tree[Any]] = [tree]
    while stack:
        node = stack.pop()
        if node.data == "ident":
            if _token(node, 0) == variable:
                return None
            continue
        if node.data == "member_dot":
            target = node.children[0]
            if isinstance(target, lark.Tree) and _bare_ident(target) == variable:
                fields.add(_token(node, 1))
                continue
        stack.extend(c for c in node.children if isinstance(c, lark.Tree))
    return frozenset(fields)


def _token(node: lark.Tree[Any], index: int) -> str:
    token = node.children[index]
    return str(token.value) if isinstance(token, lark.Token) else ""


def _bare_ident(expr: lark.Tree[Any]) -> str | None:
    """The identifier ``expr`` denotes when it is only an identifier (in parentheses too)."""
    node = expr
    while node.data != "ident":
        subtrees = [c for c in node.children if isinstance(c, lark.Tree)]
        if len(subtrees) != 1 or len(subtrees) != len(node.children):
            return None
        node = subtrees[0]
    return _token(node, 0)
