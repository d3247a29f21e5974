"""Label and field selectors: parsing and matching, pure functions over plain dicts.

Implements the selector grammar of the Kubernetes API ("Labels and Selectors" and "Field
Selectors" in the Kubernetes documentation): label requirements ``k=v``, ``k==v``, ``k!=v``,
``k in (a,b)``, ``k notin (a,b)``, ``k`` (exists) and ``!k`` (does not exist), joined by
commas; field requirements ``f=v``, ``f==v`` and ``f!=v``. A parse error raises
:class:`SelectorError` naming the offending requirement, which the HTTP layer answers as
``400 BadRequest`` the way kube-apiserver does.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


class SelectorError(ValueError):
    """A label or field selector that does not parse or names an unsupported field."""


def _check_label_key(key: str) -> None:
    prefix, _, name = key.rpartition("/")
    if "/" in key and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        raise SelectorError(f"invalid label key {key!r}: prefix must be a DNS subdomain")
    if not name or len(name) > 63 or not _QUALIFIED_NAME.match(name):
        raise SelectorError(
            f"invalid label key {key!r}: name part must be 1-63 characters of "
            "alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
        )


def _check_label_value(value: str) -> None:
    if len(value) > 63 or not _LABEL_VALUE.match(value):
        raise SelectorError(
            f"invalid label value {value!r}: must be at most 63 characters of "
            "alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
        )


@dataclass(frozen=True)
class LabelRequirement:
    """One label requirement.

    Attributes:
        key: the label key.
        operator: ``=``, ``!=``, ``in``, ``notin``, ``exists`` or ``!``.
        values: the values for ``=``, ``!=``, ``in`` and ``notin`` (one value for ``=``/``!=``).
    """

    key: str
    operator: str
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Return whether ``labels`` satisfy this requirement."""
        present = self.key in labels
        if self.operator == "exists":
            return present
        if self.operator == "!":
            return not present
        if self.operator in ("=", "in"):
            return present and labels[self.key] in self.values
        # "!=" and "notin" match objects without the label, as in Kubernetes.
        return not present or labels[self.key] not in self.values


@dataclass(frozen=True)
class LabelSelector:
    """A conjunction of label requirements; the empty selector matches everything."""

    requirements: tuple[LabelRequirement, ...] = ()

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        """Return whether an object's ``metadata.labels`` (None for none) match."""
        requirements = self.requirements
        if not requirements:  # (every watch event is matched: no generator for the usual case)
            return True
        labels = labels or {}
        for requirement in requirements:
            if not requirement.matches(labels):
                return False
        return True


def _split_top_level(text: str) -> list[str]:
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise SelectorError(f"unbalanced ')' in selector {text!r}")
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    if depth != 0:
        raise SelectorError(f"unbalanced '(' in selector {text!r}")
    parts.append("".join(current))
    return parts


_SET_RE = re.compile(r"^(?P<key>\S+)\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)$")


def _parse_label_requirement(part: str) -> LabelRequirement:
    text = part.strip()
    if not text:
        raise SelectorError("empty requirement in label selector")
    match = _SET_RE.match(text)
    if match:
        key = match["key"]
        _check_label_key(key)
        values = [v.strip() for v in match["values"].split(",")]
        if values == [""]:
            raise SelectorError(f"unable to parse requirement {text!r}: empty value set")
        for value in values:
            _check_label_value(value)
        return LabelRequirement(key, match["op"], frozenset(values))
    for op, name in (("!=", "!="), ("==", "="), ("=", "=")):
        if op in text:
            key, _, value = text.partition(op)
            key, value = key.strip(), value.strip()
            _check_label_key(key)
            _check_label_value(value)
            return LabelRequirement(key, name, frozenset({value}))
    if text.startswith("!"):
        key = text[1:].strip()
        _check_label_key(key)
        return LabelRequirement(key, "!")
    if " " in text or "(" in text or ")" in text:
        raise SelectorError(f"unable to parse requirement {text!r}")
    _check_label_key(text)
    return LabelRequirement(text, "exists")


def parse_label_selector(text: str | None) -> LabelSelector:
    """Parse a ``labelSelector`` query string.

    Args:
        text: e.g. ``app=web,tier in (a,b),!canary``; None or empty selects everything.

    Returns:
        The parsed selector.

    Raises:
        SelectorError: a requirement does not parse or has an invalid key or value.
    """
    if not text or not text.strip():
        return LabelSelector()
    return LabelSelector(tuple(_parse_label_requirement(p) for p in _split_top_level(text)))


def label_selector_from_dict(selector: Mapping[str, Any] | None) -> LabelSelector:
    """Build a selector from a ``metav1.LabelSelector`` object (matchLabels/matchExpressions).

    The one structured-selector reader of localkube: Deployment and Service selectors,
    ClusterRole aggregation. An empty selector matches everything (Kubernetes
    ``LabelSelectorAsSelector``).

    Args:
        selector: ``{"matchLabels": {k: v}, "matchExpressions": [{key, operator, values}]}``;
            operators ``In``, ``NotIn``, ``Exists``, ``DoesNotExist``; None or empty.

    Raises:
        SelectorError: a malformed selector (wrong types, an unknown operator, ``values``
            empty for ``In``/``NotIn`` or not empty for ``Exists``/``DoesNotExist``); the
            message names the offending part.
    """
    if not selector:
        return LabelSelector()
    match_labels = selector.get("matchLabels") or {}
    if not isinstance(match_labels, Mapping):
        raise SelectorError("matchLabels must be an object of string values")
    requirements = [
        LabelRequirement(str(k), "=", frozenset({str(v)})) for k, v in match_labels.items()
    ]
    expressions = selector.get("matchExpressions") or []
    if not isinstance(expressions, list):
        raise SelectorError("matchExpressions must be a list")
    for index, expression in enumerate(expressions):
        if not isinstance(expression, Mapping):
            raise SelectorError(f"matchExpressions[{index}] must be an object")
        key, operator = expression.get("key"), expression.get("operator")
        values = expression.get("values") or []
        if not isinstance(key, str) or not isinstance(values, list):
            raise SelectorError(f"matchExpressions[{index}]: key must be a string, values a list")
        op = _STRUCTURED_OPERATORS.get(operator) if isinstance(operator, str) else None
        if op is None:
            raise SelectorError(
                f"matchExpressions[{index}].operator: {operator!r} is not a valid label "
                "selector operator (In, NotIn, Exists, DoesNotExist)"
            )
        if op in ("in", "notin") and not values:
            raise SelectorError(
                f"matchExpressions[{index}].values: must be non-empty for operator {operator}"
            )
        if op in ("exists", "!") and values:
            raise SelectorError(
                f"matchExpressions[{index}].values: must be empty for operator {operator}"
            )
        requirements.append(LabelRequirement(key, op, frozenset(str(v) for v in values)))
    return LabelSelector(tuple(requirements))


