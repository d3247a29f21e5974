"""The namespace controller follows store events in batches (localkube.namespace_lifecycle)."""

from __future__ import annotations

import trio
import trio.testing

from localkube import storage
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
