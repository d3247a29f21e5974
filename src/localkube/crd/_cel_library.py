"""Kubernetes CEL library functions that cel-python lacks, added as custom functions.

cel-python 0.5 implements the CEL standard definitions (``size``, ``contains``,
``startsWith``, ``endsWith``, ``matches``, conversions, timestamp accessors and the ``has``,
``all``, ``exists``, ``exists_one``, ``map``, ``filter`` macros). Kubernetes adds the
cel-go *strings* extension and its own *list* and *regex* libraries; the easy, pure ones
are written here with Kubernetes semantics:

- strings: ``charAt``, ``indexOf``, ``lastIndexOf``, ``lowerAscii``, ``upperAscii``,
  ``replace``, ``split``, ``substring``, ``trim``, ``join``, ``reverse``. Indices and
  lengths count Unicode code points, as in cel-go.
- lists: ``isSorted``, ``sum``, ``indexOf``, ``lastIndexOf`` (``min``/``max``: ``min`` is
  cel-python's own; ``max`` is here).
- regex: ``find``, ``findAll`` (RE2 syntax through the ``re2`` module cel-python uses).
- comparisons: ``<``, ``<=``, ``>``, ``>=`` across int, uint and double, and
  heterogeneous ``==``/``!=`` (``1 == 1.0`` is true, ``1 == 'a'`` is false), as Kubernetes
  enables cel-go's cross-type numeric comparisons; cel-python alone reports "no such
  overload" for these.
- optionals, for ``optionalOldSelf: true`` rules: ``hasValue``, ``value``, ``orValue``
  on the ``oldSelf`` optional.

A function called with arguments of the wrong kind returns a ``no such overload``
evaluation error, as cel-go does at run time.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import re2  # type: ignore[import-untyped]
from celpy import celtypes, evaluation
from celpy.evaluation import CELEvalError

Value = Any


class OptionalValue:
    """A CEL ``optional`` holding ``oldSelf`` for ``optionalOldSelf: true`` transition rules.

    Args:
        value: the old value (a cel-python value) or ``None`` when there is no old value;
            ``present`` says which, because ``null`` is a legal old value.
    """

    __slots__ = ("present", "value")

    def __init__(self, value: Value, *, present: bool) -> None:
        self.value = value
        self.present = present

    def __eq__(self, other: object) -> bool:
        if isinstance(other, OptionalValue):
            return self.present == other.present and (
                not self.present or bool(self.value == other.value)
            )
        return False

    def __hash__(self) -> int:
        return hash(self.present)

    def __repr__(self) -> str:
        return f"optional.of({self.value!r})" if self.present else "optional.none()"


def _overload(name: str) -> CELEvalError:
    return CELEvalError(f"no such overload: {name}", TypeError, (name,))


def _error(message: str) -> CELEvalError:
    return CELEvalError(message, ValueError, (message,))


def _is_str(value: Value) -> bool:
    return isinstance(value, str)


def char_at(text: Value, index: Value = None) -> Value:
    """``string.charAt(int) -> string``: the code point at ``index``; ``""`` at the end."""
    if not _is_str(text) or not isinstance(index, int):
        return _overload("charAt")
    if index < 0 or index > len(text):
        return _error(f"index out of range: {index}")
    return celtypes.StringType(text[index : index + 1])


def index_of(target: Value, needle: Value = None, offset: Value = None) -> Value:
    """``string.indexOf(string[, int]) -> int`` and the list library's ``list.indexOf(T)``."""
    if isinstance(target, list):
        if offset is not None:
            return _overload("indexOf")
        for position, item in enumerate(target):
            if item == needle:
                return celtypes.IntType(position)
        return celtypes.IntType(-1)
    if not _is_str(target) or not _is_str(needle):
        return _overload("indexOf")
    start = 0 if offset is None else offset
    if not isinstance(start, int):
        return _overload("indexOf")
    if start < 0 or start > len(target):
        return _error(f"index out of range: {start}")
    return celtypes.IntType(target.find(needle, start))


def last_index_of(target: Value, needle: Value = None, offset: Value = None) -> Value:
    """``string.lastIndexOf(string[, int]) -> int`` and ``list.lastIndexOf(T)``."""
    if isinstance(target, list):
        if offset is not None:
            return _overload("lastIndexOf")
        for position in range(len(target) - 1, -1, -1):
            if target[position] == needle:
                return celtypes.IntType(position)
        return celtypes.IntType(-1)
    if not _is_str(target) or not _is_str(needle):
        return _overload("lastIndexOf")
    if offset is None:
        return celtypes.IntType(target.rfind(needle))
    if not isinstance(offset, int):
        return _overload("lastIndexOf")
    if offset < 0 or offset > len(target):
        return _error(f"index out of range: {offset}")
    return celtypes.IntType(target.rfind(needle, 0, offset + len(needle)))


