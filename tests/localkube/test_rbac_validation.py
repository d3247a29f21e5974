"""Role and ClusterRole validation answers 422 with kube-apiserver's field paths (finding F3).

An invalid ClusterRole ``aggregationRule`` (no selectors, an unknown operator) and invalid
rules were stored before; kube-apiserver refuses them (``pkg/apis/rbac/validation``).
"""

from __future__ import annotations

import copy
from typing import Any

import httpx
import pytest

from localkube.rbac_validation import cluster_role_errors, role_errors

CLUSTER_ROLES = "/apis/rbac.authorization.k8s.io/v1/clusterroles"
ROLES = "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles"
RULE = {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}
SEL = "aggregationRule.clusterRoleSelectors"


def cluster_role(name: str, **fields: Any) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name},
        **fields,
    }


def _causes(response: httpx.Response) -> list[tuple[str, str]]:
    return [(c["field"], c["message"]) for c in response.json()["details"]["causes"]]


#: (aggregationRule, the expected (field, message) causes).
AGGREGATION_CASES: list[tuple[Any, list[tuple[str, str]]]] = [
    ({"clusterRoleSelectors": []}, [(SEL, "Required value: at least one clusterRoleSelector required if aggregationRule is non-nil")]),
    ({}, [(SEL, "Required value: at least one clusterRoleSelector required if aggregationRule is non-nil")]),
    (
        {"clusterRoleSelectors": [{"matchExpressions": [{"key": "a", "operator": "Bogus"}]}]},
        [
            (f"{SEL}[0].matchExpressions[0].operator", 'Invalid value: "Bogus": not a valid selector operator'),
            (f"{SEL}[0]", 'Invalid value: "null": invalid label selector.'),
        ],
    ),
    (
        {"clusterRoleSelectors": [{}, {"matchExpressions": [{"key": "a", "operator": "In"}]}]},
        [
            (f"{SEL}[1].matchExpressions[0].values", "Required value: must be specified when `operator` is 'In' or 'NotIn'"),
            (f"{SEL}[1]", 'Invalid value: "null": invalid label selector.'),
        ],
    ),
    (
        {"clusterRoleSelectors": [{"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}]},
        [
            (f"{SEL}[0].matchExpressions[0].values", "Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'"),
            (f"{SEL}[0]", 'Invalid value: "null": invalid label selector.'),
        ],
    ),
    (
        {"clusterRoleSelectors": [{"matchLabels": {"a": "b c"}}]},
        [
            (f"{SEL}[0].matchLabels", "Invalid value: \"b c\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"),
            (f"{SEL}[0]", 'Invalid value: "null": invalid label selector.'),
        ],
    ),
]  # fmt: skip


@pytest.mark.parametrize(("rule", "causes"), AGGREGATION_CASES)
async def test_invalid_aggregation_rule_is_422_and_not_stored(
    admin_http: httpx.AsyncClient, rule: Any, causes: list[tuple[str, str]]
) -> None:
    body = cluster_role("t-bad", aggregationRule=rule, rules=[RULE])
    r = await admin_http.post(CLUSTER_ROLES, json=body)
    assert (r.status_code, r.json()["reason"]) == (422, "Invalid"), r.text
    assert _causes(r) == causes
    assert r.json()["message"].startswith(
        'ClusterRole.rbac.authorization.k8s.io "t-bad" is invalid'
    )
    assert (await admin_http.get(f"{CLUSTER_ROLES}/t-bad")).status_code == 404

    created = await admin_http.post(CLUSTER_ROLES, json=cluster_role("t-ok", rules=[RULE]))
    assert created.status_code == 201, created.text
    updated = copy.deepcopy(created.json())
    updated["aggregationRule"] = rule
    r = await admin_http.put(f"{CLUSTER_ROLES}/t-ok", json=updated)
    assert (r.status_code, _causes(r)) == (422, causes), r.text


async def test_valid_aggregation_rules_are_stored(admin_http: httpx.AsyncClient) -> None:
    selectors = [
        {},
        {"matchLabels": {"example.com/aggregate": "true"}},
        {"matchExpressions": [{"key": "a", "operator": "In", "values": ["x"]}]},
        {"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]},
    ]
    body = cluster_role("agg", aggregationRule={"clusterRoleSelectors": selectors})
    r = await admin_http.post(CLUSTER_ROLES, json=body)
    assert r.status_code == 201, r.text
    body = cluster_role("null-rule", aggregationRule=None, rules=[RULE])
    assert (await admin_http.post(CLUSTER_ROLES, json=body)).status_code == 201


async def test_wrong_typed_aggregation_rule_is_a_400_decoding_error(
    admin_http: httpx.AsyncClient,
) -> None:
    body = cluster_role("t", aggregationRule={"clusterRoleSelectors": {"matchLabels": {}}})
    r = await admin_http.post(CLUSTER_ROLES, json=body)
    assert (r.status_code, r.json()["message"]) == (
        400,
        'ClusterRole in version "v1" cannot be handled as a ClusterRole: json: cannot '
        "unmarshal object into Go struct field AggregationRule.aggregationRule."
        "clusterRoleSelectors of type []v1.LabelSelector",
    )


#: (a rule, namespaced (Role), the expected (field, message) causes).
RULE_CASES: list[tuple[Any, bool, list[tuple[str, str]]]] = [
    ({"apiGroups": [""], "resources": ["pods"]}, False, [("rules[0].verbs", "Required value: verbs must contain at least one value")]),
    ({"verbs": ["get"], "resources": ["pods"]}, False, [("rules[0].apiGroups", "Required value: resource rules must supply at least one api group")]),
    ({"verbs": ["get"], "apiGroups": [""]}, True, [("rules[0].resources", "Required value: resource rules must supply at least one resource")]),
    ({**RULE, "resources": ["pods", "secrets"], "resourceNames": ["x"]}, True, [("rules[0].resourceNames", "Required value: resource names cannot apply to multiple resources")]),
    ({"verbs": ["get"], "nonResourceURLs": ["/healthz"]}, True, [("rules[0].nonResourceURLs", 'Invalid value: []string{"/healthz"}: namespaced rules cannot apply to non-resource URLs')]),
    ({**RULE, "nonResourceURLs": ["/x"]}, False, [("rules[0].nonResourceURLs", 'Invalid value: []string{"/x"}: rules cannot apply to both regular resources and non-resource URLs')]),
]  # fmt: skip


@pytest.mark.parametrize(("rule", "namespaced", "causes"), RULE_CASES)
async def test_invalid_policy_rules_are_422(
    admin_http: httpx.AsyncClient, rule: Any, namespaced: bool, causes: list[tuple[str, str]]
) -> None:
    if namespaced:
        body = {"metadata": {"name": "r"}, "rules": [RULE, rule]}
        url = ROLES
        causes = [(f.replace("rules[0]", "rules[1]"), m) for f, m in causes]
    else:
        body = cluster_role("r", rules=[rule])
        url = CLUSTER_ROLES
    r = await admin_http.post(url, json=body)
    assert (r.status_code, _causes(r)) == (422, causes), r.text


def test_validators_accept_valid_roles_and_decode_a_null_rule_as_empty() -> None:
    non_resource = {"verbs": ["get"], "nonResourceURLs": ["/healthz"]}
    assert cluster_role_errors(cluster_role("c", rules=[RULE, non_resource]), None) == []
    assert [str(e) for e in role_errors({"rules": [RULE, None]}, None)] == [
        "rules[1].verbs: Required value: verbs must contain at least one value",
        "rules[1].apiGroups: Required value: resource rules must supply at least one api group",
        "rules[1].resources: Required value: resource rules must supply at least one resource",
    ]
