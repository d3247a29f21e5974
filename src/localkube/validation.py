"""Validation of the built-in kinds localkube's workloads depend on (pure functions).

A subset of kube-apiserver's validation, with its field paths and wording, for the rules a
controller or node would otherwise trip over later:

* Pod: ``spec.containers`` required; each container needs a ``name`` (unique across
  containers and init containers) and an ``image``; on update the spec is immutable except
  container/init-container images, ``activeDeadlineSeconds``,
  ``terminationGracePeriodSeconds`` and added tolerations (checked as: nothing else changed).
* Deployment and ReplicaSet (apps/v1): ``spec.selector`` required and non-empty, must match
  ``spec.template.metadata.labels``, and is immutable; ``spec.replicas`` not negative.
* Role and ClusterRole: :mod:`localkube.rbac_validation`.

Wrong-typed fields never get here: decoding refuses them first with 400
(:mod:`localkube.builtin_types`).

Everything else is accepted as sent (documented simplification).
"""

from __future__ import annotations

import json
from typing import Any

from localkube import config_data, rbac_validation
from localkube.errors import FieldError
from localkube.selectors import SelectorError, label_selector_from_dict

_POD_MUTABLE = (
    "spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only "
    "additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be "
    "set to 1 if it was previously negative)"
)


def _go_map(labels: dict[str, Any]) -> str:
    inner = ", ".join(f"{json.dumps(k)}:{json.dumps(v)}" for k, v in sorted(labels.items()))
    return f"map[string]string{{{inner}}}"


def pod_errors(pod: dict[str, Any], old: dict[str, Any] | None) -> list[FieldError]:
    """Return the validation errors of a Pod create (``old`` None) or update."""
    spec = pod.get("spec") or {}
    errors: list[FieldError] = []
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        errors.append(FieldError("spec.containers", "FieldValueRequired", "Required value"))
        containers = []
    seen: set[str] = set()
    groups = (("initContainers", spec.get("initContainers") or []), ("containers", containers))
    for field, items in groups:
        for index, container in enumerate(items if isinstance(items, list) else []):
            path = f"spec.{field}[{index}]"
            if not isinstance(container, dict):
                errors.append(
                    FieldError(path, "FieldValueInvalid", "Invalid value: must be an object")
                )
                continue
            name = container.get("name")
            if not name:
                errors.append(FieldError(f"{path}.name", "FieldValueRequired", "Required value"))
            elif name in seen:
                errors.append(
                    FieldError(f"{path}.name", "FieldValueDuplicate", f'Duplicate value: "{name}"')
                )
            else:
                seen.add(str(name))
            if not container.get("image"):
                errors.append(FieldError(f"{path}.image", "FieldValueRequired", "Required value"))
    if old is not None and not errors and _pod_spec_changed(old.get("spec") or {}, spec):
        errors.append(
            FieldError("spec", "FieldValueForbidden", _POD_MUTABLE.removeprefix("spec: "))
        )
    return errors


def _without_mutable(spec: dict[str, Any]) -> dict[str, Any]:
    clean = {
        k: v
        for k, v in spec.items()
        if k not in ("activeDeadlineSeconds", "terminationGracePeriodSeconds", "tolerations")
    }
    for field in ("containers", "initContainers"):
        if isinstance(clean.get(field), list):
            clean[field] = [
                {k: v for k, v in c.items() if k != "image"} if isinstance(c, dict) else c
                for c in clean[field]
            ]
    return clean


def _pod_spec_changed(old: dict[str, Any], new: dict[str, Any]) -> bool:
    if _without_mutable(old) != _without_mutable(new):
        return True
    old_tolerations = old.get("tolerations") or []
    new_tolerations = new.get("tolerations") or []
    return any(t not in new_tolerations for t in old_tolerations)


def workload_errors(obj: dict[str, Any], old: dict[str, Any] | None) -> list[FieldError]:
    """Return the validation errors of an apps/v1 Deployment or ReplicaSet."""
    spec = obj.get("spec") or {}
    errors: list[FieldError] = []
    replicas = spec.get("replicas")
    if replicas is not None and (not isinstance(replicas, int) or replicas < 0):
        errors.append(
            FieldError(
                "spec.replicas",
                "FieldValueInvalid",
                f"Invalid value: {replicas}: must be greater than or equal to 0",
            )
        )
    selector = spec.get("selector")
    if not isinstance(selector, dict) or not (
        selector.get("matchLabels") or selector.get("matchExpressions")
    ):
        errors.append(FieldError("spec.selector", "FieldValueRequired", "Required value"))
        return errors
    labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    try:
        matches = label_selector_from_dict(selector).matches(labels)
    except SelectorError as exc:
        errors.append(FieldError("spec.selector", "FieldValueInvalid", f"Invalid value: {exc}"))
        return errors
    if not matches:
        errors.append(
            FieldError(
                "spec.template.metadata.labels",
                "FieldValueInvalid",
                f"Invalid value: {_go_map(labels)}: `selector` does not match template `labels`",
            )
        )
    if old is not None and (old.get("spec") or {}).get("selector") != selector:
        errors.append(
            FieldError("spec.selector", "FieldValueInvalid", "Invalid value: field is immutable")
        )
    return errors


VALIDATORS = {
    "/configmaps": config_data.configmap_errors,
    "/secrets": config_data.secret_errors,
    "/pods": pod_errors,
    "apps/deployments": workload_errors,
    "apps/replicasets": workload_errors,
    "rbac.authorization.k8s.io/roles": rbac_validation.role_errors,
    "rbac.authorization.k8s.io/clusterroles": rbac_validation.cluster_role_errors,
}
"""Storage key -> validator for the built-in kinds checked here."""
