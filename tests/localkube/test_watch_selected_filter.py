"""The store-side filter of selector-filtered watches agrees with :func:`transition`.

``_SelectedEvents`` decides, in the writer's task, which event type (ADDED, MODIFIED,
DELETED or none) a watch with a selector sees; it unwraps a lone field requirement into a
direct call. Whatever the selector's shape, its answers must be those of
``transition(event, options)`` for objects that start, keep, stop and never match.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from localkube import storage
from localkube.handlers import ListOptions
from localkube.selectors import parse_field_selector, parse_label_selector
from localkube.watching import _SelectedEvents, transition

FIELDS = frozenset({"metadata.name", "metadata.namespace", "status.assignedPodUID"})


def run(uid: str | None, label: str | None) -> dict[str, Any]:
    obj: dict[str, Any] = {"metadata": {"name": "r", "namespace": "demo"}, "status": {}}
    if uid is not None:
        obj["status"]["assignedPodUID"] = uid
    if label is not None:
        obj["metadata"]["labels"] = {"app": label}
    return obj


STATES = [run(None, None), run("a", None), run("b", None), run("a", "web"), run("b", "web")]
SELECTORS = [
    ("status.assignedPodUID=a", ""),
    ("status.assignedPodUID!=a", ""),
    ("status.assignedPodUID=a,metadata.name=r", ""),
    ("status.assignedPodUID=a", "app=web"),
    ("", "app=web"),
]


@pytest.mark.parametrize(("fields", "labels"), SELECTORS)
def test_filter_answers_as_transition(fields: str, labels: str) -> None:
    options = ListOptions(
        labels=parse_label_selector(labels), fields=parse_field_selector(fields, FIELDS)
    )
    revision = itertools.count(1)
    events = [
        storage.StoredEvent("ADDED", ("k", "demo", "r"), next(revision), s, None) for s in STATES
    ]
    events += [
        storage.StoredEvent(kind, ("k", "demo", "r"), next(revision), new, old)
        for kind in ("MODIFIED", "DELETED")
        for old, new in itertools.product(STATES, STATES)
    ]
    selected = _SelectedEvents(options)
    answers = []
    for event in events:
        kept = selected(event)
        expected = transition(event, options)
        assert kept == (expected is not None)
        answers.append(selected.kind(event) if kept else None)
        assert answers[-1] == expected
    assert {"ADDED", "MODIFIED", "DELETED", None} <= set(answers)
