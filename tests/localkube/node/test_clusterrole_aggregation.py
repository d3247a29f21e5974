"""The ClusterRole aggregation controller: pure union rules, then on a whole localkube.

Kubernetes' clusterrole-aggregation controller writes the union of the selected
ClusterRoles' rules into an aggregated role's ``.rules`` and keeps it current when a
selected role changes, appears or goes; ``kubectl get clusterrole admin -o yaml`` shows it.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from lk_node_helpers import eventually

from localkube.auth.aggregation import SelectorError
from localkube.cluster import ClusterHandle
from localkube.controllers.clusterrole_aggregation import aggregated_rules
from localkube.controllers.kubeapi import Kube, collection_path, object_path

RBAC = "rbac.authorization.k8s.io/v1"
CLUSTERROLES = collection_path(RBAC, "clusterroles")


def role(name: str, rules: list[dict[str, Any]], labels: dict[str, str] | None = None) -> dict:
    return {
        "apiVersion": RBAC,
        "kind": "ClusterRole",
        "metadata": {"name": name, "labels": labels or {}},
        "rules": rules,
    }


def aggregator(name: str, *selectors: dict[str, Any], rules: list[Any] | None = None) -> dict:
    return {
        "apiVersion": RBAC,
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "aggregationRule": {"clusterRoleSelectors": list(selectors)},
        "rules": rules or [],
    }


def rule(resource: str, *verbs: str) -> dict[str, Any]:
    return {"apiGroups": [""], "resources": [resource], "verbs": list(verbs)}


# -- the union (pure) ------------------------------------------------------------------------


def test_union_in_selector_then_name_order_each_rule_once() -> None:
    agg = aggregator("agg", {"matchLabels": {"a": "1"}}, {"matchLabels": {"b": "1"}})
    roles = [
        agg,
        role("z-first-selector", [rule("pods", "get")], {"a": "1"}),
        role("b-second-selector", [rule("secrets", "get")], {"b": "1"}),
        role("a-first-selector", [rule("services", "get"), rule("pods", "get")], {"a": "1"}),
        role("unselected", [rule("nodes", "get")]),
    ]
    assert aggregated_rules(agg, roles) == [
        rule("services", "get"),
        rule("pods", "get"),
        rule("secrets", "get"),
    ]


def test_own_rules_are_replaced_and_itself_never_selected() -> None:
    agg = aggregator("self", {"matchLabels": {"a": "1"}}, rules=[rule("nodes", "delete")])
    agg["metadata"]["labels"] = {"a": "1"}
    assert aggregated_rules(agg, [agg]) == []


def test_empty_selector_matches_every_other_role() -> None:
    agg = aggregator("all", {})
    roles = [agg, role("x", [rule("pods", "list")]), role("y", [rule("pods", "watch")])]
    assert aggregated_rules(agg, roles) == [rule("pods", "list"), rule("pods", "watch")]


def test_a_plain_role_is_not_aggregated() -> None:
    assert aggregated_rules(role("plain", [rule("pods", "get")]), []) is None


def test_malformed_selector_is_refused_naming_it() -> None:
    agg = aggregator("bad", {"matchExpressions": [{"key": "a", "operator": "Near"}]})
    with pytest.raises(SelectorError, match="operator"):
        aggregated_rules(agg, [agg, role("x", [], {"a": "1"})])


async def test_a_stored_invalid_aggregation_rule_is_warned_about_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # stored before validation refused it (F3): no warning on every ClusterRole event
    from localkube.controllers.clusterrole_aggregation import ClusterRoleAggregationController
    from localkube.controllers.informer import Informer

    informer = Informer(None, CLUSTERROLES)  # type: ignore[arg-type] # never run: cache only
    controller = ClusterRoleAggregationController(None, informer)  # type: ignore[arg-type]
    bad = aggregator("bad", {"matchExpressions": [{"key": "a", "operator": "Near"}]})
    informer.cache[("", "bad")] = bad
    informer.cache[("", "x")] = role("x", [], {"a": "1"})
    for _ in range(3):
        await controller.reconcile("bad")
    bad["aggregationRule"]["clusterRoleSelectors"][0]["matchExpressions"][0]["operator"] = "Far"
    await controller.reconcile("bad")
    warnings = [
        r.getMessage() for r in caplog.records if "invalid aggregationRule" in r.getMessage()
    ]
    assert len(warnings) == 2, warnings
    assert "'Near'" in warnings[0]
    assert "'Far'" in warnings[1]


# -- on localkube ----------------------------------------------------------------------------


async def stored_rules(kube: Kube, name: str) -> list[Any]:
    obj = await kube.get(object_path(RBAC, "clusterroles", None, name))
    assert obj is not None
    return list(obj.get("rules") or [])


async def test_builtin_admin_edit_view_store_their_aggregated_rules(
    kube: Kube, kubectl: Any
) -> None:
    async def admin_rules() -> list[Any] | None:
        return await stored_rules(kube, "admin") or None

    await eventually(admin_rules, what="admin's aggregated rules")
    view = await stored_rules(kube, "system:aggregate-to-view")
    edit = await stored_rules(kube, "system:aggregate-to-edit")
    for rule_ in view:
        assert rule_ in await stored_rules(kube, "view")
    for rule_ in view + edit:
        assert rule_ in await stored_rules(kube, "edit")

    async def admin_has_all() -> bool:
        admin = await stored_rules(kube, "admin")
        return all(r in admin for r in view + edit)

    await eventually(admin_has_all, what="admin to include edit and view (chained)")
    shown = yaml.safe_load((await kubectl("get", "clusterrole", "admin", "-o", "yaml")).stdout)
    assert any("secrets" in r.get("resources", []) for r in shown["rules"]), shown["rules"]


async def test_aggregated_rules_follow_selected_roles(cluster: ClusterHandle) -> None:
    kube = cluster.kube
    label = {"example.com/aggregate-to-monitor": "true"}
    await kube.create(CLUSTERROLES, aggregator("monitor", {"matchLabels": dict(label)}))
    await kube.create(CLUSTERROLES, role("monitor-pods", [rule("pods", "get")], label))

    async def rules_are(expected: list[Any]) -> bool:
        return await stored_rules(kube, "monitor") == expected

    async def first() -> bool:
        return await rules_are([rule("pods", "get")])

    await eventually(first, what="a selected role's rules")

    # a second selected role appears
    await kube.create(CLUSTERROLES, role("monitor-logs", [rule("pods/log", "get")], label))

    async def second() -> bool:
        return await rules_are([rule("pods/log", "get"), rule("pods", "get")])

    await eventually(second, what="the new role's rules (name order)")

    # a selected role changes
    path = object_path(RBAC, "clusterroles", None, "monitor-pods")
    await kube.merge_patch(path, {"rules": [rule("pods", "get", "list")]})

    async def changed() -> bool:
        return await rules_are([rule("pods/log", "get"), rule("pods", "get", "list")])

    await eventually(changed, what="the changed rules")

    # a selected role loses its label, then the other one is deleted
    await kube.merge_patch(path, {"metadata": {"labels": None}})

    async def unlabelled() -> bool:
        return await rules_are([rule("pods/log", "get")])

    await eventually(unlabelled, what="an unselected role dropped")
    await kube.delete(object_path(RBAC, "clusterroles", None, "monitor-logs"))

    async def emptied() -> bool:
        return await rules_are([])

    await eventually(emptied, what="a deleted role dropped")

    # rules written by hand into the aggregated role are overwritten
    monitor = object_path(RBAC, "clusterroles", None, "monitor")
    await kube.merge_patch(path, {"metadata": {"labels": label}})
    await kube.merge_patch(monitor, {"rules": [rule("nodes", "delete")]})

    async def restored() -> bool:
        return await rules_are([rule("pods", "get", "list")])

    await eventually(restored, what="hand-written rules replaced by the union")