def lower_ascii(text: Value) -> Value:
    """``string.lowerAscii() -> string``: lower-cases ASCII letters only."""
    if not _is_str(text):
        return _overload("lowerAscii")
    return celtypes.StringType("".join(c.lower() if "A" <= c <= "Z" else c for c in text))


def upper_ascii(text: Value) -> Value:
    """``string.upperAscii() -> string``: upper-cases ASCII letters only."""
    if not _is_str(text):
        return _overload("upperAscii")
    return celtypes.StringType("".join(c.upper() if "a" <= c <= "z" else c for c in text))


def replace(text: Value, old: Value = None, new: Value = None, limit: Value = None) -> Value:
    """``string.replace(string, string[, int]) -> string``; a negative limit means all."""
    if not (_is_str(text) and _is_str(old) and _is_str(new)):
        return _overload("replace")
    count = -1 if limit is None else limit
    if not isinstance(count, int):
        return _overload("replace")
    return celtypes.StringType(text.replace(old, new, count))


def split(text: Value, separator: Value = None, limit: Value = None) -> Value:
    """``string.split(string[, int]) -> list(string)`` with cel-go's limit rules.

    A limit of 0 gives an empty list, 1 the whole string, a negative limit no limit. An
    empty separator splits into code points.
    """
    if not (_is_str(text) and _is_str(separator)):
        return _overload("split")
    count = -1 if limit is None else limit
    if not isinstance(count, int):
        return _overload("split")
    if count == 0:
        return celtypes.ListType([])
    if separator == "":
        parts = list(text)
        if count > 0 and len(parts) > count:
            parts = parts[: count - 1] + ["".join(parts[count - 1 :])]
    else:
        parts = text.split(separator, count - 1 if count > 0 else -1)
    return celtypes.ListType([celtypes.StringType(p) for p in parts])


def substring(text: Value, start: Value = None, end: Value = None) -> Value:
    """``string.substring(int[, int]) -> string`` over code points; bad ranges are errors."""
    if not _is_str(text) or not isinstance(start, int):
        return _overload("substring")
    stop = len(text) if end is None else end
    if not isinstance(stop, int):
        return _overload("substring")
    if start < 0 or start > len(text):
        return _error(f"index out of range: {start}")
    if stop < 0 or stop > len(text):
        return _error(f"index out of range: {stop}")
    if start > stop:
        return _error(f"invalid substring range. start: {start}, end: {stop}")
    return celtypes.StringType(text[start:stop])


_WHITESPACE = "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"


def trim(text: Value) -> Value:
    """``string.trim() -> string``: strips Unicode white space at both ends."""
    if not _is_str(text):
        return _overload("trim")
    return celtypes.StringType(text.strip(_WHITESPACE))


def join(items: Value, separator: Value = None) -> Value:
    """``list(string).join([string]) -> string``."""
    sep = "" if separator is None else separator
    if not isinstance(items, list) or not _is_str(sep) or not all(_is_str(i) for i in items):
        return _overload("join")
    return celtypes.StringType(sep.join(items))


def reverse(text: Value) -> Value:
    """``string.reverse() -> string`` (code points in reverse order)."""
    if not _is_str(text):
        return _overload("reverse")
    return celtypes.StringType(text[::-1])


def _comparable(items: list[Value]) -> bool:
    kinds = {type(i) for i in items}
    numeric = {celtypes.IntType, celtypes.UintType, celtypes.DoubleType}
    return len(kinds) <= 1 or kinds <= numeric


def is_sorted(items: Value) -> Value:
    """``list.isSorted() -> bool`` for lists of comparable values."""
    if not isinstance(items, list) or not _comparable(items):
        return _overload("isSorted")
    return celtypes.BoolType(all(items[i] <= items[i + 1] for i in range(len(items) - 1)))


def sum_(items: Value) -> Value:
    """``list.sum() -> int|uint|double``; an empty list sums to 0."""
    if not isinstance(items, list) or not _comparable(items):
        return _overload("sum")
    if not items:
        return celtypes.IntType(0)
    total = items[0]
    for item in items[1:]:
        total = total + item
    return total


def max_(items: Value) -> Value:
    """``list.max() -> T``; an empty list is an error."""
    if not isinstance(items, list) or not _comparable(items):
        return _overload("max")
    if not items:
        return _error("max called on empty list")
    return max(items)


