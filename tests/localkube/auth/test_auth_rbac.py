"""RBAC evaluation over bindings (localkube.auth.rbac), and Kubernetes' 403 wording."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from localkube.auth.aggregation import SelectorError, aggregated_rules
from localkube.auth.rbac import (
    StaticRbac,
    authorize,
    forbidden_error,
    forbidden_message,
    go_quote,
    rules_for,
)
from localkube.auth.types import RequestAttributes, UserInfo
from localkube.selectors import label_selector_from_dict

ALICE = UserInfo("alice", ("devs", "system:authenticated"))
SA = UserInfo(
    "system:serviceaccount:ns:runner",
    ("system:serviceaccounts", "system:serviceaccounts:ns", "system:authenticated"),
)
ADMIN = UserInfo("kubernetes-admin", ("system:masters", "system:authenticated"))

GET_RUNS = {"apiGroups": ["kruntimes.io"], "resources": ["runs"], "verbs": ["get"]}


def role(name: str, ns: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {"kind": "Role", "metadata": {"name": name, "namespace": ns}, "rules": rules}


def cluster_role(
    name: str,
    rules: list[dict[str, Any]] | None = None,
    *,
    labels: dict[str, str] | None = None,
    aggregate: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "kind": "ClusterRole",
        "metadata": {"name": name, "labels": labels or {}},
        "rules": rules or [],
    }
    if aggregate is not None:
        obj["aggregationRule"] = {"clusterRoleSelectors": aggregate}
    return obj


def binding(
    name: str, ns: str, ref_kind: str, ref: str, subjects: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": ref_kind, "name": ref},
        "subjects": subjects,
    }


def cluster_binding(name: str, ref: str, subjects: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": ref},
        "subjects": subjects,
    }


def user(name: str) -> dict[str, str]:
    return {"kind": "User", "name": name, "apiGroup": "rbac.authorization.k8s.io"}


def group(name: str) -> dict[str, str]:
    return {"kind": "Group", "name": name, "apiGroup": "rbac.authorization.k8s.io"}


def sa(name: str, ns: str = "") -> dict[str, str]:
    out = {"kind": "ServiceAccount", "name": name}
    if ns:
        out["namespace"] = ns
    return out


def get_run(ns: str = "ns", name: str = "x") -> RequestAttributes:
    return RequestAttributes(
        verb="get", api_group="kruntimes.io", resource="runs", namespace=ns, name=name
    )


SCENARIOS: list[tuple[str, UserInfo, list[dict[str, Any]], RequestAttributes, bool]] = [
    ("no bindings: denied", ALICE, [role("r", "ns", [GET_RUNS])], get_run(), False),
    (
        "User subject",
        ALICE,
        [role("r", "ns", [GET_RUNS]), binding("b", "ns", "Role", "r", [user("alice")])],
        get_run(),
        True,
    ),
    (
        "User subject other name",
        ALICE,
        [role("r", "ns", [GET_RUNS]), binding("b", "ns", "Role", "r", [user("bob")])],
        get_run(),
        False,
    ),
    (
        "Group subject",
        ALICE,
        [role("r", "ns", [GET_RUNS]), binding("b", "ns", "Role", "r", [group("devs")])],
        get_run(),
        True,
    ),
    (
        "Group subject other group",
        ALICE,
        [role("r", "ns", [GET_RUNS]), binding("b", "ns", "Role", "r", [group("ops")])],
        get_run(),
        False,
    ),
    (
        "SA subject namespace defaults to binding's",
        SA,
        [role("r", "ns", [GET_RUNS]), binding("b", "ns", "Role", "r", [sa("runner")])],
        get_run(),
        True,
    ),
    (
        "SA subject explicit namespace",
        SA,
        [role("r", "ns", [GET_RUNS]), binding("b", "ns", "Role", "r", [sa("runner", "ns")])],
        get_run(),
        True,
    ),
    (
        "SA subject other namespace",
        SA,
        [role("r", "ns", [GET_RUNS]), binding("b", "ns", "Role", "r", [sa("runner", "other")])],
        get_run(),
        False,
    ),
    (
        "SA username is not a User subject match by SA name",
        SA,
        [role("r", "ns", [GET_RUNS]), binding("b", "ns", "Role", "r", [user("runner")])],
        get_run(),
        False,
    ),
    (
        "SA group system:serviceaccounts:ns",
        SA,
        [
            role("r", "ns", [GET_RUNS]),
            binding("b", "ns", "Role", "r", [group("system:serviceaccounts:ns")]),
        ],
        get_run(),
        True,
    ),
    (
        "Role only in its namespace",
        ALICE,
        [role("r", "ns", [GET_RUNS]), binding("b", "ns", "Role", "r", [user("alice")])],
        get_run(ns="other"),
        False,
    ),
    (
        "Role of another namespace is not found",
        ALICE,
        [role("r", "other", [GET_RUNS]), binding("b", "ns", "Role", "r", [user("alice")])],
        get_run(),
        False,
    ),
    (
        "RoleBinding to ClusterRole scoped to binding namespace",
        ALICE,
        [cluster_role("cr", [GET_RUNS]), binding("b", "ns", "ClusterRole", "cr", [user("alice")])],
        get_run(),
        True,
    ),
    (
        "RoleBinding to ClusterRole not other namespaces",
        ALICE,
        [cluster_role("cr", [GET_RUNS]), binding("b", "ns", "ClusterRole", "cr", [user("alice")])],
        get_run(ns="other"),
        False,
    ),
    (
        "RoleBinding never grants cluster-scoped requests",
        ALICE,
        [
            cluster_role(
                "cr", [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get"]}]
            ),
            binding("b", "ns", "ClusterRole", "cr", [user("alice")]),
        ],
        RequestAttributes(verb="get", resource="namespaces", name="ns"),
        False,
    ),
    (
        "RoleBinding never grants non-resource URLs",
        ALICE,
        [
            cluster_role("cr", [{"nonResourceURLs": ["*"], "verbs": ["*"]}]),
            binding("b", "ns", "ClusterRole", "cr", [user("alice")]),
        ],
        RequestAttributes(verb="get", resource_request=False, path="/version"),
        False,
    ),
    (
        "ClusterRoleBinding grants in every namespace",
        ALICE,
        [cluster_role("cr", [GET_RUNS]), cluster_binding("b", "cr", [user("alice")])],
        get_run(ns="anywhere"),
        True,
    ),
    (
        "ClusterRoleBinding grants cluster scope",
        ALICE,
        [
            cluster_role(
                "cr", [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list"]}]
            ),
            cluster_binding("b", "cr", [group("devs")]),
        ],
        RequestAttributes(verb="list", resource="namespaces"),
        True,
    ),
    (
        "ClusterRoleBinding grants non-resource URLs",
        ALICE,
        [
            cluster_role("cr", [{"nonResourceURLs": ["/version"], "verbs": ["get"]}]),
            cluster_binding("b", "cr", [user("alice")]),
        ],
        RequestAttributes(verb="get", resource_request=False, path="/version"),
        True,
    ),
    (
        "ClusterRoleBinding SA subject without namespace matches nobody",
        SA,
        [cluster_role("cr", [GET_RUNS]), cluster_binding("b", "cr", [sa("runner")])],
        get_run(),
        False,
    ),
    (
        "ClusterRoleBinding SA subject with namespace",
        SA,
        [cluster_role("cr", [GET_RUNS]), cluster_binding("b", "cr", [sa("runner", "ns")])],
        get_run(ns="elsewhere"),
        True,
    ),
    (
        "system:masters always allowed",
        ADMIN,
        [],
        RequestAttributes(verb="delete", resource="nodes", name="n"),
        True,
    ),
    (
        "system:masters non-resource",
        ADMIN,
        [],
        RequestAttributes(verb="post", resource_request=False, path="/x"),
        True,
    ),
    (
        "unknown subject kind",
        ALICE,
        [
            role("r", "ns", [GET_RUNS]),
            binding("b", "ns", "Role", "r", [{"kind": "Robot", "name": "alice"}]),
        ],
        get_run(),
        False,
    ),
    (
        "second subject matches",
        ALICE,
        [
            role("r", "ns", [GET_RUNS]),
            binding("b", "ns", "Role", "r", [user("bob"), user("alice")]),
        ],
        get_run(),
        True,
    ),
]


@pytest.mark.parametrize(
    ("who", "objects", "attrs", "allowed"),
    [s[1:] for s in SCENARIOS],
    ids=[s[0] for s in SCENARIOS],
)
def test_authorize(
    who: UserInfo, objects: list[dict[str, Any]], attrs: RequestAttributes, allowed: bool
) -> None:
    assert authorize(who, attrs, StaticRbac(objects)).allowed is allowed


def test_allow_reason_names_the_binding_like_kubernetes() -> None:
    rbac = StaticRbac(
        [role("r", "ns", [GET_RUNS]), binding("b", "ns", "Role", "r", [sa("runner")])]
    )
    assert authorize(SA, get_run(), rbac).reason == (
        'RBAC: allowed by RoleBinding "b/ns" of Role "r" to ServiceAccount "runner/ns"'
    )
    rbac = StaticRbac(
        [cluster_role("cr", [GET_RUNS]), cluster_binding("cb", "cr", [group("devs")])]
    )
    assert authorize(ALICE, get_run(), rbac).reason == (
        'RBAC: allowed by ClusterRoleBinding "cb" of ClusterRole "cr" to Group "devs"'
    )


def test_missing_roles_are_skipped_and_reported() -> None:
    rbac = StaticRbac(
        [
            binding("b1", "ns", "Role", "gone", [user("alice")]),
            cluster_binding("b2", "also-gone", [user("alice")]),
            role("r", "ns", [GET_RUNS]),
            binding("b3", "ns", "Role", "r", [user("alice")]),
        ]
    )
    assert authorize(ALICE, get_run(), rbac).allowed
    delete = RequestAttributes(
        verb="delete", api_group="kruntimes.io", resource="runs", namespace="ns"
    )
    denied = authorize(ALICE, delete, rbac)
    assert not denied.allowed
    assert denied.reason == (
        'RBAC: [clusterrole.rbac.authorization.k8s.io "also-gone" not found, '
        'role.rbac.authorization.k8s.io "gone" not found]'
    )
    single = StaticRbac([binding("b1", "ns", "Role", "gone", [user("alice")])])
    assert (
        authorize(ALICE, get_run(), single).reason
        == 'RBAC: role.rbac.authorization.k8s.io "gone" not found'
    )
    assert authorize(ALICE, get_run(), StaticRbac([])).reason == ""


def test_cluster_role_binding_cannot_grant_a_role() -> None:
    bad = cluster_binding("b", "r", [user("alice")])
    bad["roleRef"]["kind"] = "Role"
    decision = authorize(ALICE, get_run(), StaticRbac([role("r", "ns", [GET_RUNS]), bad]))
    assert not decision.allowed


# --- aggregation -------------------------------------------------------------------------

AGG = "rbac.authorization.k8s.io/aggregate-to-"


def test_aggregated_cluster_role_gets_the_union_transitively() -> None:
    objects = [
        cluster_role("top", aggregate=[{"matchLabels": {AGG + "top": "true"}}]),
        cluster_role(
            "mid", labels={AGG + "top": "true"}, aggregate=[{"matchLabels": {AGG + "mid": "true"}}]
        ),
        cluster_role("leaf", [GET_RUNS], labels={AGG + "mid": "true"}),
        cluster_role("other", [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]),
        binding("b", "ns", "ClusterRole", "top", [user("alice")]),
    ]
    rbac = StaticRbac(objects)
    assert authorize(ALICE, get_run(), rbac).allowed
    secrets = RequestAttributes(verb="get", resource="secrets", namespace="ns", name="s")
    assert not authorize(ALICE, secrets, rbac).allowed
    assert aggregated_rules(objects[0], rbac.cluster_roles()) == [GET_RUNS]
    assert aggregated_rules(objects[2], rbac.cluster_roles()) is None


def test_aggregation_ignores_own_rules_and_survives_cycles() -> None:
    a = cluster_role(
        "a",
        [{"apiGroups": ["own"], "resources": ["x"], "verbs": ["get"]}],
        labels={"grp": "b"},
        aggregate=[{"matchLabels": {"grp": "a"}}],
    )
    b = cluster_role(
        "b", [GET_RUNS], labels={"grp": "a"}, aggregate=[{"matchLabels": {"grp": "b"}}]
    )
    rbac = StaticRbac([a, b, binding("bind", "ns", "ClusterRole", "a", [user("alice")])])
    # b is aggregated too, and its only match is a (its own rules are ignored); a's own
    # rules are ignored as well, so nothing is granted: the cycle terminates.
    assert not authorize(ALICE, get_run(), rbac).allowed


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        ({}, {}, True),
        ({"matchLabels": {"a": "1"}}, {"a": "1", "b": "2"}, True),
        ({"matchLabels": {"a": "1"}}, {"a": "2"}, False),
        (
            {"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "2"]}]},
            {"a": "2"},
            True,
        ),
        ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1"]}]}, {}, False),
        ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {}, True),
        (
            {"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]},
            {"a": "1"},
            False,
        ),
        ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"a": ""}, True),
        ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"a": ""}, False),
    ],
)
def test_label_selector(selector: dict[str, Any], labels: dict[str, str], matches: bool) -> None:
    assert label_selector_from_dict(selector).matches(labels) is matches


@pytest.mark.parametrize(
    "selector",
    [
        {"matchExpressions": [{"key": "a", "operator": "Near", "values": ["1"]}]},
        {"matchExpressions": [{"key": "a", "operator": "In"}]},
        {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["1"]}]},
        {"matchLabels": ["a"]},
    ],
)
def test_label_selector_errors(selector: dict[str, Any]) -> None:
    with pytest.raises(SelectorError):
        label_selector_from_dict(selector).matches({"a": "1"})


def test_malformed_aggregation_is_reported_not_raised() -> None:
    bad = cluster_role(
        "bad", aggregate=[{"matchExpressions": [{"key": "a", "operator": "Near", "values": ["x"]}]}]
    )
    rbac = StaticRbac(
        [bad, cluster_role("x", [GET_RUNS]), cluster_binding("b", "bad", [user("alice")])]
    )
    decision = authorize(ALICE, get_run(), rbac)
    assert not decision.allowed
    assert 'clusterrole.rbac.authorization.k8s.io "bad"' in decision.reason


# --- properties --------------------------------------------------------------------------

namespaces = st.sampled_from(["ns", "other", "third"])


@given(namespaces, namespaces)
def test_role_binding_never_leaks_into_another_namespace(bound_ns: str, request_ns: str) -> None:
    wide = cluster_role("cr", [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}])
    rbac = StaticRbac([wide, binding("b", bound_ns, "ClusterRole", "cr", [user("alice")])])
    allowed = authorize(ALICE, get_run(ns=request_ns), rbac).allowed
    assert allowed == (bound_ns == request_ns)


# --- rules_for ---------------------------------------------------------------------------


def test_rules_for_collects_cluster_and_namespace_rules() -> None:
    url_rule = {"nonResourceURLs": ["/version"], "verbs": ["get"]}
    rbac = StaticRbac(
        [
            cluster_role("urls", [url_rule]),
            cluster_binding("cb", "urls", [group("devs")]),
            role("r", "ns", [GET_RUNS]),
            binding("b", "ns", "Role", "r", [user("alice")]),
            binding("missing", "ns", "Role", "nope", [user("alice")]),
        ]
    )
    rules = rules_for(ALICE, "ns", rbac)
    assert rules.resource_rules == [GET_RUNS]
    assert rules.non_resource_rules == [url_rule]
    assert rules.errors == ['role.rbac.authorization.k8s.io "nope" not found']
    assert rules_for(ALICE, "other", rbac).resource_rules == []
    masters = rules_for(ADMIN, "ns", StaticRbac([]))
    assert masters.resource_rules == [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}]


# --- the 403 message ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("attrs", "expected"),
    [
        (
            get_run(),
            'runs.kruntimes.io "x" is forbidden: User "system:serviceaccount:ns:runner" cannot get '
            'resource "runs" in API group "kruntimes.io" in the namespace "ns"',
        ),
        (
            RequestAttributes(verb="list", resource="pods", namespace="ns"),
            'pods is forbidden: User "system:serviceaccount:ns:runner" cannot list resource "pods" '
            'in API group "" in the namespace "ns"',
        ),
        (
            RequestAttributes(verb="list", resource="namespaces"),
            'namespaces is forbidden: User "system:serviceaccount:ns:runner" cannot list resource '
            '"namespaces" in API group "" at the cluster scope',
        ),
        (
            RequestAttributes(
                verb="update",
                api_group="kruntimes.io",
                resource="runs",
                subresource="status",
                namespace="ns",
                name="r1",
            ),
            'runs.kruntimes.io "r1" is forbidden: User "system:serviceaccount:ns:runner" cannot '
            'update resource "runs/status" in API group "kruntimes.io" in the namespace "ns"',
        ),
        (
            RequestAttributes(verb="get", resource_request=False, path="/metrics"),
            'forbidden: User "system:serviceaccount:ns:runner" cannot get path "/metrics"',
        ),
    ],
)
def test_forbidden_message(attrs: RequestAttributes, expected: str) -> None:
    assert forbidden_message(SA, attrs) == expected


def test_forbidden_message_appends_reason_and_escapes_html() -> None:
    attrs = RequestAttributes(verb="get", resource_request=False, path="/<script>")
    assert forbidden_message(ALICE, attrs, "RBAC: x") == (
        'forbidden: User "alice" cannot get path "/&lt;script&gt;": RBAC: x'
    )


def test_forbidden_error_status_body() -> None:
    status = forbidden_error(SA, get_run()).status()
    assert status["code"] == 403
    assert status["reason"] == "Forbidden"
    assert status["details"] == {"name": "x", "group": "kruntimes.io", "kind": "runs"}
    assert status["message"].startswith('runs.kruntimes.io "x" is forbidden: ')


def test_go_quote() -> None:
    assert go_quote('a"b\\c\n\x01é') == '"a\\"b\\\\c\\n\\x01é"'


subjects = st.sampled_from(
    [user("alice"), user("bob"), group("devs"), sa("runner"), sa("runner", "ns")]
)
rule_sets = st.sampled_from(
    [
        [GET_RUNS],
        [{"apiGroups": ["*"], "resources": ["runs/status"], "verbs": ["*"]}],
        [{"apiGroups": [""], "resources": ["*"], "verbs": ["list"]}],
    ]
)
extra_bindings = st.lists(
    st.tuples(st.booleans(), namespaces, rule_sets, st.lists(subjects, min_size=1, max_size=2)),
    max_size=4,
)


@given(extra_bindings, extra_bindings, st.sampled_from([ALICE, SA]), namespaces)
def test_adding_bindings_never_removes_access(
    base: list[Any], more: list[Any], who: UserInfo, request_ns: str
) -> None:
    def build(specs: list[Any], prefix: str) -> list[dict[str, Any]]:
        objects: list[dict[str, Any]] = []
        for index, (cluster_wide, ns, rules, subs) in enumerate(specs):
            name = f"{prefix}{index}"
            objects.append(cluster_role(name, rules))
            if cluster_wide:
                objects.append(cluster_binding(name, name, subs))
            else:
                objects.append(binding(name, ns, "ClusterRole", name, subs))
        return objects

    before = StaticRbac(build(base, "a"))
    after = StaticRbac(build(base, "a") + build(more, "b"))
    for attrs in (
        get_run(ns=request_ns),
        RequestAttributes(verb="list", resource="pods", namespace=request_ns),
        RequestAttributes(
            verb="patch",
            api_group="kruntimes.io",
            resource="runs",
            subresource="status",
            namespace=request_ns,
            name="r",
        ),
    ):
        if authorize(who, attrs, before).allowed:
            assert authorize(who, attrs, after).allowed
