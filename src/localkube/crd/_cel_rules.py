"""``x-kubernetes-validations`` rules: compiled at CRD create, evaluated at admission.

Each rule is compiled once (:func:`compile_rules`) into a :class:`CompiledRule`. At
admission :func:`evaluate_rules` walks the new object together with the old one and
evaluates every rule where its value exists, with ``self`` bound to that value. A rule that
mentions ``oldSelf`` is a *transition rule*: it runs only on update and only when the old
object has a value at the same place (correlated through object properties, map keys and
``x-kubernetes-list-type: map`` keys), unless ``optionalOldSelf: true`` makes ``oldSelf``
an optional that is empty on create. Transition rules below atomic or set lists cannot be
correlated and are rejected at CRD create, as Kubernetes does.

A failing rule becomes a field error exactly as kube-apiserver builds it: the field is the
value's path (plus the rule's ``fieldPath``), the bad value is the schema type
(``Invalid value: "string": ...``), the detail is the evaluated ``messageExpression``, else
``message``, else ``failed rule: <rule>``, and ``reason`` picks ``Forbidden``,
``Required value``, ``Duplicate value`` or ``Invalid value``.

Rules are pure functions of ``self`` and ``oldSelf``, so outcomes are memoized
(:class:`~localkube.crd._rule_cache.RuleResultCache`): a rule that reads only named fields
(``has(self.a) == has(self.b)``, see :mod:`localkube.crd._cel_reads`) is keyed by those
fields alone and converts only them to CEL values, and the whole walk of an unchanged
child of the root is one lookup. Subtrees without rules are not walked.

Validation ratcheting (kube-apiserver 1.30+, ``CRDValidationRatcheting``): on update, a
rule that does not use ``oldSelf`` is not evaluated where the value equals its correlated
old value (it passed, or was ratcheted, before), and an unchanged subtree without
transition rules is not walked at all. So a status write, which keeps the stored ``spec``,
evaluates no ``spec`` rule except transition rules.
"""

from __future__ import annotations

import re
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from celpy import celtypes
from celpy.evaluation import CELEvalError

from localkube.crd import _fielderrors as fe
from localkube.crd._cel_compile import CheckedExpression, compile_expression
from localkube.crd._cel_library import OptionalValue
from localkube.crd._cel_values import Memo, escape_property, to_cel, to_cel_fields
from localkube.crd._fielderrors import UnsupportedSchema
from localkube.crd._rule_cache import (
    ABSENT,
    CacheKey,
    Outcome,
    RuleResultCache,
    ValueKeys,
    canonical_json,
)
from localkube.crd._schema import SchemaNode
from localkube.crd._values import json_equal
from localkube.errors import FieldError

REASONS = ("FieldValueInvalid", "FieldValueForbidden", "FieldValueRequired", "FieldValueDuplicate")
MAX_MESSAGE_EXPRESSION_CHARS = 5000
_FIELD_PATH_PART = re.compile(r"\.([A-Za-z_][A-Za-z0-9_-]*)|\['((?:[^'\\]|\\.)*)'\]")


@dataclass(frozen=True)
class CompiledRule:
    """One compiled ``x-kubernetes-validations`` entry.

    Attributes:
        rule: the CEL text (used in default messages).
        expression: the compiled rule.
        message: the static ``message`` (may be empty).
        message_expression: the compiled ``messageExpression`` or None.
        reason: the field error cause type for failures.
        field_path: ``fieldPath`` split into segments (``(name, is_map_key)``).
        optional_old_self: whether ``oldSelf`` is an optional.
        self_keys: the JSON property names of ``self`` that the rule and its
            messageExpression read, when they read only named fields; None when they use
            ``self`` as a whole (or ``self`` is an object root or embedded resource).
            Outcomes are memoized by these fields alone.
        old_keys: the same for ``oldSelf``.
    """

    rule: str
    expression: CheckedExpression
    message: str
    message_expression: CheckedExpression | None
    reason: str
    field_path: tuple[tuple[str, bool], ...]
    optional_old_self: bool
    self_keys: tuple[str, ...] | None = None
    old_keys: tuple[str, ...] | None = None

    @property
    def is_transition(self) -> bool:
        """Whether the rule (or its messageExpression) uses ``oldSelf``."""
        return self.expression.uses_old_self


