"""The default ClusterRoles and ClusterRoleBindings every Kubernetes cluster starts with.

A subset of kube-apiserver's bootstrap policy, with the same names, labels, annotations
and rules, chosen so that localkube answers like a real cluster:

* ``cluster-admin`` bound to the ``system:masters`` group (the admin kubeconfig);
* ``system:discovery``, ``system:basic-user`` and ``system:public-info-viewer`` bound to
  every authenticated user, so any token can read ``/version``, ``/api``, ``/apis`` and
  ask SelfSubjectAccessReview / SelfSubjectRulesReview / SelfSubjectReview;
* ``system:service-account-issuer-discovery`` bound to all ServiceAccounts;
* the user-facing ``admin``, ``edit`` and ``view`` roles, built by aggregation from
  ``system:aggregate-to-{admin,edit,view}`` exactly as Kubernetes does (RBAC evaluates the
  aggregation, see ``localkube.auth.aggregation``);
* ``system:auth-delegator`` (TokenReview + SubjectAccessReview) for components that
  delegate authentication.

Controller roles (``system:controller:*``), node roles and the certificate approvers are
left out: localkube runs no such components under their own identities.

Each call returns fresh dicts, so callers may store and mutate them.
"""

from __future__ import annotations

from typing import Any

RBAC_API_VERSION = "rbac.authorization.k8s.io/v1"
AGGREGATE_TO = "rbac.authorization.k8s.io/aggregate-to-"

_WRITE = ["create", "delete", "deletecollection", "patch", "update"]
_READ = ["get", "list", "watch"]
_READ_WRITE = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


def _metadata(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "name": name,
        "labels": {"kubernetes.io/bootstrapping": "rbac-defaults", **(labels or {})},
        "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
    }


def _rule(groups: list[str], resources: list[str], verbs: list[str]) -> dict[str, Any]:
    return {"apiGroups": groups, "resources": resources, "verbs": verbs}


def _urls(urls: list[str], verbs: list[str]) -> dict[str, Any]:
    return {"nonResourceURLs": urls, "verbs": verbs}


def _role(
    name: str, rules: list[dict[str, Any]], labels: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": RBAC_API_VERSION,
        "kind": "ClusterRole",
        "metadata": _metadata(name, labels),
        "rules": rules,
    }


def _aggregated(name: str, target: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": RBAC_API_VERSION,
        "kind": "ClusterRole",
        "metadata": _metadata(name, labels),
        "aggregationRule": {
            "clusterRoleSelectors": [{"matchLabels": {AGGREGATE_TO + target: "true"}}]
        },
        "rules": [],
    }


def _view_rules() -> list[dict[str, Any]]:
    return [
        _rule(
            [""],
            [
                "configmaps",
                "endpoints",
                "persistentvolumeclaims",
                "persistentvolumeclaims/status",
                "pods",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "serviceaccounts",
                "services",
                "services/status",
            ],
            _READ,
        ),
        _rule(
            [""],
            [
                "bindings",
                "events",
                "limitranges",
                "namespaces/status",
                "pods/log",
                "pods/status",
                "replicationcontrollers/status",
                "resourcequotas",
                "resourcequotas/status",
            ],
            _READ,
        ),
        _rule([""], ["namespaces"], _READ),
        _rule(["discovery.k8s.io"], ["endpointslices"], _READ),
        _rule(
            ["apps"],
            [
                "controllerrevisions",
                "daemonsets",
                "daemonsets/status",
                "deployments",
                "deployments/scale",
                "deployments/status",
                "replicasets",
                "replicasets/scale",
                "replicasets/status",
                "statefulsets",
                "statefulsets/scale",
                "statefulsets/status",
            ],
            _READ,
        ),
        _rule(
            ["autoscaling"],
            ["horizontalpodautoscalers", "horizontalpodautoscalers/status"],
            _READ,
        ),
        _rule(["batch"], ["cronjobs", "cronjobs/status", "jobs", "jobs/status"], _READ),
        _rule(["policy"], ["poddisruptionbudgets", "poddisruptionbudgets/status"], _READ),
        _rule(
            ["networking.k8s.io"],
            ["ingresses", "ingresses/status", "networkpolicies"],
            _READ,
        ),
    ]


