"""Label and field selectors (issue 3, "list and watch": every selector operator)."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from localkube.selectors import (
    SelectorError,
    label_selector_from_dict,
    parse_field_selector,
    parse_label_selector,
)

LABELS = {"app": "web", "tier": "front", "canary": "true"}


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        ("", True),
        ("app=web", True),
        ("app==web", True),
        ("app=db", False),
        ("app!=db", True),
        ("app!=web", False),
        ("missing!=x", True),
        ("tier in (front,back)", True),
        ("tier in (back)", False),
        ("tier notin (back)", True),
        ("tier notin (front)", False),
        ("missing notin (a)", True),
        ("canary", True),
        ("missing", False),
        ("!missing", True),
        ("!canary", False),
        ("app=web,tier in (front),!missing", True),
        ("app=web,tier in (back)", False),
        ("example.com/role", False),
    ],
)
def test_label_selector_operators(selector: str, matches: bool) -> None:
    assert parse_label_selector(selector).matches(LABELS) is matches


def test_label_selector_on_object_without_labels() -> None:
    assert parse_label_selector("!app").matches(None)
    assert not parse_label_selector("app").matches(None)


@pytest.mark.parametrize(
    "bad", ["app in (a", "app)", "Bad Key=x", "app=in valid", "app in ()", "-app=x", "a/b/c=x"]
)
def test_label_selector_rejects_malformed(bad: str) -> None:
    with pytest.raises(SelectorError):
        parse_label_selector(bad)


def test_label_selector_from_match_expressions() -> None:
    sel = label_selector_from_dict(
        {
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["front"]},
                {"key": "gone", "operator": "DoesNotExist"},
            ],
        }
    )
    assert sel.matches(LABELS)
    assert not sel.matches({"app": "web", "tier": "back"})
    with pytest.raises(SelectorError, match="Maybe"):
        label_selector_from_dict({"matchExpressions": [{"key": "a", "operator": "Maybe"}]})


POD = {
    "metadata": {"name": "p", "namespace": "ns"},
    "spec": {"nodeName": "n1"},
    "status": {"phase": "Running"},
}
FIELDS = frozenset({"metadata.name", "metadata.namespace", "spec.nodeName", "status.phase"})


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        ("metadata.name=p", True),
        ("metadata.name==q", False),
        ("metadata.namespace!=ns", False),
        ("spec.nodeName=n1,status.phase=Running", True),
        ("status.phase!=Pending", True),
        ("spec.nodeName=", False),
    ],
)
def test_field_selector(selector: str, matches: bool) -> None:
    assert parse_field_selector(selector, FIELDS).matches(POD) is matches


def test_field_selector_unsupported_field_names_it() -> None:
    with pytest.raises(SelectorError, match="^field label not supported: spec.foo$"):
        parse_field_selector("spec.foo=x", FIELDS)


def test_field_selector_without_operator() -> None:
    with pytest.raises(SelectorError, match="can't understand"):
        parse_field_selector("metadata.name", FIELDS)


def test_field_selector_reads_any_mapping_and_stops_at_a_non_object() -> None:
    selector = parse_field_selector("spec.nodeName=n1", FIELDS)
    assert selector.matches(MappingProxyType({"spec": MappingProxyType({"nodeName": "n1"})}))
    assert not selector.matches({"spec": "n1"})
    assert not selector.matches({"spec": ["nodeName"]})
    # a missing field reads as "": it satisfies "!=" of any non-empty value
    assert parse_field_selector("spec.nodeName!=n1", FIELDS).matches({"spec": None})


def test_a_conjunction_fails_on_any_unmet_requirement() -> None:
    assert not parse_field_selector("spec.nodeName=n1,status.phase=Pending", FIELDS).matches(POD)
    assert not parse_field_selector("spec.nodeName=n2,status.phase=Running", FIELDS).matches(POD)
    assert not parse_label_selector("app=web,tier=back").matches(LABELS)
    assert parse_label_selector("").matches(None)


@pytest.mark.parametrize(
    ("selector", "value"),
    [
        (r"metadata.name=a\,b", "a,b"),
        (r"metadata.name=a\=b", "a=b"),
        (r"metadata.name=a\\b", "a\\b"),
        (r"metadata.name=a\\", "a\\"),
    ],
)
def test_field_selector_values_unescape_as_kubernetes_does(selector: str, value: str) -> None:
    (requirement,) = parse_field_selector(selector, FIELDS).requirements
    assert requirement.value == value
    assert parse_field_selector(selector, FIELDS).matches({"metadata": {"name": value}})


def test_an_escaped_comma_does_not_split_requirements() -> None:
    selector = parse_field_selector(r"metadata.name=a\,b,status.phase=Running", FIELDS)
    assert [(r.field, r.value) for r in selector.requirements] == [
        ("metadata.name", "a,b"),
        ("status.phase", "Running"),
    ]
    # empty terms are skipped, as Kubernetes' parser does
    assert len(parse_field_selector("status.phase=Running,", FIELDS).requirements) == 1


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        (r"metadata.name=a\b", r"invalid escape sequence: \\b"),
        ("metadata.name=a=b", "unescaped character in value: '='"),
        ("metadata.name=a\\", "invalid escape sequence"),
    ],
)
def test_field_selector_bad_escapes_are_refused(selector: str, message: str) -> None:
    with pytest.raises(SelectorError, match=message):
        parse_field_selector(selector, FIELDS)
