"""Compile ``x-kubernetes-validations`` CEL expressions once, rejecting what we cannot run.

cel-python parses any CEL text but only fails on an unknown function when it is *called*,
so a rule using, say, ``quantity()`` would silently evaluate to an error at admission
time. Kubernetes type-checks rules when the CRD is created; we do the part of that check
that keeps evaluation faithful: every identifier, function and macro in the parsed tree
must be one we evaluate exactly as Kubernetes does, otherwise the CRD is rejected with
:class:`UnsupportedSchema` naming the construct.

Supported: ``self``, ``oldSelf``, literals, operators, ``has()``, the macros ``all``,
``exists``, ``exists_one``, ``map`` (two arguments), ``filter``, the standard functions
(``size``, ``contains``, ``startsWith``, ``endsWith``, ``matches``, ``type``, ``int``,
``uint``, ``double``, ``string``, ``bytes``, ``bool``, ``dyn``, ``duration``,
``timestamp``, the timestamp/duration accessors) and the Kubernetes library functions in
:mod:`localkube.crd._cel_library`.

Rejected (:data:`UNSUPPORTED_FUNCTIONS` lists the names called out with their library):
the Kubernetes ``quantity``, ``url``, ``ip``/``cidr``, ``format``, ``authz`` and ``sets``
libraries, CEL optionals other than on ``oldSelf`` (``optional.of``, ``?.``, ``[?]``),
the three-argument ``map`` macro, message construction (``Type{...}``), cel-python's
non-standard ``reduce`` macro, and any other unknown function or identifier.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import celpy
import lark
from celpy.celparser import CELParseError

from localkube.crd._cel_library import FUNCTIONS, OPTIONAL_FUNCTIONS
from localkube.crd._cel_reads import field_reads
from localkube.crd._cel_values import ROOT_KEYS, escape_property
from localkube.crd._fielderrors import UnsupportedSchema
from localkube.crd._schema import SchemaNode

Scope = dict[str, SchemaNode | None]
_STRING_NODE = SchemaNode(path="(string)", type="string")
_METADATA_NODE = SchemaNode(
    path="metadata",
    type="object",
    properties={"name": _STRING_NODE, "generateName": _STRING_NODE},
)
"""What CEL sees of ``metadata`` at the root and in embedded resources."""

MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})
STANDARD_FUNCTIONS = frozenset(
    {
        "size",
        "contains",
        "startsWith",
        "endsWith",
        "matches",
        "type",
        "int",
        "uint",
        "double",
        "string",
        "bytes",
        "bool",
        "dyn",
        "duration",
        "timestamp",
        "min",
        "getDate",
        "getDayOfMonth",
        "getDayOfWeek",
        "getDayOfYear",
        "getFullYear",
        "getMonth",
        "getHours",
        "getMilliseconds",
        "getMinutes",
        "getSeconds",
    }
)
TYPE_NAMES = frozenset(
    {"bool", "bytes", "double", "int", "uint", "string", "list", "map", "null_type", "type"}
)
UNSUPPORTED_FUNCTIONS: dict[str, str] = {
    "quantity": "Kubernetes quantity library",
    "isQuantity": "Kubernetes quantity library",
    "url": "Kubernetes URL library",
    "isURL": "Kubernetes URL library",
    "ip": "Kubernetes IP library",
    "isIP": "Kubernetes IP library",
    "cidr": "Kubernetes CIDR library",
    "isCIDR": "Kubernetes CIDR library",
    "format": "Kubernetes format library",
    "authorizer": "Kubernetes authz library",
    "reduce": "cel-python extension, not Kubernetes CEL",
    "quote": "cel-go strings extension (not implemented)",
}
UNSUPPORTED_NAMESPACES = frozenset({"sets", "optional", "math", "strings", "base64", "lists"})


class _ReusingRunner(celpy.InterpretedRunner):
    """cel-python's tree interpreter, building its base activation once per program.

    ``InterpretedRunner`` rebuilds the activation (annotations, functions) on every
    evaluation; the evaluator only ever clones it, so one per program is enough and saves
    a large share of each rule's cost. The tree interpreter is used rather than the
    transpiling ``CompiledRunner``, which is faster but mis-evaluates ``has()`` in
    cel-python 0.5 (it yields a Python bool, so ``!has(self.a)`` fails with "no such
    overload") and would reject valid objects.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._base_activation = super().new_activation()

    def new_activation(self) -> Any:
        return self._base_activation


ENVIRONMENT = celpy.Environment(runner_class=_ReusingRunner)
ENVIRONMENT.annotations = {}
"""One shared cel-python environment: parsing is stateless, so sharing is safe.

The protobuf well-known type names cel-python pre-declares (``google.protobuf.*``) are
dropped: Kubernetes CEL does not declare them, and resolving them costs time per rule.
"""


@dataclass(frozen=True)
class CheckedExpression:
    """A parsed CEL expression that passed the support check.

    Attributes:
        program: the cel-python runner, evaluated with ``{"self": ..., "oldSelf": ...}``.
        uses_old_self: whether the text refers to ``oldSelf`` (a transition rule).
        self_reads: the CEL names of the fields of ``self`` the expression selects, or
            None when it uses ``self`` as a whole (see :mod:`localkube.crd._cel_reads`).
        old_self_reads: the same for ``oldSelf``.
    """

    program: celpy.Runner
    uses_old_self: bool
    self_reads: frozenset[str] | None = None
    old_self_reads: frozenset[str] | None = None


def _args(node: lark.Tree[Any]) -> list[lark.Tree[Any]]:
    for child in node.children:
        if isinstance(child, lark.Tree) and child.data == "exprlist":
            return [c for c in child.children if isinstance(c, lark.Tree)]
    return []


def _name(node: lark.Tree[Any], index: int) -> str:
    token = node.children[index]
    return str(token.value) if isinstance(token, lark.Token) else ""


def _plain_ident(expr: lark.Tree[Any]) -> str | None:
    """Return the identifier if ``expr`` is exactly a bare identifier, else None."""
    node = expr
    while isinstance(node, lark.Tree) and node.data != "ident":
        subtrees = [c for c in node.children if isinstance(c, lark.Tree)]
        tokens = [c for c in node.children if isinstance(c, lark.Token)]
        if len(subtrees) != 1 or tokens:
            return None
        node = subtrees[0]
    return _name(node, 0) if isinstance(node, lark.Tree) else None


class _Checker:
    def __init__(self, *, optional_old_self: bool, node: SchemaNode | None, root: bool) -> None:
        self.optional_old_self = optional_old_self
        self.uses_old_self = False
        self.node = node
        self.root = root

    def fail(self, detail: str) -> UnsupportedSchema:
        return UnsupportedSchema("", detail)

    def resolve(self, expr: lark.Tree[Any], scope: Scope) -> SchemaNode | None:
        """The schema node an expression denotes, when it is a plain selection chain."""
        node: lark.Tree[Any] = expr
        while node.data not in ("ident", "member_dot"):
            subtrees = list(self.subtrees(node))
            tokens = [c for c in node.children if isinstance(c, lark.Token)]
            if len(subtrees) != 1 or tokens:
                return None
            node = subtrees[0]
        if node.data == "ident":
            name = _name(node, 0)
            if name == "self" or (name == "oldSelf" and not self.optional_old_self):
                return self.node
            return scope.get(name)
        base_tree = node.children[0]
        if not isinstance(base_tree, lark.Tree):
            return None
        base = self.resolve(base_tree, scope)
        is_root = self.root and self.resolves_to_self(base_tree)
        return self.select(base, _name(node, 1), is_root=is_root)

    def resolves_to_self(self, expr: lark.Tree[Any]) -> bool:
        ident = _plain_ident(expr)
        return ident == "self" or (ident == "oldSelf" and not self.optional_old_self)

    def select(self, base: SchemaNode | None, name: str, *, is_root: bool) -> SchemaNode | None:
        """Check ``base.name`` against the schema as Kubernetes' type checker does."""
        if base is None:
            return None
        if base.type == "object" and base.properties:
            escaped = {escape_property(k): child for k, child in base.properties.items()}
            if is_root or base.embedded:
                if name in ROOT_KEYS:
                    return _STRING_NODE
                if name == "metadata":
                    return _METADATA_NODE
            if name in escaped:
                return escaped[name]
            hint = ""
            for key in base.properties:
                if key == name and escape_property(key) != key:
                    hint = f" (the property '{key}' is spelled '{escape_property(key)}' in CEL)"
            raise self.fail(f"undefined field '{name}'{hint}")
        if isinstance(base.additional, SchemaNode):
            return base.additional
        if base.type in ("string", "integer", "number", "boolean", "array"):
            raise self.fail(f"type '{base.type}' does not support field selection")
        return None

    def walk(self, node: lark.Tree[Any], scope: Scope) -> None:
        kind = node.data
        if kind == "ident":
            self.check_ident(_name(node, 0), scope)
            return
        if kind == "member_object":
            raise self.fail("message construction (Type{...}) is not supported")
        if kind in ("dot_ident", "dot_ident_arg"):
            raise self.fail(f"leading-dot name '.{_name(node, 0)}' is not supported")
        if kind == "ident_arg":
            self.check_global_call(node, scope)
            return
        if kind == "member_dot_arg":
            self.check_method_call(node, scope)
            return
        if kind == "member_dot":
            target = node.children[0]
            if isinstance(target, lark.Tree) and _plain_ident(target) in UNSUPPORTED_NAMESPACES:
                raise self.fail(f"'{_plain_ident(target)}.{_name(node, 1)}' is not supported")
            self.resolve(node, scope)
        for child in self.subtrees(node):
            self.walk(child, scope)

    @staticmethod
    def subtrees(node: lark.Tree[Any]) -> Iterator[lark.Tree[Any]]:
        return (c for c in node.children if isinstance(c, lark.Tree))

    def check_ident(self, name: str, scope: Scope) -> None:
        if name == "oldSelf":
            self.uses_old_self = True
            return
        if name == "self" or name in scope or name in TYPE_NAMES:
            return
        if name in UNSUPPORTED_NAMESPACES:
            raise self.fail(f"the CEL library '{name}' is not supported")
        raise self.fail(f"undeclared reference to '{name}'")

    def check_global_call(self, node: lark.Tree[Any], scope: Scope) -> None:
        name = _name(node, 0)
        args = _args(node)
        if name == "has":
            if len(args) != 1 or not self.is_selection(args[0]):
                raise self.fail("has() requires exactly one field selection argument")
        elif name in UNSUPPORTED_FUNCTIONS:
            raise self.fail(f"function '{name}' ({UNSUPPORTED_FUNCTIONS[name]}) is not supported")
        elif name not in STANDARD_FUNCTIONS and name not in FUNCTIONS:
            raise self.fail(f"undeclared reference to function '{name}'")
        for arg in args:
            self.walk(arg, scope)

    def is_selection(self, expr: lark.Tree[Any]) -> bool:
        node: lark.Tree[Any] | lark.Token = expr
        while isinstance(node, lark.Tree) and node.data != "member_dot":
            subtrees = list(self.subtrees(node))
            if len(subtrees) != 1:
                return False
            node = subtrees[0]
        return isinstance(node, lark.Tree)

    def check_method_call(self, node: lark.Tree[Any], scope: Scope) -> None:
        target = node.children[0]
        name = _name(node, 1)
        args = _args(node)
        if isinstance(target, lark.Tree):
            namespace = _plain_ident(target)
            if namespace in UNSUPPORTED_NAMESPACES:
                raise self.fail(f"function '{namespace}.{name}' is not supported")
        if name in MACROS:
            expected = 2
            if len(args) != expected:
                raise self.fail(
                    f"the '{name}' macro with {len(args)} arguments is not supported"
                    " (only the two-argument form)"
                )
            variable = _plain_ident(args[0])
            if variable is None:
                raise self.fail(f"the first argument of '{name}' must be a simple identifier")
            element: SchemaNode | None = None
            if isinstance(target, lark.Tree):
                self.walk(target, scope)
                collection = self.resolve(target, scope)
                if collection is not None and collection.type == "array":
                    element = collection.items
            self.walk(args[1], {**scope, variable: element})
            return
        if isinstance(target, lark.Tree):
            self.walk(target, scope)
        if name in UNSUPPORTED_FUNCTIONS:
            raise self.fail(f"function '{name}' ({UNSUPPORTED_FUNCTIONS[name]}) is not supported")
        for arg in args:
            self.walk(arg, scope)
        if name in OPTIONAL_FUNCTIONS and not self.optional_old_self:
            raise self.fail(
                f"function '{name}' needs a CEL optional; only oldSelf with"
                " optionalOldSelf: true is one"
            )
        if name not in STANDARD_FUNCTIONS and name not in FUNCTIONS:
            raise self.fail(f"undeclared reference to function '{name}'")


def compile_expression(
    text: str,
    path: str,
    *,
    optional_old_self: bool = False,
    node: SchemaNode | None = None,
    root: bool = False,
) -> CheckedExpression:
    """Parse and check one CEL expression, returning a reusable program.

    Args:
        text: the CEL source (a rule or a messageExpression).
        path: schema path of the expression, used in error messages.
        optional_old_self: whether ``oldSelf`` is a CEL optional (``optionalOldSelf: true``).
        node: the schema node ``self`` is bound to: field selections on ``self`` (and on
            macro variables over its lists) are checked against its declared properties,
            with Kubernetes' escaped names, like Kubernetes' type checker does.
        root: whether ``node`` is the object root (``apiVersion``, ``kind``, ``metadata``).

    Raises:
        UnsupportedSchema: the text does not parse, or uses an identifier, function or
            macro that is unknown or not supported (see the module docstring).
    """
    if not text.strip():
        raise UnsupportedSchema(path, "Required value: rule must not be empty")
    try:
        tree = ENVIRONMENT.compile(text)
    except CELParseError as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else "syntax error"
        raise UnsupportedSchema(path, f"compilation failed: {first_line}") from exc
    except Exception as exc:  # lark raises its own error types for odd input
        raise UnsupportedSchema(path, f"compilation failed: {exc}") from exc
    checker = _Checker(optional_old_self=optional_old_self, node=node, root=root)
    try:
        checker.walk(tree, {})
    except UnsupportedSchema as exc:
        raise UnsupportedSchema(path, f"compilation failed: {exc.detail}") from None
    program = ENVIRONMENT.program(tree, functions=dict(FUNCTIONS))
    return CheckedExpression(
        program=program,
        uses_old_self=checker.uses_old_self,
        self_reads=field_reads(tree, "self"),
        old_self_reads=field_reads(tree, "oldSelf"),
    )
