"""``metadata.finalizers`` and ``metadata.ownerReferences`` rules of apimachinery's
``ValidateObjectMeta``, with kube-apiserver's messages.

Finalizers are qualified names (``example.com/cleanup``), and ``orphan`` and
``foregroundDeletion`` cannot both be set. Every ownerReference needs an apiVersion with
a version, a kind, a name and a uid, and at most one may be the controller. The garbage
collector matches owners by uid, so a reference without one must be refused rather than
stored and silently ignored.
"""

from __future__ import annotations

import json
from typing import Any

from localkube.errors import FieldError
from localkube.label_rules import qualified_name_problems

_FINALIZERS = "metadata.finalizers"
_OWNERS = "metadata.ownerReferences"


def _quoted(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def finalizer_errors(meta: dict[str, Any]) -> list[FieldError]:
    """Return the errors of ``meta["finalizers"]`` (empty if valid or absent)."""
    finalizers = meta.get("finalizers")
    if finalizers is None:
        return []
    if not isinstance(finalizers, list) or not all(isinstance(f, str) for f in finalizers):
        return [
            FieldError(
                _FINALIZERS, "FieldValueTypeInvalid", "Invalid value: must be a list of strings"
            )
        ]
    errors = [
        FieldError(_FINALIZERS, "FieldValueInvalid", f"Invalid value: {_quoted(f)}: {problem}")
        for f in finalizers
        for problem in qualified_name_problems(f)
    ]
    if "orphan" in finalizers and "foregroundDeletion" in finalizers:
        errors.append(
            FieldError(
                _FINALIZERS,
                "FieldValueInvalid",
                f"Invalid value: {_quoted(finalizers)}: finalizer orphan and foregroundDeletion "
                "cannot be both set",
            )
        )
    return errors


def owner_reference_errors(meta: dict[str, Any]) -> list[FieldError]:
    """Return the errors of ``meta["ownerReferences"]`` (empty if valid or absent)."""
    refs = meta.get("ownerReferences")
    if refs is None:
        return []
    if not isinstance(refs, list) or not all(isinstance(r, dict) for r in refs):
        return [
            FieldError(_OWNERS, "FieldValueTypeInvalid", "Invalid value: must be a list of objects")
        ]
    errors: list[FieldError] = []
    controller = ""
    for ref in refs:
        api_version = str(ref.get("apiVersion") or "")
        checks = (
            (
                "apiVersion",
                api_version,
                "version must not be empty",
                api_version.rpartition("/")[2],
            ),
            ("kind", ref.get("kind") or "", "kind must not be empty", ref.get("kind")),
            ("name", ref.get("name") or "", "name must not be empty", ref.get("name")),
            ("uid", ref.get("uid") or "", "uid must not be empty", ref.get("uid")),
        )
        errors += [
            FieldError(
                f"{_OWNERS}.{field}",
                "FieldValueInvalid",
                f"Invalid value: {_quoted(value)}: {detail}",
            )
            for field, value, detail, present in checks
            if not present
        ]
        if ref.get("controller") is True:
            current = f"{ref.get('kind', '')}/{ref.get('name', '')}"
            if controller:
                errors.append(
                    FieldError(
                        _OWNERS,
                        "FieldValueInvalid",
                        f"Invalid value: {_quoted(refs)}: Only one reference can have Controller "
                        f'set to true. Found "true" in references for {controller} and {current}',
                    )
                )
            else:
                controller = current
    return errors
