"""The resource registry: version priority and CRD-derived types."""

from __future__ import annotations

import pytest

from localkube.resources import CRDError, ResourceRegistry, types_from_crd, version_priority


def test_version_priority_order() -> None:
    versions = ["v1alpha1", "foo", "v1", "v2beta1", "v1beta2", "v2", "v10", "v11alpha2"]
    assert sorted(versions, key=version_priority) == [
        "v10",
        "v2",
        "v1",
        "v2beta1",
        "v1beta2",
        "v11alpha2",
        "v1alpha1",
        "foo",
    ]


def _crd(**spec: object) -> dict[str, object]:
    base: dict[str, object] = {
        "group": "example.com",
        "scope": "Namespaced",
        "names": {"plural": "things", "kind": "Thing"},
        "versions": [{"name": "v1", "served": True, "storage": True}],
    }
    base.update(spec)
    return {"metadata": {"name": "things.example.com"}, "spec": base}


def test_types_from_crd() -> None:
    (rt,) = types_from_crd(_crd())
    assert (rt.group, rt.version, rt.plural, rt.kind, rt.singular) == (
        "example.com",
        "v1",
        "things",
        "Thing",
        "thing",
    )
    assert rt.namespaced
    assert rt.crd_name == "things.example.com"
    assert not rt.strategic_merge


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"group": ""}, "spec.group"),
        ({"scope": "Galaxy"}, "spec.scope"),
        ({"versions": []}, "spec.versions"),
        ({"versions": [{"name": "v1", "served": True, "storage": False}]}, "spec.versions"),
        ({"names": {"plural": "things"}}, "spec.names.kind"),
    ],
)
def test_bad_crds_name_the_field(spec: dict[str, object], field: str) -> None:
    with pytest.raises(CRDError) as error:
        types_from_crd(_crd(**spec))
    assert error.value.field == field


def test_registry_serves_and_forgets_crd_kinds() -> None:
    registry = ResourceRegistry()
    registry.set_crd(_crd())
    assert registry.lookup("example.com", "v1", "things") is not None
    registry.remove_crd("things.example.com")
    assert registry.lookup("example.com", "v1", "things") is None
    assert registry.lookup("", "v1", "pods") is not None


def test_event_conversion_round_trips() -> None:
    from localkube.conversion import to_storage, to_view

    registry = ResourceRegistry()
    new_api = registry.lookup("events.k8s.io", "v1", "events")
    core_api = registry.lookup("", "v1", "events")
    assert new_api is not None
    assert core_api is not None
    assert new_api.storage_key == core_api.storage_key == "/events"
    stored = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "e"},
        "involvedObject": {"name": "p"},
        "message": "m",
        "count": 3,
        "reason": "R",
    }
    view = to_view(new_api, stored)
    assert view["regarding"] == {"name": "p"}
    assert view["note"] == "m"
    assert view["deprecatedCount"] == 3
    assert to_storage(new_api, view) == stored
    assert to_view(core_api, stored) is stored
