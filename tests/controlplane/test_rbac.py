"""The control plane's own permissions cover what it does and what it grants runtimed."""

from __future__ import annotations

import pytest

from krt.controlplane.rbac import CONTROLPLANE_RULES, allows
from krt.controlplane.runtime_resources import RUNTIMED_RULES


def test_controlplane_holds_every_permission_it_grants_runtimed() -> None:
    """RBAC escalation prevention: a Role can only grant what its creator holds."""
    for rule in RUNTIMED_RULES:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    assert allows(CONTROLPLANE_RULES, group, resource, verb), (
                        group,
                        resource,
                        verb,
                    )


@pytest.mark.parametrize(
    ("group", "resource", "verb"),
    [
        ("kruntimes.io", "runs", "watch"),
        ("kruntimes.io", "runs/status", "update"),
        ("kruntimes.io", "runs", "patch"),
        ("kruntimes.io", "runs", "delete"),
        ("kruntimes.io", "runtimes/status", "update"),
        ("kruntimes.io", "runtimes/finalizers", "update"),
        ("apps", "deployments", "create"),
        ("apps", "deployments", "update"),
        ("", "services", "create"),
        ("", "serviceaccounts", "create"),
        ("rbac.authorization.k8s.io", "roles", "create"),
        ("rbac.authorization.k8s.io", "rolebindings", "update"),
        ("coordination.k8s.io", "leases", "update"),
        ("", "events", "create"),
    ],
)
def test_controlplane_can_do_what_its_loops_do(group: str, resource: str, verb: str) -> None:
    assert allows(CONTROLPLANE_RULES, group, resource, verb)


def test_controlplane_reads_no_secrets_and_deletes_no_children() -> None:
    assert not allows(CONTROLPLANE_RULES, "", "secrets", "get")
    assert not allows(CONTROLPLANE_RULES, "apps", "deployments", "delete")
    assert not allows(CONTROLPLANE_RULES, "rbac.authorization.k8s.io", "roles", "escalate")
    assert not allows(CONTROLPLANE_RULES, "rbac.authorization.k8s.io", "roles", "bind")
