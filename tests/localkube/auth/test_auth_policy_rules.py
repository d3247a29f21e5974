"""Per-rule RBAC matching (localkube.auth.policy_rules), table-driven plus properties."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from localkube.auth.policy_rules import rule_allows
from localkube.auth.types import RequestAttributes


def res(
    verb: str, resource: str, *, group: str = "", sub: str = "", name: str = "", ns: str = "ns"
) -> RequestAttributes:
    return RequestAttributes(
        verb=verb, api_group=group, resource=resource, subresource=sub, name=name, namespace=ns
    )


def url(verb: str, path: str) -> RequestAttributes:
    return RequestAttributes(verb=verb, resource_request=False, path=path)


RUNS = {"apiGroups": ["kruntimes.io"], "resources": ["runs"], "verbs": ["get", "list"]}

CASES: list[tuple[str, dict[str, Any], RequestAttributes, bool]] = [
    ("exact verb/group/resource", RUNS, res("get", "runs", group="kruntimes.io", name="x"), True),
    ("other verb", RUNS, res("delete", "runs", group="kruntimes.io", name="x"), False),
    ("other group", RUNS, res("get", "runs", group="other.io"), False),
    ("core group is not any group", RUNS, res("get", "runs"), False),
    ("other resource", RUNS, res("get", "pods", group="kruntimes.io"), False),
    (
        "main resource rule does not cover subresource",
        RUNS,
        res("get", "runs", group="kruntimes.io", sub="status"),
        False,
    ),
    ("verb wildcard", {**RUNS, "verbs": ["*"]}, res("patch", "runs", group="kruntimes.io"), True),
    ("group wildcard", {**RUNS, "apiGroups": ["*"]}, res("get", "runs", group="x.io"), True),
    (
        "resource wildcard covers subresources",
        {**RUNS, "resources": ["*"]},
        res("get", "runs", group="kruntimes.io", sub="status"),
        True,
    ),
    (
        "resource/subresource",
        {**RUNS, "resources": ["runs/status"]},
        res("get", "runs", group="kruntimes.io", sub="status"),
        True,
    ),
    (
        "resource/subresource does not cover main",
        {**RUNS, "resources": ["runs/status"]},
        res("get", "runs", group="kruntimes.io"),
        False,
    ),
    (
        "resource/subresource other sub",
        {**RUNS, "resources": ["runs/status"]},
        res("get", "runs", group="kruntimes.io", sub="scale"),
        False,
    ),
    (
        "*/subresource",
        {**RUNS, "resources": ["*/status"]},
        res("get", "pods", group="kruntimes.io", sub="status"),
        True,
    ),
    (
        "*/subresource does not cover main",
        {**RUNS, "resources": ["*/status"]},
        res("get", "status", group="kruntimes.io"),
        False,
    ),
    (
        "*/subresource other sub",
        {**RUNS, "resources": ["*/status"]},
        res("get", "pods", group="kruntimes.io", sub="log"),
        False,
    ),
    (
        "resourceNames match",
        {**RUNS, "resourceNames": ["x"]},
        res("get", "runs", group="kruntimes.io", name="x"),
        True,
    ),
    (
        "resourceNames other name",
        {**RUNS, "resourceNames": ["x"]},
        res("get", "runs", group="kruntimes.io", name="y"),
        False,
    ),
    (
        "resourceNames never match a collection list",
        {**RUNS, "resourceNames": ["x"]},
        res("list", "runs", group="kruntimes.io"),
        False,
    ),
    (
        "resourceNames never match create without name",
        {**RUNS, "verbs": ["create"], "resourceNames": ["x"]},
        res("create", "runs", group="kruntimes.io"),
        False,
    ),
    (
        "empty resourceNames allow all",
        {**RUNS, "resourceNames": []},
        res("list", "runs", group="kruntimes.io"),
        True,
    ),
    (
        "resource rule never matches non-resource URL",
        {**RUNS, "resources": ["*"], "apiGroups": ["*"], "verbs": ["*"]},
        url("get", "/version"),
        False,
    ),
    (
        "nonResourceURL exact",
        {"nonResourceURLs": ["/version"], "verbs": ["get"]},
        url("get", "/version"),
        True,
    ),
    (
        "nonResourceURL exact other",
        {"nonResourceURLs": ["/version"], "verbs": ["get"]},
        url("get", "/version/"),
        False,
    ),
    (
        "nonResourceURL verb",
        {"nonResourceURLs": ["/version"], "verbs": ["get"]},
        url("post", "/version"),
        False,
    ),
    (
        "nonResourceURL prefix*",
        {"nonResourceURLs": ["/apis/*"], "verbs": ["get"]},
        url("get", "/apis/apps/v1"),
        True,
    ),
    (
        "nonResourceURL prefix* needs prefix",
        {"nonResourceURLs": ["/apis/*"], "verbs": ["get"]},
        url("get", "/apis"),
        False,
    ),
    (
        "nonResourceURL *",
        {"nonResourceURLs": ["*"], "verbs": ["*"]},
        url("delete", "/anything"),
        True,
    ),
    (
        "URL rule never matches resources",
        {"nonResourceURLs": ["*"], "verbs": ["*"]},
        res("get", "pods"),
        False,
    ),
    (
        "no verbs matches nothing",
        {"apiGroups": ["*"], "resources": ["*"]},
        res("get", "pods"),
        False,
    ),
    (
        "malformed fields match nothing",
        {"apiGroups": "*", "resources": ["*"], "verbs": ["*"]},
        res("get", "pods"),
        False,
    ),
]


@pytest.mark.parametrize(
    ("rule", "attrs", "allowed"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_rule_allows(rule: dict[str, Any], attrs: RequestAttributes, allowed: bool) -> None:
    assert rule_allows(rule, attrs) is allowed


names = st.sampled_from(["", "a", "b", "pods", "runs", "status", "x.io"])
verbs = st.sampled_from(["get", "list", "watch", "create", "update", "patch", "delete"])


@st.composite
def requests(draw: st.DrawFn) -> RequestAttributes:
    return RequestAttributes(
        verb=draw(verbs),
        api_group=draw(st.sampled_from(["", "apps", "kruntimes.io"])),
        resource=draw(st.sampled_from(["pods", "runs", "secrets"])),
        subresource=draw(st.sampled_from(["", "status", "log"])),
        name=draw(names),
        namespace="ns",
    )


@st.composite
def rules(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "verbs": draw(st.lists(verbs, min_size=1, max_size=3)),
        "apiGroups": draw(
            st.lists(st.sampled_from(["", "apps", "kruntimes.io"]), min_size=1, max_size=2)
        ),
        "resources": draw(
            st.lists(
                st.sampled_from(["pods", "runs", "secrets", "pods/status", "runs/status", "*/log"]),
                min_size=1,
                max_size=3,
            )
        ),
        "resourceNames": draw(st.lists(st.sampled_from(["a", "b"]), max_size=2)),
    }


@given(rules(), requests(), st.sampled_from(["verbs", "apiGroups", "resources"]))
def test_wildcard_allows_whatever_the_specific_rule_allows(
    rule: dict[str, Any], attrs: RequestAttributes, field: str
) -> None:
    widened = {**rule, field: ["*"]}
    if rule_allows(rule, attrs):
        assert rule_allows(widened, attrs)


@given(rules(), requests())
def test_wildcard_rule_matches_exactly_the_expansion(
    rule: dict[str, Any], attrs: RequestAttributes
) -> None:
    """A ``*`` rule allows a request iff the rule with that request's value spelled out does."""
    combined = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
    wild = {
        "verbs": ["*"],
        "apiGroups": ["*"],
        "resources": ["*"],
        "resourceNames": rule["resourceNames"],
    }
    spelled = {
        "verbs": [attrs.verb],
        "apiGroups": [attrs.api_group],
        "resources": [combined],
        "resourceNames": rule["resourceNames"],
    }
    assert rule_allows(wild, attrs) == rule_allows(spelled, attrs)


@given(rules(), requests())
def test_adding_resource_names_only_narrows(rule: dict[str, Any], attrs: RequestAttributes) -> None:
    narrowed = {**rule, "resourceNames": ["a"]}
    if rule_allows(narrowed, attrs):
        assert rule_allows({**rule, "resourceNames": []}, attrs)
        assert attrs.name == "a"