def compile_rules(node: SchemaNode, *, correlatable: bool = True, root: bool = True) -> None:
    """Compile the rules of ``node`` and every node below it, in place.

    Args:
        node: a parsed schema tree.
        correlatable: whether old values can be matched to values at ``node``.
        root: whether ``node`` is the schema root (``self`` then has ``apiVersion``,
            ``kind`` and ``metadata``).

    Raises:
        UnsupportedSchema: a rule does not compile, uses something unsupported, has a bad
            ``reason``/``fieldPath``/``optionalOldSelf``, is a transition rule where old
            values cannot be correlated, or sits inside allOf/anyOf/oneOf/not.
    """
    node.rules = [
        _compile_rule(
            raw, node, f"{node.path}.x-kubernetes-validations[{index}]", correlatable, root
        )
        for index, raw in enumerate(node.raw_rules)
    ]
    for child in node.properties.values():
        compile_rules(child, correlatable=correlatable, root=False)
    if isinstance(node.additional, SchemaNode):
        compile_rules(node.additional, correlatable=correlatable, root=False)
    if node.items is not None:
        compile_rules(node.items, correlatable=correlatable and node.list_type == "map", root=False)
    for junctor in (*node.all_of, *node.any_of, *node.one_of, *([node.not_] if node.not_ else [])):
        _forbid_rules_in_junctor(junctor)
    children = [*node.properties.values()]
    if isinstance(node.additional, SchemaNode):
        children.append(node.additional)
    if node.items is not None:
        children.append(node.items)
    node.rules_below = bool(node.rules) or any(c.rules_below for c in children)
    node.transition_rules_below = any(r.is_transition for r in node.rules) or any(
        c.transition_rules_below for c in children
    )


def _forbid_rules_in_junctor(node: SchemaNode) -> None:
    if node.raw_rules:
        raise UnsupportedSchema(
            f"{node.path}.x-kubernetes-validations",
            "x-kubernetes-validations inside allOf, anyOf, oneOf or not are not supported",
        )
    for child in (*node.properties.values(), *([node.items] if node.items else [])):
        _forbid_rules_in_junctor(child)


def _compile_rule(
    raw: Any, node: SchemaNode, path: str, correlatable: bool, root: bool
) -> CompiledRule:
    if not isinstance(raw, dict):
        raise UnsupportedSchema(path, "must be an object with a rule")
    text = raw.get("rule")
    if not isinstance(text, str):
        raise UnsupportedSchema(f"{path}.rule", "Required value")
    optional = raw.get("optionalOldSelf") is True
    expression = compile_expression(
        text, f"{path}.rule", optional_old_self=optional, node=node, root=root
    )
    if optional and not expression.uses_old_self:
        raise UnsupportedSchema(
            f"{path}.optionalOldSelf", "Forbidden: may not be set if oldSelf is not used in rule"
        )
    if expression.uses_old_self and not correlatable:
        raise UnsupportedSchema(
            f"{path}.rule",
            "Forbidden: oldSelf cannot be used on the uncorrelatable portion of the schema"
            " (below a list that is not x-kubernetes-list-type: map)",
        )
    message = raw.get("message", "")
    if not isinstance(message, str) or "\n" in message or "\r" in message:
        raise UnsupportedSchema(
            f"{path}.message", "Invalid value: message must be a string without line breaks"
        )
    message_expression = None
    if raw.get("messageExpression"):
        source = raw["messageExpression"]
        if not isinstance(source, str):
            raise UnsupportedSchema(f"{path}.messageExpression", "must be a string")
        message_expression = compile_expression(
            source, f"{path}.messageExpression", optional_old_self=optional, node=node, root=root
        )
        if message_expression.uses_old_self and not expression.uses_old_self:
            raise UnsupportedSchema(
                f"{path}.messageExpression",
                "Forbidden: oldSelf may only be used in messageExpression of a transition rule",
            )
    reason = raw.get("reason") or "FieldValueInvalid"
    if reason not in REASONS:
        supported = ", ".join(f'"{r}"' for r in REASONS)
        raise UnsupportedSchema(
            f"{path}.reason", f'Unsupported value: "{reason}": supported values: {supported}'
        )
    field_path = _parse_field_path(raw.get("fieldPath") or "", node, f"{path}.fieldPath")
    return CompiledRule(
        rule=text,
        expression=expression,
        message=message.strip(),
        message_expression=message_expression,
        reason=reason,
        field_path=field_path,
        optional_old_self=optional,
        self_keys=_json_keys(expression.self_reads, message_expression, "self", node, root),
        old_keys=_json_keys(expression.old_self_reads, message_expression, "old", node, root),
    )


