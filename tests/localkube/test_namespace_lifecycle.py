"""The namespace controller follows store events in batches (localkube.namespace_lifecycle)."""

from __future__ import annotations

import trio
import trio.testing

from localkube import namespace_lifecycle, storage
from localkube.deletion import Deleter
from localkube.handlers import utc_now
from localkube.namespace_lifecycle import CM_KEY, NS_KEY, SA_KEY, NamespaceLifecycle
from localkube.resources import ResourceRegistry


class CountingLifecycle(NamespaceLifecycle):
    def __init__(self, store: storage.Store) -> None:
        registry = ResourceRegistry()
        super().__init__(
            store, registry, Deleter(store, registry, clock=utc_now), ca_pem=b"", clock=utc_now
        )
        self.reconciled: list[str] = []

    def reconcile(self, namespace: str) -> None:
        self.reconciled.append(namespace)
        super().reconcile(namespace)


def configmap(namespace: str, name: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
    }


async def test_a_burst_of_writes_reconciles_each_namespace_once_in_order() -> None:
    store = storage.open_store(None)
    lifecycle = CountingLifecycle(store)
    async with trio.open_nursery() as nursery:
        await nursery.start(lifecycle.run)
        await trio.testing.wait_all_tasks_blocked()
        lifecycle.reconciled.clear()
        # one scheduling turn: the controller sees all five events at once
        for i in range(3):
            store.create((CM_KEY, "a", f"cm-{i}"), configmap("a", f"cm-{i}"))
        store.create((SA_KEY, "b", "sa"), {"metadata": {"name": "sa"}})
        store.create((CM_KEY, "a", "cm-last"), configmap("a", "cm-last"))
        await trio.testing.wait_all_tasks_blocked()
        assert lifecycle.reconciled == ["a", "b"]
        # a new namespace: reconciled, which creates its ServiceAccount and ConfigMap in one
        # go; those two events come back as one batch: one more reconcile, not two
        store.create((NS_KEY, "", "c"), {"metadata": {"name": "c"}})
        await trio.testing.wait_all_tasks_blocked()
        assert lifecycle.reconciled[2:] == ["c", "c"]
        assert store.get(SA_KEY, "c", "default") is not None
        assert store.get(CM_KEY, "c", "kube-root-ca.crt") is not None
        nursery.cancel_scope.cancel()


def test_controller_is_woken_only_by_writes_it_acts_on() -> None:
    def event(kind: str, rkey: str, namespace: str) -> storage.StoredEvent:
        return storage.StoredEvent(kind, (rkey, namespace, "x"), 1, {"metadata": {}}, None)

    concerns = namespace_lifecycle._concerns_namespaces
    assert concerns(event("MODIFIED", NS_KEY, ""))
    assert concerns(event("DELETED", NS_KEY, ""))
    assert concerns(event("MODIFIED", SA_KEY, "ns"))
    assert concerns(event("ADDED", CM_KEY, "ns"))
    assert concerns(event("DELETED", "kruntimes.io/runs", "ns"))  # may empty a namespace
    assert not concerns(event("MODIFIED", "kruntimes.io/runs", "ns"))  # a status write
    assert not concerns(event("ADDED", "/pods", "ns"))
    assert not concerns(event("DELETED", "/nodes", ""))  # cluster-scoped
