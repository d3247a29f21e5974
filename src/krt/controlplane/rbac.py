"""The permissions the ``krt-controlplane`` process needs (for the Helm chart's ClusterRole).

One list, next to the code that uses the permissions, so the chart (``charts/kruntimes``)
can render it and a test can check it: every verb a loop calls is here, and so is every
permission of :data:`~krt.controlplane.runtime_resources.RUNTIMED_RULES`, because Kubernetes
RBAC only lets a subject create a Role granting permissions it holds itself (escalation
prevention).
"""

from __future__ import annotations

from typing import Any, Final

from krt.api.constants import GROUP, RUN_PLURAL, RUNTIME_PLURAL

_READ = ["get", "list", "watch"]

#: ClusterRole rules of the control plane (it watches all namespaces by default).
CONTROLPLANE_RULES: Final[tuple[dict[str, Any], ...]] = (
    # scheduler, reaper, GC: read Runs, bind/requeue via status, drop finalizers, delete
    {"apiGroups": [GROUP], "resources": [RUN_PLURAL], "verbs": [*_READ, "patch", "delete"]},
    {"apiGroups": [GROUP], "resources": [f"{RUN_PLURAL}/status"], "verbs": ["update", "patch"]},
    # Runtime controller. Children carry a blockOwnerDeletion owner reference to their
    # Runtime, which the OwnerReferencesPermissionEnforcement admission plugin allows only
    # with update on the owner's finalizers. Children are never deleted by the controller
    # (garbage collection does it), so no delete.
    {"apiGroups": [GROUP], "resources": [RUNTIME_PLURAL], "verbs": _READ},
    {"apiGroups": [GROUP], "resources": [f"{RUNTIME_PLURAL}/status"], "verbs": ["update", "patch"]},
    {"apiGroups": [GROUP], "resources": [f"{RUNTIME_PLURAL}/finalizers"], "verbs": ["update"]},
    {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": [*_READ, "create", "update"]},
    {
        "apiGroups": [""],
        "resources": ["services", "serviceaccounts"],
        "verbs": [*_READ, "create", "update"],
    },
    {
        "apiGroups": ["rbac.authorization.k8s.io"],
        "resources": ["roles", "rolebindings"],
        "verbs": [*_READ, "create", "update"],
    },
    # Pods, heartbeats, endpoints; also held so the Role for runtimed may grant them.
    # patch: the Runtime controller sets controller.kubernetes.io/pod-deletion-cost on a
    # Runtime's Pods just before scaling it down (krt.controlplane.deletion_cost)
    {"apiGroups": [""], "resources": ["pods"], "verbs": [*_READ, "patch"]},
    {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]},
    {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": _READ},
    # heartbeat Leases (read) and the leader Lease (write); create/update so runtimed's Role
    # may grant them
    {
        "apiGroups": ["coordination.k8s.io"],
        "resources": ["leases"],
        "verbs": [*_READ, "create", "update"],
    },
    {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
)


def allows(rules: tuple[dict[str, Any], ...], group: str, resource: str, verb: str) -> bool:
    """True when ``rules`` grant ``verb`` on ``group``/``resource`` (no wildcards used here)."""
    return any(
        group in rule["apiGroups"] and resource in rule["resources"] and verb in rule["verbs"]
        for rule in rules
    )