def _json_keys(
    reads: frozenset[str] | None,
    message_expression: CheckedExpression | None,
    which: str,
    node: SchemaNode,
    root: bool,
) -> tuple[str, ...] | None:
    """The JSON property names behind the CEL field names a rule reads (see CompiledRule)."""
    if message_expression is not None:
        extra = (
            message_expression.self_reads if which == "self" else message_expression.old_self_reads
        )
        reads = None if reads is None or extra is None else reads | extra
    if reads is None or root or node.embedded:
        return None
    if node.properties:  # CEL sees declared properties under their escaped names
        return tuple(k for k in node.properties if escape_property(k) in reads)
    return tuple(sorted(reads))  # maps and untyped objects keep their keys as they are


def _parse_field_path(text: str, node: SchemaNode, path: str) -> tuple[tuple[str, bool], ...]:
    """Split a rule's ``fieldPath`` (``.a.b``, ``['x.y']``) and check it names a field."""
    if not text:
        return ()
    segments: list[tuple[str, bool]] = []
    position = 0
    current: SchemaNode | None = node
    while position < len(text):
        match = _FIELD_PATH_PART.match(text, position)
        if match is None or current is None:
            raise UnsupportedSchema(
                path, f"Invalid value: {fe.go_quote(text)}: fieldPath must be a valid path"
            )
        name = (
            match.group(1)
            if match.group(1) is not None
            else re.sub(r"\\(.)", r"\1", match.group(2))
        )
        position = match.end()
        if name in current.properties:
            segments.append((name, False))
            current = current.properties[name]
        elif isinstance(current.additional, SchemaNode):
            segments.append((name, True))
            current = current.additional
        else:
            raise UnsupportedSchema(
                path,
                f"Invalid value: {fe.go_quote(text)}: fieldPath must be a valid path: does not refer to a valid field",
            )
    return tuple(segments)


def child_path(path: str, name: str) -> str:
    """``field.Path.Child``: ``spec`` + ``x`` = ``spec.x`` (the root path is empty)."""
    return f"{path}.{name}" if path else name


def evaluate_rules(
    new: Any,
    old: Any,
    has_old: bool,
    node: SchemaNode,
    *,
    root: bool = True,
    cache: RuleResultCache | None = None,
) -> list[FieldError]:
    """Evaluate every compiled rule below ``node`` on ``new`` (and ``old`` for transitions).

    Args:
        new: the pruned, defaulted, schema-valid object.
        old: the stored object on update (ignored when ``has_old`` is False).
        has_old: whether this is an update with an old object.
        node: the root schema node with compiled rules.
        root: whether ``new`` is the object root.
        cache: results of earlier evaluations of the same rules (see
            :class:`RuleResultCache`), or None to evaluate every rule.

    Returns:
        Field errors for failing rules and rule evaluation errors, in schema order.
    """
    errors: list[FieldError] = []
    _Walker(errors, cache).walk(new, old, has_old, node, "", root=root)
    return errors


class _Walker:
    """One admission's rule walk; holds the errors and the CEL conversion caches."""

    def __init__(self, errors: list[FieldError], cache: RuleResultCache | None) -> None:
        self.errors = errors
        self.cache = cache
        self.memo: Memo = {}
        self.old_memo: Memo = {}

    def walk(
        self,
        value: Any,
        old: Any,
        has_old: bool,
        node: SchemaNode,
        path: str,
        *,
        root: bool = False,
    ) -> None:
        _walk(self, value, old, has_old, node, path, root=root)


def same_value(value: Any, old: Any) -> bool:
    """Whether ``value`` equals ``old`` as JSON (the ratcheting test; booleans are not numbers)."""
    return value is old or (value == old and json_equal(value, old))


