"""The structural schema tree: one CRD version's ``openAPIV3Schema`` parsed once.

Kubernetes only serves CRDs whose schemas are *structural* (apiextensions.k8s.io/v1):
every node states its ``type`` (unless it is ``x-kubernetes-int-or-string`` or
``x-kubernetes-preserve-unknown-fields``), ``properties`` and ``additionalProperties``
exclude each other, ``uniqueItems: true`` is forbidden, and the value-validation junctors
(``allOf``, ``anyOf``, ``oneOf``, ``not``) carry no ``type``, ``default``,
``additionalProperties``, ``nullable`` or ``description``. :func:`parse_schema` checks
those rules (collecting every problem, see :func:`structural_errors`) and builds a tree of
:class:`SchemaNode` so admission never looks at raw dictionaries.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import re2  # type: ignore[import-untyped]

from localkube.crd._fielderrors import UnsupportedSchema

TYPES = frozenset({"object", "array", "string", "integer", "number", "boolean"})
KNOWN_KEYWORDS = frozenset(
    {
        "type",
        "format",
        "title",
        "description",
        "default",
        "example",
        "externalDocs",
        "properties",
        "required",
        "items",
        "additionalProperties",
        "enum",
        "pattern",
        "maxLength",
        "minLength",
        "maxItems",
        "minItems",
        "uniqueItems",
        "maxProperties",
        "minProperties",
        "maximum",
        "minimum",
        "exclusiveMaximum",
        "exclusiveMinimum",
        "multipleOf",
        "nullable",
        "allOf",
        "anyOf",
        "oneOf",
        "not",
        "x-kubernetes-int-or-string",
        "x-kubernetes-preserve-unknown-fields",
        "x-kubernetes-embedded-resource",
        "x-kubernetes-list-type",
        "x-kubernetes-list-map-keys",
        "x-kubernetes-map-type",
        "x-kubernetes-validations",
    }
)
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # a bad pattern is reported to the client, not logged by RE2

JUNCTOR_FORBIDDEN = ("type", "default", "additionalProperties", "nullable", "description")


@dataclass
class SchemaNode:
    """One node of a structural schema, with every keyword localkube applies.

    Attributes mirror the OpenAPI keywords (``min_length`` is ``minLength`` and so on);
    ``additional`` is a node for ``additionalProperties: {schema}``, ``True`` for
    ``additionalProperties: true`` and ``None`` when unset or ``false``. ``rules`` holds
    the compiled ``x-kubernetes-validations`` and ``rules_below`` tells whether this node or
    any node under it has one (``transition_rules_below``: one that uses ``oldSelf``; all
    filled in by the validator). ``enum_strings`` are the
    string members of ``enum``; ``pattern_results`` and ``format_results`` memoize ``pattern``
    and ``format`` checks; ``defaulted_properties`` lists the properties with a ``default``
    (filled in on first use). ``defaulting_below`` tells whether defaulting has anything
    to do at or under this node besides dropping nulls: a ``default`` there, or an embedded
    resource (whose envelope pruning copies as it is). ``path`` is the node's location
    inside ``openAPIV3Schema`` for CRD-time messages. ``plain_string`` marks a ``string``
    node without junctors or int-or-string (a string value then needs only the string
    keywords and ``enum``), and ``string_checks`` one with any of ``maxLength``,
    ``minLength``, ``pattern`` or ``format``; both are filled in by the parser (a node
    built otherwise keeps False and is validated the general way).
    """

    path: str
    type: str | None = None
    properties: dict[str, SchemaNode] = field(default_factory=dict)
    required: tuple[str, ...] = ()
    items: SchemaNode | None = None
    additional: SchemaNode | bool | None = None
    enum: list[Any] | None = None
    enum_strings: frozenset[str] = frozenset()
    pattern: str | None = None
    pattern_re: Any = None
    pattern_results: dict[str, bool] = field(default_factory=dict)
    format_results: dict[str, bool] = field(default_factory=dict)
    defaulted_properties: tuple[tuple[str, SchemaNode], ...] | None = None
    format: str | None = None
    min_length: int | None = None
    max_length: int | None = None
    min_items: int | None = None
    max_items: int | None = None
    min_properties: int | None = None
    max_properties: int | None = None
    minimum: float | int | None = None
    maximum: float | int | None = None
    exclusive_minimum: bool = False
    exclusive_maximum: bool = False
    multiple_of: float | int | None = None
    nullable: bool = False
    has_default: bool = False
    default: Any = None
    all_of: list[SchemaNode] = field(default_factory=list)
    any_of: list[SchemaNode] = field(default_factory=list)
    one_of: list[SchemaNode] = field(default_factory=list)
    not_: SchemaNode | None = None
    int_or_string: bool = False
    preserve_unknown: bool = False
    embedded: bool = False
    list_type: str | None = None
    list_map_keys: tuple[str, ...] = ()
    map_type: str | None = None
    raw_rules: list[Any] = field(default_factory=list)
    rules: list[Any] = field(default_factory=list)
    rules_below: bool = False
    transition_rules_below: bool = False
    defaulting_below: bool = False
    plain_string: bool = False
    string_checks: bool = False

    def type_names(self) -> str:
        """The type name(s) as kube-openapi prints them in type errors."""
        if self.int_or_string:
            return "integer,string"
        return self.type or ""


class _Parser:
    def __init__(self) -> None:
        self.problems: list[str] = []

    def problem(self, path: str, detail: str) -> None:
        self.problems.append(f"{path}: {detail}")

    def parse(
        self, raw: Any, path: str, *, junctor: bool = False, root: bool = False
    ) -> SchemaNode:
        node = SchemaNode(path=path)
        if not isinstance(raw, dict):
            self.problem(path, "must be an object (a JSON schema)")
            return node
        for key in raw:
            if key not in KNOWN_KEYWORDS:
                self.problem(
                    f"{path}.{key}", "Forbidden: keyword is not supported in structural schemas"
                )
        if junctor:
            for key in JUNCTOR_FORBIDDEN:
                if key in raw:
                    self.problem(
                        f"{path}.{key}",
                        "Forbidden: must not be used inside allOf, anyOf, oneOf or not",
                    )
        node.int_or_string = raw.get("x-kubernetes-int-or-string") is True
        preserve = raw.get("x-kubernetes-preserve-unknown-fields")
        if preserve is False:
            self.problem(
                f"{path}.x-kubernetes-preserve-unknown-fields",
                "Invalid value: false: must be true or undefined",
            )
        node.preserve_unknown = preserve is True
        node.embedded = raw.get("x-kubernetes-embedded-resource") is True
        self.parse_type(raw, node, junctor=junctor)
        self.parse_children(raw, node, junctor=junctor)
        self.parse_value_keywords(raw, node)
        self.parse_extensions(raw, node)
        if "default" in raw:
            if root:
                self.problem(f"{path}.default", "Forbidden: must not be set at the root")
            node.has_default = True
            node.default = copy.deepcopy(raw["default"])
        rules = raw.get("x-kubernetes-validations")
        if rules is not None:
            if not isinstance(rules, list):
                self.problem(f"{path}.x-kubernetes-validations", "must be a list of rules")
            else:
                node.raw_rules = list(rules)
        node.plain_string = (
            node.type == "string"
            and not node.int_or_string
            and not (node.all_of or node.any_of or node.one_of or node.not_ is not None)
        )
        node.string_checks = (
            node.max_length is not None
            or node.min_length is not None
            or node.pattern_re is not None
            or node.format is not None
        )
        additional = node.additional if isinstance(node.additional, SchemaNode) else None
        node.defaulting_below = (
            node.has_default
            or node.embedded
            or any(child.defaulting_below for child in node.properties.values())
            or (additional is not None and additional.defaulting_below)
            or (node.items is not None and node.items.defaulting_below)
        )
        return node

    def parse_type(self, raw: dict[str, Any], node: SchemaNode, *, junctor: bool) -> None:
        kind = raw.get("type")
        if kind is None or kind == "":
            if not junctor and not node.int_or_string and not node.preserve_unknown:
                self.problem(
                    f"{node.path}.type", "Required value: must not be empty for specified fields"
                )
            return
        if not isinstance(kind, str) or kind not in TYPES:
            self.problem(
                f"{node.path}.type",
                f"Unsupported value: {kind!r}: supported values: {', '.join(sorted(TYPES))}",
            )
            return
        if node.int_or_string:
            self.problem(
                f"{node.path}.type", "Forbidden: must be empty with x-kubernetes-int-or-string"
            )
            return
        node.type = kind

    def parse_children(self, raw: dict[str, Any], node: SchemaNode, *, junctor: bool) -> None:
        path = node.path
        props = raw.get("properties")
        if props is not None:
            if not isinstance(props, dict):
                self.problem(f"{path}.properties", "must be an object")
            else:
                for name, sub in props.items():
                    node.properties[name] = self.parse(
                        sub, f"{path}.properties[{name}]", junctor=junctor
                    )
        required = raw.get("required")
        if required is not None:
            if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
                self.problem(f"{path}.required", "must be a list of strings")
            else:
                node.required = tuple(required)
        items = raw.get("items")
        if items is not None:
            if isinstance(items, list):
                self.problem(
                    f"{path}.items", "Forbidden: items must be a schema object, not an array"
                )
            else:
                node.items = self.parse(items, f"{path}.items", junctor=junctor)
        elif node.type == "array" and not junctor:
            self.problem(f"{path}.items", "Required value: must be specified for arrays")
        additional = raw.get("additionalProperties")
        if additional is not None:
            if props:
                self.problem(
                    f"{path}.additionalProperties",
                    "Forbidden: additionalProperties and properties are mutual exclusive",
                )
            if isinstance(additional, bool):
                node.additional = True if additional else None
            else:
                node.additional = self.parse(
                    additional, f"{path}.additionalProperties", junctor=junctor
                )
        for keyword, target in (
            ("allOf", node.all_of),
            ("anyOf", node.any_of),
            ("oneOf", node.one_of),
        ):
            subs = raw.get(keyword)
            if subs is None:
                continue
            if not isinstance(subs, list):
                self.problem(f"{path}.{keyword}", "must be a list of schemas")
                continue
            for index, sub in enumerate(subs):
                target.append(self.parse(sub, f"{path}.{keyword}[{index}]", junctor=True))
        if "not" in raw:
            node.not_ = self.parse(raw["not"], f"{path}.not", junctor=True)

    def parse_value_keywords(self, raw: dict[str, Any], node: SchemaNode) -> None:
        path = node.path
        if raw.get("uniqueItems") is True:
            self.problem(
                f"{path}.uniqueItems",
                "Forbidden: uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
            )
        if "enum" in raw:
            if not isinstance(raw["enum"], list):
                self.problem(f"{path}.enum", "must be a list")
            else:
                node.enum = list(raw["enum"])
                node.enum_strings = frozenset(e for e in node.enum if isinstance(e, str))
        if "pattern" in raw:
            pattern = raw["pattern"]
            if not isinstance(pattern, str):
                self.problem(f"{path}.pattern", "must be a string")
            else:
                try:
                    node.pattern_re = re2.compile(pattern, _RE2_OPTIONS)
                    node.pattern = pattern
                except re2.error as exc:
                    reason = exc.args[0] if exc.args else exc
                    if isinstance(reason, bytes):
                        reason = reason.decode(errors="replace")
                    self.problem(
                        f"{path}.pattern",
                        f"Invalid value: {pattern!r}: must be a valid regular expression: {reason}",
                    )
        if "format" in raw:
            node.format = raw["format"] if isinstance(raw["format"], str) else None
        for keyword, attr in (
            ("minLength", "min_length"),
            ("maxLength", "max_length"),
            ("minItems", "min_items"),
            ("maxItems", "max_items"),
            ("minProperties", "min_properties"),
            ("maxProperties", "max_properties"),
        ):
            if keyword in raw:
                number = raw[keyword]
                if isinstance(number, bool) or not isinstance(number, int) or number < 0:
                    self.problem(f"{path}.{keyword}", "must be a non-negative integer")
                else:
                    setattr(node, attr, number)
        for keyword, attr in (
            ("minimum", "minimum"),
            ("maximum", "maximum"),
            ("multipleOf", "multiple_of"),
        ):
            if keyword in raw:
                number = raw[keyword]
                if isinstance(number, bool) or not isinstance(number, int | float):
                    self.problem(f"{path}.{keyword}", "must be a number")
                else:
                    setattr(node, attr, number)
        if node.multiple_of is not None and node.multiple_of <= 0:
            self.problem(f"{path}.multipleOf", "must be positive")
        node.exclusive_minimum = raw.get("exclusiveMinimum") is True
        node.exclusive_maximum = raw.get("exclusiveMaximum") is True
        node.nullable = raw.get("nullable") is True

    def parse_extensions(self, raw: dict[str, Any], node: SchemaNode) -> None:
        path = node.path
        list_type = raw.get("x-kubernetes-list-type")
        if list_type is not None:
            if list_type not in ("atomic", "set", "map"):
                self.problem(
                    f"{path}.x-kubernetes-list-type",
                    f'Unsupported value: "{list_type}": supported values: "atomic", "set", "map"',
                )
            elif node.type != "array":
                self.problem(
                    f"{path}.x-kubernetes-list-type",
                    "Invalid value: must only be used if type is array",
                )
            else:
                node.list_type = list_type
        keys = raw.get("x-kubernetes-list-map-keys")
        if keys is not None:
            if not isinstance(keys, list) or not keys or not all(isinstance(k, str) for k in keys):
                self.problem(
                    f"{path}.x-kubernetes-list-map-keys", "must be a non-empty list of strings"
                )
            elif node.list_type != "map":
                self.problem(
                    f"{path}.x-kubernetes-list-map-keys",
                    'Forbidden: must only be used if x-kubernetes-list-type is "map"',
                )
            else:
                node.list_map_keys = tuple(keys)
        if node.list_type == "map":
            if not node.list_map_keys:
                self.problem(
                    f"{path}.x-kubernetes-list-map-keys",
                    'Required value: must not be empty if x-kubernetes-list-type is "map"',
                )
            item = node.items
            if item is not None and item.type != "object":
                self.problem(
                    f"{path}.items.type",
                    'Invalid value: must be object if parent array\'s x-kubernetes-list-type is "map"',
                )
            elif item is not None:
                for key in node.list_map_keys:
                    key_node = item.properties.get(key)
                    if key_node is not None and key_node.type in ("array", "object"):
                        self.problem(
                            f"{path}.items.properties[{key}].type",
                            "Invalid value: must be a scalar type if parent array's"
                            ' x-kubernetes-list-type is "map"',
                        )
                    if key_node is None:
                        self.problem(
                            f"{path}.x-kubernetes-list-map-keys",
                            f'Invalid value: "{key}": entries must all be names of item properties',
                        )
        if node.list_type == "set" and node.items is not None and node.items.type == "object":
            self.problem(
                f"{path}.items.type",
                'Invalid value: must be a scalar type if parent array\'s x-kubernetes-list-type is "set"',
            )
        map_type = raw.get("x-kubernetes-map-type")
        if map_type is not None:
            if map_type not in ("granular", "atomic"):
                self.problem(
                    f"{path}.x-kubernetes-map-type",
                    f'Unsupported value: "{map_type}": supported values: "granular", "atomic"',
                )
            elif node.type != "object":
                self.problem(
                    f"{path}.x-kubernetes-map-type",
                    "Invalid value: must only be used if type is object",
                )
            else:
                node.map_type = map_type
        if node.embedded and node.type != "object":
            self.problem(
                f"{path}.type",
                "Invalid value: must be object if x-kubernetes-embedded-resource is true",
            )


ROOT_PATH = "openAPIV3Schema"


def structural_errors(schema: Any) -> list[str]:
    """List every reason ``schema`` is not a structural schema localkube can serve.

    Args:
        schema: one CRD version's ``schema.openAPIV3Schema`` (a JSON object).

    Returns:
        Messages of the form ``<schema path>: <problem>``, empty when the schema is fine.
        Implements the "Specifying a structural schema" rules of the CRD documentation.
    """
    return _parse(schema)[1]


def _parse(schema: Any) -> tuple[SchemaNode, list[str]]:
    parser = _Parser()
    root = parser.parse(schema, ROOT_PATH, root=True)
    if isinstance(schema, dict) and not parser.problems and root.type not in (None, "object"):
        parser.problem(f"{ROOT_PATH}.type", 'Invalid value: must be "object" at the root')
    metadata = schema.get("properties", {}).get("metadata") if isinstance(schema, dict) else None
    if isinstance(metadata, dict) and isinstance(schema.get("properties"), dict):
        _check_root_metadata(metadata, parser)
    return root, parser.problems


METADATA_KEYWORDS = frozenset({"type", "properties", "description", "title"})
METADATA_FIELDS = frozenset({"name", "generateName"})


def _check_root_metadata(metadata: dict[str, Any], parser: _Parser) -> None:
    """Only ``metadata.name``/``generateName`` restrictions are allowed at the root."""
    path = f"{ROOT_PATH}.properties[metadata]"
    extra = sorted(set(metadata) - METADATA_KEYWORDS)
    props = metadata.get("properties")
    if isinstance(props, dict):
        extra += [f"properties[{k}]" for k in sorted(set(props) - METADATA_FIELDS)]
    if metadata.get("type") not in (None, "object"):
        extra.append("type")
    if extra:
        parser.problem(
            path,
            "Forbidden: must not specify anything other than name and generateName,"
            f" but metadata is implicitly specified (found {', '.join(extra)})",
        )


def parse_schema(schema: Any) -> SchemaNode:
    """Parse a structural schema into a :class:`SchemaNode` tree.

    Raises:
        UnsupportedSchema: the schema is not structural or uses an unsupported keyword; the
            message lists every problem found.
    """
    root, problems = _parse(schema)
    if problems:
        raise UnsupportedSchema(ROOT_PATH, "; ".join(problems))
    return root
