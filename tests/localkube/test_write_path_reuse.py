"""What the write path keeps between requests, and that keeping it never changes an answer.

* a CRD's schema is compiled once, when the CRD is written (or loaded at start-up), not
  again on its first custom object;
* RBAC grants per user and namespace are kept until a Role, ClusterRole or binding changes;
* a status write shares the unchanged parts of the stored object instead of copying them,
  and never changes the stored (old) object.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from localkube import admission as admission_module
from localkube import storage
from localkube.access import Access
from localkube.admission import Admission
from localkube.auth import rbac as rbac_module
from localkube.auth.types import RequestAttributes, UserInfo
from localkube.deletion import Deleter
from localkube.errors import ApiError
from localkube.handlers import Handlers, utc_now
from localkube.pki import ClusterPKI
from localkube.resources import ResourceRegistry, ResourceType

CRD_TYPE = ("apiextensions.k8s.io", "v1", "customresourcedefinitions")


def crd(rule: str = "self.size >= 0") -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "x-kubernetes-validations": [{"rule": rule}],
                                    "properties": {"size": {"type": "integer"}},
                                },
                                "status": {
                                    "type": "object",
                                    "properties": {"state": {"type": "string"}},
                                },
                            },
                        }
                    },
                }
            ],
        },
    }


def widget(name: str, size: int) -> dict[str, Any]:
    return {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": name},
        "spec": {"size": size},
    }


class Server:
    """The server's parts without HTTP."""

    def __init__(self, store: storage.Store | None = None) -> None:
        self.store = store or storage.open_store(None)
        self.registry = ResourceRegistry()
        self.admission = Admission(self.store, self.registry)
        deleter = Deleter(self.store, self.registry, clock=utc_now)
        deleter.admission = self.admission
        self.handlers = Handlers(self.store, self.registry, self.admission, deleter)
        self.admission.load_crds()
        if self.store.get("/namespaces", "", "default") is None:
            self.handlers.create(
                self.type("", "v1", "namespaces"), "", {"metadata": {"name": "default"}}
            )

    def type(self, group: str, version: str, plural: str) -> ResourceType:
        rt = self.registry.lookup(group, version, plural)
        assert rt is not None
        return rt