def _walk(
    walker: _Walker,
    value: Any,
    old: Any,
    has_old: bool,
    node: SchemaNode,
    path: str,
    *,
    root: bool = False,
    unchanged: bool = False,
) -> None:
    if not node.rules_below:
        return
    if has_old and not unchanged and not root:
        unchanged = same_value(value, old)
    if unchanged and not node.transition_rules_below:
        return
    if node.rules:
        _run_rules(walker, value, old, has_old, node, path, root=root, unchanged=unchanged)
    if isinstance(value, dict):
        old_map: dict[str, Any] = old if has_old and isinstance(old, dict) else {}
        for key, child in node.properties.items():
            if (
                child.rules_below
                and key in value
                and not (root and key in ("apiVersion", "kind", "metadata"))
            ):
                present = key in old_map
                child_args = (value[key], old_map.get(key), present, child, child_path(path, key))
                if root and walker.cache is not None:
                    _walk_memoized(walker, walker.cache, *child_args)
                else:
                    _walk(walker, *child_args, unchanged=unchanged)
        if isinstance(node.additional, SchemaNode):
            for key, item in value.items():
                if key in node.properties:
                    continue
                present = key in old_map
                _walk(
                    walker,
                    item,
                    old_map.get(key),
                    present,
                    node.additional,
                    f"{path}[{key}]",
                    unchanged=unchanged,
                )
    elif isinstance(value, list) and node.items is not None:
        old_items = _correlate(value, old, has_old, node)
        for index, item in enumerate(value):
            present, old_item = old_items[index]
            _walk(
                walker, item, old_item, present, node.items, f"{path}[{index}]", unchanged=unchanged
            )


def _walk_memoized(
    walker: _Walker,
    cache: RuleResultCache,
    value: Any,
    old: Any,
    has_old: bool,
    node: SchemaNode,
    path: str,
) -> None:
    """:func:`_walk` of a subtree of the root, answered from the cache when seen before.

    Every error under the subtree is a pure function of the subtree's value and old value
    (and the path, fixed for a child of the root), so the whole walk can be reused.
    """
    if not cache.subtree_worth_trying(id(node)):
        _walk(walker, value, old, has_old, node, path)
        return
    new_text = canonical_json(value)
    if new_text is None:
        old_text: str | None = None
    elif not has_old:
        old_text = ABSENT
    else:  # a status write keeps the stored spec object itself: encode it once
        old_text = new_text if old is value else canonical_json(old)
    if new_text is None or old_text is None:
        _walk(walker, value, old, has_old, node, path)
        return
    key = (id(node), new_text, old_text)
    known = cache.subtree_get(key)
    if known is not None:
        walker.errors.extend(FieldError(*error) for error in known)
        return
    start = len(walker.errors)
    _walk(walker, value, old, has_old, node, path)
    cache.subtree_put(key, tuple((e.field, e.reason, e.message) for e in walker.errors[start:]))


def _correlate(
    value: list[Any], old: Any, has_old: bool, node: SchemaNode
) -> list[tuple[bool, Any]]:
    missing = [(False, None)] * len(value)
    if not has_old or node.list_type != "map" or not isinstance(old, list):
        return missing
    keys = node.list_map_keys
    by_key: dict[str, Any] = {}
    for item in old:
        if isinstance(item, dict):
            by_key.setdefault(repr([item.get(k) for k in keys]), item)
    result: list[tuple[bool, Any]] = []
    for item in value:
        if isinstance(item, dict):
            key = repr([item.get(k) for k in keys])
            result.append((key in by_key, by_key.get(key)))
        else:
            result.append((False, None))
    return result


def _run_rules(
    walker: _Walker,
    value: Any,
    old: Any,
    has_old: bool,
    node: SchemaNode,
    path: str,
    *,
    root: bool,
    unchanged: bool,
) -> None:
    cache = walker.cache
    self_keys = ValueKeys(value)
    old_keys = ValueKeys(old)
    self_values: dict[tuple[str, ...] | None, Any] = {}
    old_values: dict[tuple[str, ...] | None, Any] = {}
    for rule in node.rules:
        if rule.is_transition and not has_old and not rule.optional_old_self:
            continue
        if unchanged and not rule.is_transition:
            continue  # ratcheted: an unchanged value is not re-validated
        key: CacheKey | None = None
        if cache is not None:
            self_key = self_keys.key(rule.self_keys)
            old_key: Hashable = ""
            if rule.is_transition:
                old_key = old_keys.key(rule.old_keys) if has_old else ABSENT
            if self_key is not None and old_key is not None:
                key = (id(rule), self_key, old_key)
                if key in cache:
                    _record(walker, rule, path, cache.get(key))
                    continue
        if rule.self_keys not in self_values:
            self_values[rule.self_keys] = _cel_value(
                value, node, rule.self_keys, root=root, memo=walker.memo
            )
        activation: dict[str, Any] = {"self": self_values[rule.self_keys]}
        if rule.is_transition:
            if rule.old_keys not in old_values:
                old_values[rule.old_keys] = (
                    _cel_value(old, node, rule.old_keys, root=root, memo=walker.old_memo)
                    if has_old
                    else None
                )
            old_value = old_values[rule.old_keys]
            activation["oldSelf"] = (
                OptionalValue(old_value, present=has_old) if rule.optional_old_self else old_value
            )
        outcome = _outcome(rule, activation, node)
        if cache is not None and key is not None:
            cache.put(key, outcome)
        _record(walker, rule, path, outcome)


