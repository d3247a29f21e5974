"""``CRDValidator``: admission of custom resources against one CRD version's schema."""

from __future__ import annotations

import copy
from collections import OrderedDict
from typing import Any

from localkube.crd import _fielderrors as fe
from localkube.crd._cel_rules import compile_rules, evaluate_rules, same_value
from localkube.crd._defaulting import apply_defaults
from localkube.crd._pruning import prune
from localkube.crd._rule_cache import RuleResultCache
from localkube.crd._schema import SchemaNode, parse_schema
from localkube.crd._values import validate_value
from localkube.errors import FieldError

BLOCKING_REASONS = frozenset(
    {
        "FieldValueNotSupported",
        "FieldValueRequired",
        "FieldValueTooLong",
        "FieldValueTooMany",
        "FieldValueTypeInvalid",
    }
)
"""Schema errors after which kube-apiserver skips CEL rules (``hasBlockingErr``)."""

MAX_REMEMBERED = 2048
"""Admitted top-level values (``spec``, ``status``) a validator remembers by identity."""
ENVELOPE = frozenset({"apiVersion", "kind", "metadata"})

SKIPPED_RULES_MESSAGE = (
    "some validation rules were not checked because the object was invalid;"
    " correct the existing errors to complete validation"
)


class CRDValidator:
    """Prune, default and validate custom resources for one CRD version.

    Build one per served CRD version when the CRD is created or updated; everything that
    can be decided from the schema alone (structural checks, CEL compilation) happens here,
    so :meth:`admit` only walks the object.

    Args:
        schema: the version's ``schema.openAPIV3Schema`` (a JSON object). It is copied;
            later changes to the dict do not affect the validator.

    Raises:
        UnsupportedSchema: the schema is not structural, uses ``uniqueItems: true`` or an
            unsupported keyword, has an invalid default, or a ``x-kubernetes-validations``
            rule does not compile or uses an unsupported CEL function, macro or construct
            (see :mod:`localkube.crd._cel_compile`). The message names the schema path.
    """

    def __init__(self, schema: dict[str, Any]) -> None:
        self._root: SchemaNode = parse_schema(copy.deepcopy(schema))
        compile_rules(self._root)
        _check_defaults(self._root)
        self._cache = RuleResultCache()
        root = self._root
        self._can_trust = not (root.all_of or root.any_of or root.one_of or root.not_)
        # id -> the value itself (kept alive, so an id is never reused while listed); an
        # OrderedDict because evicting the oldest entry of a plain dict that keeps
        # changing (``next(iter(d))``) scans every deleted slot before it: ~2 us per write
        self._admitted: OrderedDict[int, Any] = OrderedDict()

    @property
    def root(self) -> SchemaNode:
        """The parsed schema tree (read-only use)."""
        return self._root

    def admit(
        self, obj: dict[str, Any], old: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], list[FieldError]]:
        """Prune unknown fields, apply defaults and validate ``obj``.

        Implements the custom resource handling of kube-apiserver for create (``old`` is
        None) and update (``old`` is the stored object, used by transition rules). On
        update, validation ratchets as in kube-apiserver 1.30+: a top-level field (``spec``,
        ``status``) equal to the stored one is not validated against the schema again, and
        no rule without ``oldSelf`` is evaluated on a value equal to its old value (so a
        status write costs no ``spec`` rule but transition rules).

        Args:
            obj: the decoded request body (any JSON value is tolerated; a non-object gets a
                type error). It is not modified; the result shares its ``apiVersion``,
                ``kind`` and ``metadata`` values (not copied).
            old: the current stored object on update, else None.

        Returns:
            ``(new_object, errors)``: a new, pruned and defaulted object, and the field
            errors (empty when the object is valid). Never raises for bad input.
        """
        node = self._root
        trusted = self._trusted(obj)
        # the root's metadata is shared, not copied: admission keeps the request's own
        # metadata object anyway, and nothing below changes it
        new_obj: Any = prune(
            obj, node, root=True, trusted=trusted, share_envelope=True, drop_nulls=True
        )
        apply_defaults(new_obj, node, root=True, trusted=trusted, nulls_dropped=True)
        if old is not None and isinstance(new_obj, dict):
            trusted |= _unchanged_fields(new_obj, old)
        errors = validate_value(new_obj, node, "", root=True, trusted=trusted)
        if any(e.reason in BLOCKING_REASONS for e in errors):
            if node.rules_below:
                errors.append(fe.invalid(fe.ROOT_FIELD, None, SKIPPED_RULES_MESSAGE))
        else:
            errors.extend(evaluate_rules(new_obj, old, old is not None, node, cache=self._cache))
        if not errors and isinstance(new_obj, dict):
            self._remember(new_obj)
        return new_obj, errors

    def pruned(self, obj: dict[str, Any]) -> dict[str, Any]:
        """``obj`` with only structural pruning applied: unknown fields removed, nulls kept.

        What strict field validation compares the request with (``fieldValidation=Strict``:
        a field pruning removes is unknown; a ``null`` known field is not, even when
        defaulting later drops it). Shares ``obj``'s envelope; ``obj`` is not modified.
        """
        pruned: dict[str, Any] = prune(obj, self._root, root=True, share_envelope=True)
        return pruned

    def _trusted(self, obj: Any) -> frozenset[str]:
        """Top-level fields of ``obj`` whose values this validator admitted before.

        A status write carries the stored ``spec`` object itself (stored objects are
        read-only and shared), and an update of the main resource the stored ``status``:
        pruning, defaulting and schema validation are pure functions of the value and the
        schema, so a value admitted before needs none of them again. CEL rules still run
        (their own cache answers for unchanged values).
        """
        if not self._can_trust or not isinstance(obj, dict) or not self._admitted:
            return frozenset()
        admitted = self._admitted
        return frozenset(
            key
            for key, value in obj.items()
            if key not in ENVELOPE and admitted.get(id(value)) is value
        )

    def _remember(self, admitted: dict[str, Any]) -> None:
        for key, value in admitted.items():
            if key not in ENVELOPE and isinstance(value, dict | list):
                if len(self._admitted) >= MAX_REMEMBERED:
                    self._admitted.popitem(last=False)
                self._admitted[id(value)] = value


def _unchanged_fields(new_obj: dict[str, Any], old: dict[str, Any]) -> frozenset[str]:
    """Top-level fields of ``new_obj`` equal to the stored object's (validation ratcheting)."""
    return frozenset(
        key
        for key, value in new_obj.items()
        if key not in ENVELOPE and key in old and same_value(value, old[key])
    )


def _check_defaults(node: SchemaNode) -> None:
    """Reject defaults that would not survive pruning or fail their own schema."""
    if node.has_default:
        pruned = prune(node.default, node)
        if pruned != node.default:
            raise fe.UnsupportedSchema(
                f"{node.path}.default", "Invalid value: must not have unknown fields"
            )
        errors = validate_value(node.default, node, "default")
        if errors:
            raise fe.UnsupportedSchema(f"{node.path}.default", "; ".join(str(e) for e in errors))
    for child in node.properties.values():
        _check_defaults(child)
    if isinstance(node.additional, SchemaNode):
        _check_defaults(node.additional)
    if node.items is not None:
        _check_defaults(node.items)