@pytest.fixture
def compiles(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    built: list[dict[str, Any]] = []
    original = admission_module._build_validator

    def counting(schema: dict[str, Any]) -> Any:
        built.append(schema)
        return original(schema)

    monkeypatch.setattr(admission_module, "_build_validator", counting)
    return built


def test_crd_schema_is_compiled_once(compiles: list[dict[str, Any]]) -> None:
    server = Server()
    server.handlers.create(server.type(*CRD_TYPE), "", crd("self.size < 10"))
    assert len(compiles) == 1
    widgets = server.type("example.com", "v1", "widgets")
    server.handlers.create(widgets, "default", widget("a", 1))
    with pytest.raises(ApiError) as rejected:
        server.handlers.create(widgets, "default", widget("b", 11))
    assert rejected.value.code == 422
    assert len(compiles) == 1
    # a restart compiles each stored CRD once, at load
    restarted = Server(server.store)
    assert len(compiles) == 2
    restarted.handlers.create(widgets, "default", widget("c", 2))
    assert len(compiles) == 2


def test_validator_of_a_write_that_was_not_stored_is_not_used(
    compiles: list[dict[str, Any]],
) -> None:
    server = Server()
    crds = server.type(*CRD_TYPE)
    stored = server.handlers.create(crds, "", crd("self.size < 10"))
    # a dry run compiles the stricter schema but stores nothing ...
    stricter = copy.deepcopy(stored)
    stricter["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "x-kubernetes-validations"
    ] = [{"rule": "self.size < 5"}]
    server.handlers.update(crds, "", "widgets.example.com", copy.deepcopy(stricter), dry_run=True)
    # ... so a later status write of the CRD (its stored spec) must not serve it
    current = server.store.get(
        "apiextensions.k8s.io/customresourcedefinitions", "", stored["metadata"]["name"]
    )
    assert current is not None
    server.handlers.update(
        crds, "", "widgets.example.com", copy.deepcopy(current), subresource="status"
    )
    widgets = server.type("example.com", "v1", "widgets")
    server.handlers.create(widgets, "default", widget("a", 7))  # allowed by the stored rule
    # a real update serves the new rule
    current = server.store.get(
        "apiextensions.k8s.io/customresourcedefinitions", "", stored["metadata"]["name"]
    )
    assert current is not None
    stricter["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
    server.handlers.update(crds, "", "widgets.example.com", stricter)
    with pytest.raises(ApiError) as rejected:
        server.handlers.create(widgets, "default", widget("b", 7))
    assert rejected.value.code == 422


def test_status_write_shares_unchanged_parts_and_keeps_the_old_object() -> None:
    server = Server()
    server.handlers.create(server.type(*CRD_TYPE), "", crd())
    widgets = server.type("example.com", "v1", "widgets")
    created = server.handlers.create(widgets, "default", widget("a", 1))
    old = server.store.get(widgets.storage_key, "default", "a")
    assert old is not None
    snapshot = copy.deepcopy(old)
    body = {**copy.deepcopy(created), "spec": {"size": 2}, "status": {"state": "ready"}}
    updated = server.handlers.update(widgets, "default", "a", body, subresource="status")
    assert updated["spec"] == {"size": 1}  # the status subresource ignores spec
    assert updated["status"] == {"state": "ready"}
    assert updated["metadata"]["resourceVersion"] != snapshot["metadata"]["resourceVersion"]
    assert old == snapshot  # the stored old state (history, watch events) is unchanged


def user(name: str) -> UserInfo:
    return UserInfo(name, ("system:authenticated",))


def rbac_object(kind: str, name: str, **body: Any) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": "default"},
        **body,
    }


def test_rbac_grants_are_kept_until_rbac_objects_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = Server()
    access = Access(server.store, ClusterPKI.create(None, ["127.0.0.1"]).authenticator)
    lookups: list[str] = []
    original = access.rbac.role_bindings

    def counting(namespace: str) -> list[dict[str, Any]]:
        lookups.append(namespace)
        return original(namespace)

    monkeypatch.setattr(access.rbac, "role_bindings", counting)

    def get(name: str) -> RequestAttributes:
        return RequestAttributes(verb="get", resource="configmaps", namespace="default", name=name)

    alice = user("alice")
    assert not access.authorize(alice, get("x")).allowed
    roles = server.type("rbac.authorization.k8s.io", "v1", "roles")
    bindings = server.type("rbac.authorization.k8s.io", "v1", "rolebindings")
    rule = {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}
    role = server.handlers.create(roles, "default", rbac_object("Role", "reader", rules=[rule]))
    server.handlers.create(
        bindings,
        "default",
        rbac_object(
            "RoleBinding",
            "alice-reads",
            roleRef={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
            subjects=[{"kind": "User", "name": "alice"}],
        ),
    )
    lookups.clear()
    decision = access.authorize(alice, get("x"))
    assert decision.allowed
    assert "alice-reads" in decision.reason
    assert access.authorize(alice, get("y")).allowed  # another name: same grants
    assert not access.authorize(user("bob"), get("x")).allowed
    assert lookups == ["default", "default"]  # once for alice, once for bob
    # a Role change takes effect on the next request
    narrower = {**copy.deepcopy(role), "rules": [{**rule, "resourceNames": ["y"]}]}
    server.handlers.update(roles, "default", "reader", narrower)
    assert not access.authorize(alice, get("x")).allowed
    assert access.authorize(alice, get("y")).allowed


def test_rbac_decisions_are_kept_per_verb_and_resource_not_per_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = Server()
    access = Access(server.store, ClusterPKI.create(None, ["127.0.0.1"]).authenticator)
    roles = server.type("rbac.authorization.k8s.io", "v1", "roles")
    bindings = server.type("rbac.authorization.k8s.io", "v1", "rolebindings")
    rule = {"apiGroups": [""], "resources": ["configmaps/status"], "verbs": ["update"]}
    server.handlers.create(roles, "default", rbac_object("Role", "writer", rules=[rule]))
    server.handlers.create(
        bindings,
        "default",
        rbac_object(
            "RoleBinding",
            "alice-writes",
            roleRef={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "writer"},
            subjects=[{"kind": "User", "name": "alice"}],
        ),
    )
    decided: list[RequestAttributes] = []
    original = rbac_module.decide

    def counting(grants: rbac_module.UserGrants, attrs: RequestAttributes) -> Any:
        decided.append(attrs)
        return original(grants, attrs)

    monkeypatch.setattr(rbac_module, "decide", counting)

    def attrs(verb: str, name: str, subresource: str = "status") -> RequestAttributes:
        return RequestAttributes(
            verb=verb,
            resource="configmaps",
            subresource=subresource,
            namespace="default",
            name=name,
        )

    alice = user("alice")
    assert all(access.authorize(alice, attrs("update", f"run-{n}")).allowed for n in range(5))
    assert len(decided) == 1  # one decision for every name
    assert not access.authorize(alice, attrs("patch", "run-0")).allowed
    assert not access.authorize(alice, attrs("update", "run-0", subresource="")).allowed
    assert not access.authorize(user("bob"), attrs("update", "run-0")).allowed
    assert len(decided) == 4
