"""The ``controller.kubernetes.io/pod-deletion-cost`` annotation, read as Kubernetes reads it.

A ReplicaSet scaling down removes Pods with a lower cost first. The control plane writes the
annotation on Runtime Pods before a scale-down (:mod:`krt.controlplane.deletion_cost`), and
localkube's ReplicaSet controller orders its deletions by it: both read it here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

__all__ = ["INT32_MAX", "INT32_MIN", "POD_DELETION_COST_ANNOTATION", "pod_deletion_cost"]

POD_DELETION_COST_ANNOTATION: Final = "controller.kubernetes.io/pod-deletion-cost"
INT32_MIN: Final = -(2**31)
INT32_MAX: Final = 2**31 - 1


def pod_deletion_cost(pod: Mapping[str, Any]) -> int:
    """The Pod's deletion cost (0 when the annotation is missing or invalid).

    Kubernetes' ``GetDeletionCostFromPodAnnotations``: the value is a base-10 int32 with no
    ``+`` sign and no leading zeros (``"0"`` itself is fine); anything else reads as 0.

    Args:
        pod: a Pod object dict.
    """
    value = ((pod.get("metadata") or {}).get("annotations") or {}).get(POD_DELETION_COST_ANNOTATION)
    if not isinstance(value, str) or not value:
        return 0
    digits = value[1:] if value[0] == "-" else value
    if not digits.isascii() or not digits.isdigit() or (digits[0] == "0" and value != "0"):
        return 0
    number = int(value)
    return number if INT32_MIN <= number <= INT32_MAX else 0