def find(text: Value, pattern: Value = None) -> Value:
    """``string.find(regex) -> string``: the first match or ``""``."""
    if not (_is_str(text) and _is_str(pattern)):
        return _overload("find")
    try:
        match = re2.search(pattern, text)
    except re2.error as exc:
        return _error(f"invalid regex: {exc}")
    return celtypes.StringType(match.group(0) if match else "")


def find_all(text: Value, pattern: Value = None, limit: Value = None) -> Value:
    """``string.findAll(regex[, int]) -> list(string)``; a negative limit means all."""
    if not (_is_str(text) and _is_str(pattern)):
        return _overload("findAll")
    count = -1 if limit is None else limit
    if not isinstance(count, int):
        return _overload("findAll")
    try:
        found = [m.group(0) for m in re2.finditer(pattern, text)]
    except re2.error as exc:
        return _error(f"invalid regex: {exc}")
    if count >= 0:
        found = found[:count]
    return celtypes.ListType([celtypes.StringType(f) for f in found])


def has_value(optional: Value) -> Value:
    """``optional.hasValue() -> bool``."""
    if not isinstance(optional, OptionalValue):
        return _overload("hasValue")
    return celtypes.BoolType(optional.present)


def value(optional: Value) -> Value:
    """``optional.value() -> T``; an error on an empty optional."""
    if not isinstance(optional, OptionalValue):
        return _overload("value")
    if not optional.present:
        return _error("optional.none() dereference")
    return optional.value


def or_value(optional: Value, fallback: Value = None) -> Value:
    """``optional.orValue(T) -> T``."""
    if not isinstance(optional, OptionalValue):
        return _overload("orValue")
    return optional.value if optional.present else fallback


def _number(value: Value) -> int | float | None:
    if isinstance(value, celtypes.BoolType):
        return None
    if isinstance(value, celtypes.DoubleType):
        return float(value)
    if isinstance(value, celtypes.IntType | celtypes.UintType):
        return int(value)
    return None


def _cross_numeric(
    compare: Callable[[Any, Any], bool], standard: Callable[[Value, Value], Value]
) -> Callable[[Value, Value], Value]:
    """An ordering operator that also compares int, uint and double with each other."""

    def ordered(left: Value, right: Value) -> Value:
        a, b = _number(left), _number(right)
        if a is not None and b is not None and type(left) is not type(right):
            return celtypes.BoolType(compare(a, b))
        return standard(left, right)

    return ordered


def _heterogeneous(equal: bool) -> Callable[[Value, Value], Value]:
    """``==`` (or ``!=``) with numeric cross-type equality; other mismatches are unequal."""
    standard = evaluation.bool_eq if equal else evaluation.bool_ne

    def compare(left: Value, right: Value) -> Value:
        if isinstance(left, CELEvalError):
            return left
        if isinstance(right, CELEvalError):
            return right
        a, b = _number(left), _number(right)
        if a is not None and b is not None:
            return celtypes.BoolType((a == b) == equal)
        if isinstance(left, celtypes.BoolType) != isinstance(right, celtypes.BoolType):
            return celtypes.BoolType(not equal)
        try:
            return standard(left, right)
        except TypeError:
            return celtypes.BoolType(not equal)

    return compare


OPERATORS: dict[str, Callable[..., Value]] = {
    "_<_": _cross_numeric(operator.lt, evaluation.bool_lt),
    "_<=_": _cross_numeric(operator.le, evaluation.bool_le),
    "_>_": _cross_numeric(operator.gt, evaluation.bool_gt),
    "_>=_": _cross_numeric(operator.ge, evaluation.bool_ge),
    "_==_": _heterogeneous(True),
    "_!=_": _heterogeneous(False),
}


FUNCTIONS: dict[str, Callable[..., Value]] = {
    "charAt": char_at,
    "indexOf": index_of,
    "lastIndexOf": last_index_of,
    "lowerAscii": lower_ascii,
    "upperAscii": upper_ascii,
    "replace": replace,
    "split": split,
    "substring": substring,
    "trim": trim,
    "join": join,
    "reverse": reverse,
    "isSorted": is_sorted,
    "sum": sum_,
    "max": max_,
    "find": find,
    "findAll": find_all,
    "hasValue": has_value,
    "value": value,
    "orValue": or_value,
    **OPERATORS,
}
"""Custom functions handed to every cel-python program, by CEL name."""

OPTIONAL_FUNCTIONS = frozenset({"hasValue", "value", "orValue"})
"""Functions that only make sense on ``oldSelf`` in ``optionalOldSelf: true`` rules."""
