"""ClusterRole aggregation: kube-controller-manager's ``clusterrole-aggregation`` controller.

A ClusterRole with ``aggregationRule.clusterRoleSelectors`` gets, in its stored ``.rules``,
the union of the ``.rules`` of every other ClusterRole one of its selectors matches, and
keeps it current as selected roles change, appear or go, so ``kubectl get clusterrole admin
-o yaml`` shows what the role grants. localkube's authorizer evaluates the aggregation on
read (:mod:`localkube.auth.aggregation`), so access never waits for this controller; the
controller only makes the stored object say the same.

As in Kubernetes (``pkg/controller/clusterroleaggregation``): selectors are taken in order,
the roles each selects in name order (the aggregated role itself skipped), a rule already in
the union is not added again, and the role is written only when its rules differ (an empty
union equals no rules). Selected roles contribute their *stored* rules: an aggregated role
selected by another (``edit`` into ``admin``) contributes the union this controller wrote
for it, and every ClusterRole event re-queues every aggregated role, so chains converge.
Writes are updates conditional on the role's resourceVersion (a 409 is retried from the
informer's newer copy by the work queue).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterable, Mapping
from typing import Any

import trio

from localkube.controllers.informer import Informer, KeyedQueue
from localkube.controllers.kubeapi import Kube, object_path
from localkube.selectors import SelectorError, label_selector_from_dict

log = logging.getLogger(__name__)

RBAC_GROUP_VERSION = "rbac.authorization.k8s.io/v1"


def _name(role: Mapping[str, Any]) -> str:
    metadata = role.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    return name if isinstance(name, str) else ""


def _labels(role: Mapping[str, Any]) -> Mapping[str, Any]:
    metadata = role.get("metadata")
    labels = metadata.get("labels") if isinstance(metadata, Mapping) else None
    return labels if isinstance(labels, Mapping) else {}


def _rules(role: Mapping[str, Any]) -> list[Any]:
    rules = role.get("rules")
    return list(rules) if isinstance(rules, list) else []


def is_aggregated(role: Mapping[str, Any]) -> bool:
    """Whether ``role`` (a ClusterRole object dict) has an ``aggregationRule``."""
    return isinstance(role.get("aggregationRule"), Mapping)


def aggregated_rules(
    role: Mapping[str, Any], cluster_roles: Iterable[Mapping[str, Any]]
) -> list[Any] | None:
    """The ``.rules`` the aggregation controller stores for ``role``.

    Args:
        role: a ClusterRole object dict.
        cluster_roles: every ClusterRole object dict (``role`` may be among them).

    Returns:
        ``None`` when ``role`` has no ``aggregationRule``; otherwise the union, in selector
        order then name order, of the stored rules of the other ClusterRoles each selector
        matches (an empty selector matches every role), each distinct rule once.

    Raises:
        SelectorError: ``clusterRoleSelectors`` or one of its selectors is malformed.
    """
    if not is_aggregated(role):
        return None
    selectors = role["aggregationRule"].get("clusterRoleSelectors") or []
    if not isinstance(selectors, list):
        raise SelectorError("aggregationRule.clusterRoleSelectors must be a list")
    own_name = _name(role)
    others = sorted((r for r in cluster_roles if _name(r) != own_name), key=lambda r: _name(r))
    union: list[Any] = []
    for index, selector in enumerate(selectors):
        if not isinstance(selector, Mapping):
            raise SelectorError(f"aggregationRule.clusterRoleSelectors[{index}] must be an object")
        matcher = label_selector_from_dict(selector)
        for other in others:
            if not matcher.matches(_labels(other)):
                continue
            for rule in _rules(other):
                if rule not in union:
                    union.append(rule)
    return union


def with_rules(role: Mapping[str, Any], rules: list[Any]) -> dict[str, Any]:
    """A copy of ``role`` with ``.rules`` replaced (its resourceVersion kept: conditional)."""
    body = copy.deepcopy(dict(role))
    body["rules"] = copy.deepcopy(rules)
    return body


class ClusterRoleAggregationController:
    """Keeps aggregated ClusterRoles' ``.rules`` equal to their selected roles' union.

    Args:
        kube: API client allowed to update ClusterRoles with an ``aggregationRule``
            (cluster-admin: the escalation check requires it).
        cluster_roles: an informer on ``/apis/rbac.authorization.k8s.io/v1/clusterroles``.
    """

    def __init__(self, kube: Kube, cluster_roles: Informer) -> None:
        self.kube = kube
        self.cluster_roles = cluster_roles
        self.queue: KeyedQueue[str] = KeyedQueue(self.reconcile, name="clusterrole-aggregation")
        #: role name -> the aggregationRule problem last warned about (warned once each)
        self.invalid: dict[str, str] = {}
        cluster_roles.add_handler(self._on_cluster_role)

    def _on_cluster_role(self, etype: str, role: dict[str, Any]) -> None:
        # any ClusterRole change may change any aggregated role's union (as in Kubernetes)
        del etype, role
        for cached in self.cluster_roles.items():
            if is_aggregated(cached):
                self.queue.add(_name(cached))

    async def reconcile(self, name: str) -> None:
        """Write the union into ClusterRole ``name`` if its stored rules differ.

        Raises:
            ApiStatusError: the update failed (409 included); the work queue retries.
        """
        role = self.cluster_roles.cache.get(("", name))
        if role is None:
            self.invalid.pop(name, None)
            return
        try:
            rules = aggregated_rules(role, self.cluster_roles.items())
        except SelectorError as exc:
            # stored before validation refused it; warn once, not on every role event
            if self.invalid.get(name) != str(exc):
                self.invalid[name] = str(exc)
                log.warning("ClusterRole %s: invalid aggregationRule: %s", name, exc)
            return
        self.invalid.pop(name, None)
        if rules is None or rules == _rules(role):
            return
        path = object_path(RBAC_GROUP_VERSION, "clusterroles", None, name)
        await self.kube.replace(path, with_rules(role, rules))

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the work queue; never returns unless cancelled."""
        await self.queue.run(task_status=task_status)
