"""The informer's per-event cache path, driven directly (no API server)."""

from __future__ import annotations

from typing import Any

import pytest

from krt.kube.informer import EventType, Informer, InformerEvent
from krt.kube.resources import PODS


def _obj(name: str, uid: str, rv: str, **labels: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": uid, "resourceVersion": rv}
    if labels:
        meta["labels"] = labels
    return {"metadata": meta}


def _informer() -> tuple[Informer, list[InformerEvent]]:
    informer = Informer(None, PODS, namespace="ns")  # type: ignore[arg-type] # never lists
    seen: list[InformerEvent] = []
    informer.add_handler(seen.append)
    informer.add_index("app", lambda obj: [obj["metadata"].get("labels", {}).get("app", "")])
    return informer, seen


def test_events_update_cache_uids_and_indexes() -> None:
    informer, seen = _informer()
    first = _obj("a", "u1", "1", app="x")
    informer._on_watch_event("ADDED", first)
    assert [(e.type, e.old) for e in seen] == [(EventType.ADDED, None)]
    assert informer.by_uid("u1") is first
    assert informer.by_index("app", "x") == [first]
    again = _obj("a", "u1", "1", app="x")  # the same version delivered again: no event
    informer._on_watch_event("MODIFIED", again)
    assert len(seen) == 1
    assert informer.get("ns", "a") is first
    second = _obj("a", "u1", "2", app="y")
    informer._on_watch_event("MODIFIED", second)
    assert (seen[-1].type, seen[-1].obj, seen[-1].old) == (EventType.MODIFIED, second, first)
    assert informer.by_uid("u1") is second
    assert informer.by_index("app", "x") == []
    assert informer.by_index("app", "y") == [second]
    assert informer.resource_version == "2"
    informer._on_watch_event("DELETED", _obj("a", "u1", "3"))
    assert (seen[-1].type, seen[-1].old) == (EventType.DELETED, second)
    assert informer.by_uid("u1") is None
    assert informer.by_index("app", "y") == []
    assert len(informer) == 0
    assert informer.resource_version == "3"


def test_new_uid_under_a_known_name_is_delete_then_add() -> None:
    informer, seen = _informer()
    old = _obj("a", "u1", "1", app="x")
    new = _obj("a", "u2", "1", app="x")  # same resourceVersion text: the UID decides
    informer._on_watch_event("ADDED", old)
    informer._on_watch_event("MODIFIED", new)
    assert [(e.type, e.obj) for e in seen[1:]] == [(EventType.DELETED, old), (EventType.ADDED, new)]
    assert informer.by_uid("u1") is None
    assert informer.by_uid("u2") is new
    assert informer.by_index("app", "x") == [new]


def test_bookmark_moves_only_the_resume_point_and_nameless_objects_are_refused() -> None:
    informer, seen = _informer()
    informer._on_watch_event("BOOKMARK", {"metadata": {"resourceVersion": "7"}})
    assert informer.resource_version == "7"
    assert not seen
    with pytest.raises(ValueError, match="no metadata.name"):
        informer._on_watch_event("ADDED", {"metadata": {"uid": "u", "resourceVersion": "8"}})
    assert len(informer) == 0
    assert informer.resource_version == "7"