def _edit_rules() -> list[dict[str, Any]]:
    return [
        _rule(
            [""],
            [
                "pods/attach",
                "pods/exec",
                "pods/portforward",
                "pods/proxy",
                "secrets",
                "services/proxy",
            ],
            _READ,
        ),
        _rule([""], ["serviceaccounts"], ["impersonate"]),
        _rule(
            [""],
            ["pods", "pods/attach", "pods/exec", "pods/portforward", "pods/proxy"],
            _WRITE,
        ),
        _rule([""], ["pods/eviction"], ["create"]),
        _rule(
            [""],
            [
                "configmaps",
                "events",
                "persistentvolumeclaims",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "secrets",
                "serviceaccounts",
                "services",
                "services/proxy",
            ],
            _WRITE,
        ),
        _rule([""], ["serviceaccounts/token"], ["create"]),
        _rule(
            ["apps"],
            [
                "daemonsets",
                "deployments",
                "deployments/rollback",
                "deployments/scale",
                "replicasets",
                "replicasets/scale",
                "statefulsets",
                "statefulsets/scale",
            ],
            _WRITE,
        ),
        _rule(["autoscaling"], ["horizontalpodautoscalers"], _WRITE),
        _rule(["batch"], ["cronjobs", "jobs"], _WRITE),
        _rule(["policy"], ["poddisruptionbudgets"], _WRITE),
        _rule(["networking.k8s.io"], ["ingresses", "networkpolicies"], _WRITE),
        _rule(["coordination.k8s.io"], ["leases"], _READ_WRITE),
    ]


def _admin_rules() -> list[dict[str, Any]]:
    return [
        _rule(["authorization.k8s.io"], ["localsubjectaccessreviews"], ["create"]),
        _rule(
            ["rbac.authorization.k8s.io"],
            ["rolebindings", "roles"],
            _READ_WRITE,
        ),
    ]


def default_cluster_roles() -> list[dict[str, Any]]:
    """Return the bootstrap ClusterRoles (plain ``rbac.authorization.k8s.io/v1`` dicts)."""
    return [
        _aggregated("admin", "admin"),
        _role(
            "cluster-admin",
            [_rule(["*"], ["*"], ["*"]), _urls(["*"], ["*"])],
        ),
        _aggregated("edit", "edit", {AGGREGATE_TO + "admin": "true"}),
        _role("system:aggregate-to-admin", _admin_rules(), {AGGREGATE_TO + "admin": "true"}),
        _role("system:aggregate-to-edit", _edit_rules(), {AGGREGATE_TO + "edit": "true"}),
        _role("system:aggregate-to-view", _view_rules(), {AGGREGATE_TO + "view": "true"}),
        _role(
            "system:auth-delegator",
            [
                _rule(["authentication.k8s.io"], ["tokenreviews"], ["create"]),
                _rule(["authorization.k8s.io"], ["subjectaccessreviews"], ["create"]),
            ],
        ),
        _role(
            "system:basic-user",
            [
                _rule(
                    ["authorization.k8s.io"],
                    ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                    ["create"],
                ),
                _rule(["authentication.k8s.io"], ["selfsubjectreviews"], ["create"]),
            ],
        ),
        _role(
            "system:discovery",
            [
                _urls(
                    [
                        "/api",
                        "/api/*",
                        "/apis",
                        "/apis/*",
                        "/healthz",
                        "/livez",
                        "/openapi",
                        "/openapi/*",
                        "/readyz",
                        "/version",
                        "/version/",
                    ],
                    ["get"],
                )
            ],
        ),
        _role(
            "system:public-info-viewer",
            [_urls(["/healthz", "/livez", "/readyz", "/version", "/version/"], ["get"])],
        ),
        _role(
            "system:service-account-issuer-discovery",
            [
                _urls(
                    [
                        "/.well-known/openid-configuration",
                        "/.well-known/openid-configuration/",
                        "/openid/v1/jwks",
                        "/openid/v1/jwks/",
                    ],
                    ["get"],
                )
            ],
        ),
        _aggregated("view", "view", {AGGREGATE_TO + "edit": "true"}),
    ]


def _binding(name: str, role: str, groups: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": RBAC_API_VERSION,
        "kind": "ClusterRoleBinding",
        "metadata": _metadata(name),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}
            for group in groups
        ],
    }


def default_cluster_role_bindings() -> list[dict[str, Any]]:
    """Return the bootstrap ClusterRoleBindings (plain dicts)."""
    return [
        _binding("cluster-admin", "cluster-admin", ["system:masters"]),
        _binding("system:basic-user", "system:basic-user", ["system:authenticated"]),
        _binding("system:discovery", "system:discovery", ["system:authenticated"]),
        _binding(
            "system:public-info-viewer",
            "system:public-info-viewer",
            ["system:authenticated", "system:unauthenticated"],
        ),
        _binding(
            "system:service-account-issuer-discovery",
            "system:service-account-issuer-discovery",
            ["system:serviceaccounts"],
        ),
    ]