_STRUCTURED_OPERATORS: dict[str, str] = {
    "In": "in",
    "NotIn": "notin",
    "Exists": "exists",
    "DoesNotExist": "!",
}


FieldGetter = Callable[[Mapping[str, Any]], str | None]


def _path_getter(path: str) -> FieldGetter:
    parts = path.split(".")

    def get(obj: Mapping[str, Any]) -> str | None:
        node: Any = obj
        for part in parts:
            # (decoded JSON objects are dicts: spare the slow abstract-class check)
            if type(node) is not dict and not isinstance(node, Mapping):
                return None
            node = node.get(part)
        if node is None:
            return None
        if isinstance(node, bool):
            return "true" if node else "false"
        return str(node)

    return get


@dataclass(frozen=True)
class FieldRequirement:
    """One field requirement: ``field`` equals (or, with ``negate``, differs from) ``value``."""

    field: str
    value: str
    negate: bool
    getter: FieldGetter

    def matches(self, obj: Mapping[str, Any]) -> bool:
        """Return whether ``obj`` satisfies this requirement (a missing field reads as "")."""
        actual = self.getter(obj) or ""
        return (actual == self.value) != self.negate


@dataclass(frozen=True)
class FieldSelector:
    """A conjunction of field requirements; the empty selector matches everything."""

    requirements: tuple[FieldRequirement, ...] = ()

    def matches(self, obj: Mapping[str, Any]) -> bool:
        """Return whether the object satisfies every requirement."""
        for requirement in self.requirements:
            if not requirement.matches(obj):
                return False
        return True

    def exact_value(self, field: str) -> str | None:
        """Return the value ``field`` must equal, if one requirement pins it (for indexing)."""
        for r in self.requirements:
            if r.field == field and not r.negate:
                return r.value
        return None


def _split_unescaped_commas(text: str) -> list[str]:
    """``text`` split at the commas that no backslash escapes (escapes kept for later)."""
    parts, start, escaped = [], 0, False
    for index, char in enumerate(text):
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == ",":
            parts.append(text[start:index])
            start = index + 1
    parts.append(text[start:])
    return parts


def _first_unescaped_operator(term: str) -> tuple[int, str | None]:
    """Index and text of the first ``!=``, ``==`` or ``=`` not escaped by a backslash."""
    escaped = False
    for index, char in enumerate(term):
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif term.startswith("!=", index):
            return index, "!="
        elif term.startswith("==", index):
            return index, "=="
        elif char == "=":
            return index, "="
    return -1, None


def _unescape_field_value(value: str) -> str:
    """A field selector value with ``\\\\``, ``\\,`` and ``\\=`` unescaped (as Kubernetes does).

    Raises:
        SelectorError: another character follows a backslash, or a ``,``/``=`` is not
            escaped (Kubernetes' ``fields.UnescapeValue`` errors).
    """
    if "\\" not in value and "=" not in value:
        return value
    out: list[str] = []
    escaped = False
    for char in value:
        if escaped:
            if char not in "\\,=":
                raise SelectorError(f"invalid escape sequence: \\{char}")
            out.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char in ",=":
            raise SelectorError(f"invalid field selector: unescaped character in value: {char!r}")
        else:
            out.append(char)
    if escaped:
        raise SelectorError("invalid escape sequence: \\ at the end of the value")
    return "".join(out)


def parse_field_selector(text: str | None, supported: frozenset[str]) -> FieldSelector:
    """Parse a ``fieldSelector`` query string.

    Args:
        text: e.g. ``metadata.name=web,status.phase!=Running``; None or empty selects all.
            A value may hold ``\\\\``, ``\\,`` and ``\\=`` (Kubernetes' escapes).
        supported: the field paths this resource supports (``metadata.name`` and
            ``metadata.namespace`` always; per-kind extras such as ``spec.nodeName``).

    Returns:
        The parsed selector.

    Raises:
        SelectorError: a requirement does not parse, or ``field label not supported: F``.
    """
    if not text or not text.strip():
        return FieldSelector()
    requirements: list[FieldRequirement] = []
    for part in _split_unescaped_commas(text):
        item = part.strip()
        if not item:
            continue
        at, op = _first_unescaped_operator(item)
        if op is None:
            raise SelectorError(f"invalid selector: {text!r}; can't understand {item!r}")
        field, value = item[:at].strip(), _unescape_field_value(item[at + len(op) :].strip())
        negate = op == "!="
        if field not in supported:
            raise SelectorError(f"field label not supported: {field}")
        requirements.append(FieldRequirement(field, value, negate, _path_getter(field)))
    return FieldSelector(tuple(requirements))