def _cel_value(
    value: Any, node: SchemaNode, keys: tuple[str, ...] | None, *, root: bool, memo: Memo
) -> Any:
    """``self`` for a rule: only the properties it reads when it reads named ones."""
    if keys is not None and isinstance(value, dict):
        return to_cel_fields(value, node, keys, memo=memo)
    return to_cel(value, node, root=root, memo=memo)


def _record(walker: _Walker, rule: CompiledRule, path: str, outcome: Outcome) -> None:
    if outcome is not None:
        reason, message = outcome
        walker.errors.append(FieldError(_rule_field(rule, path), reason, message))


def _run(expression: CheckedExpression, activation: dict[str, Any]) -> Any:
    try:
        result = expression.program.evaluate(activation)
    except CELEvalError as exc:
        return exc
    except Exception as exc:  # cel-python raises plain Python errors for some bad operands
        return CELEvalError(f"no such overload: {exc}", TypeError, exc.args)
    return result


def _error_text(error: CELEvalError) -> str:
    kind = error.args[1] if len(error.args) > 1 else None
    detail = error.args[2] if len(error.args) > 2 else None
    if kind is KeyError:
        key = (
            detail[0]
            if isinstance(detail, tuple) and detail
            else str(error.args[0]).rsplit(":", 1)[-1].strip(" '")
        )
        return f"no such key: {key}"
    if kind is ZeroDivisionError:
        return "division by zero"
    if kind is IndexError:
        return "index out of bounds"
    if kind is ValueError and "overflow" in str(error.args[0]):
        return "integer overflow"
    if kind is TypeError or "overload" in str(error.args[0] if error.args else ""):
        return "no such overload"
    return str(error.args[0]) if error.args else "evaluation error"


def _outcome(rule: CompiledRule, activation: dict[str, Any], node: SchemaNode) -> Outcome:
    result = _run(rule.expression, activation)
    type_name = node.type or ""
    if isinstance(result, CELEvalError):
        text = _error_text(result)
        if text.startswith("no such overload"):
            detail = (
                f"'{text}': call arguments did not match a supported operator, function or macro"
                f" signature for rule: {rule.rule.strip()}"
            )
        else:
            detail = f"{text} evaluating rule: {rule.rule.strip()}"
        return _as_outcome(fe.invalid("", type_name, detail))
    if not isinstance(result, celtypes.BoolType | bool):
        detail = f"rule did not evaluate to a bool evaluating rule: {rule.rule.strip()}"
        return _as_outcome(fe.invalid("", type_name, detail))
    if bool(result):
        return None
    detail = _message(rule, activation)
    if rule.reason == "FieldValueForbidden":
        return _as_outcome(fe.forbidden("", detail))
    if rule.reason == "FieldValueRequired":
        return _as_outcome(fe.required("", detail))
    if rule.reason == "FieldValueDuplicate":
        return _as_outcome(fe.duplicate("", type_name))
    return _as_outcome(fe.invalid("", type_name, detail))


def _as_outcome(error: FieldError) -> Outcome:
    return (error.reason, error.message)


def _rule_field(rule: CompiledRule, path: str) -> str:
    target = path
    for name, is_key in rule.field_path:
        target = f"{target}[{name}]" if is_key else child_path(target, name)
    return target or fe.ROOT_FIELD


def _message(rule: CompiledRule, activation: dict[str, Any]) -> str:
    if rule.message_expression is not None:
        produced = _run(rule.message_expression, activation)
        if (
            isinstance(produced, str)
            and produced.strip()
            and "\n" not in produced
            and len(produced) <= MAX_MESSAGE_EXPRESSION_CHARS
        ):
            return str(produced).strip()
    if rule.message:
        return rule.message
    return f"failed rule: {rule.rule.strip()}"
