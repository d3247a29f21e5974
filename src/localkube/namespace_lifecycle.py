"""Namespace lifecycle: default contents of a new namespace, emptying a terminating one.

Kubernetes' namespace and ServiceAccount controllers, reduced to what localkube needs:

* every active namespace has a ``default`` ServiceAccount and a ``kube-root-ca.crt``
  ConfigMap holding the cluster CA (recreated if deleted);
* a namespace with ``deletionTimestamp`` (phase ``Terminating``) has every object in it
  deleted (finalizers on those objects are honoured); once it is empty its ``kubernetes``
  spec finalizer is dropped and, with no metadata finalizers left, the namespace goes.

Runs as one store subscriber; see :meth:`NamespaceLifecycle.run`.
"""

from __future__ import annotations

import copy
import logging
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

import trio

from localkube import objects, storage
from localkube.deletion import DeleteOptions, Deleter
from localkube.errors import ApiError
from localkube.resources import ResourceRegistry

log = logging.getLogger("localkube.namespaces")

NS_KEY = "/namespaces"
SA_KEY = "/serviceaccounts"
CM_KEY = "/configmaps"
ROOT_CA = "kube-root-ca.crt"


def _concerns_namespaces(event: storage.StoredEvent) -> bool:
    """Whether the namespace controller acts on ``event``.

    Namespaces themselves; the default ServiceAccount and ConfigMap it keeps in each
    namespace; and any deletion in a namespace (a terminating namespace finishes once it is
    empty). Other writes (a Run's status, a Pod's) do not wake it.
    """
    rkey, namespace, _ = event.key
    return rkey == NS_KEY or (
        bool(namespace) and (event.type == "DELETED" or rkey in (SA_KEY, CM_KEY))
    )


class NamespaceLifecycle:
    """The namespace controller.

    Args:
        store: the object store. registry: served types. deleter: deletion rules.
        ca_pem: the cluster CA (PEM) published as ``kube-root-ca.crt``.
        clock: wall-clock source.
    """

    def __init__(
        self,
        store: storage.Store,
        registry: ResourceRegistry,
        deleter: Deleter,
        *,
        ca_pem: bytes,
        clock: Callable[[], datetime],
    ) -> None:
        self.store = store
        self.registry = registry
        self.deleter = deleter
        self.ca_pem = ca_pem
        self.clock = clock

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Reconcile every namespace, then follow store events.

        Re-reconciles everything if it falls too far behind the store's events. Never
        returns unless cancelled.
        """
        started = False
        while True:
            with self.store.subscribe(None, accept=_concerns_namespaces) as (_, channel):
                for ns in self.store.list(NS_KEY):
                    self._safe(ns["metadata"]["name"])
                if not started:
                    task_status.started()
                    started = True
                while True:
                    try:
                        batch = await storage.receive_batch(channel)
                    except trio.EndOfChannel:
                        break
                    # a burst of writes in one namespace reconciles it once
                    touched: dict[str, None] = {}
                    for event in batch:
                        rkey, namespace, name = event.key
                        if rkey == NS_KEY:
                            if event.type != "DELETED":
                                touched[name] = None
                        elif namespace:
                            touched[namespace] = None
                    for namespace in touched:
                        self._safe(namespace)
            log.warning("namespace controller fell behind the store; reconciling everything")

    def _safe(self, namespace: str) -> None:
        try:
            self.reconcile(namespace)
        except (ApiError, storage.StoreError) as exc:
            log.warning("namespace %s: %s", namespace, exc)
        except Exception:
            log.exception("namespace %s", namespace)

    def reconcile(self, namespace: str) -> None:
        """Bring one namespace to its desired state (synchronous)."""
        ns = self.store.get(NS_KEY, "", namespace)
        if ns is None:
            return
        if objects.is_deleting(ns):
            self._terminate(ns)
        else:
            self._ensure_defaults(namespace)

    def _create(self, key: storage.ObjectKey, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        meta.update(
            {
                "uid": str(uuid.uuid4()),
                "creationTimestamp": objects.now_rfc3339(self.clock()),
            }
        )
        self.store.create(key, obj)

    def _ensure_defaults(self, namespace: str) -> None:
        if self.store.get(SA_KEY, namespace, "default") is None:
            self._create(
                (SA_KEY, namespace, "default"),
                {
                    "apiVersion": "v1",
                    "kind": "ServiceAccount",
                    "metadata": {"name": "default", "namespace": namespace},
                },
            )
        if self.store.get(CM_KEY, namespace, ROOT_CA) is None:
            self._create(
                (CM_KEY, namespace, ROOT_CA),
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {
                        "name": ROOT_CA,
                        "namespace": namespace,
                        "annotations": {
                            "kubernetes.io/description": "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters."
                        },
                    },
                    "data": {"ca.crt": self.ca_pem.decode()},
                },
            )

    def _terminate(self, ns: dict[str, Any]) -> None:
        namespace = ns["metadata"]["name"]
        remaining = self.store.namespaces_in_use().get(namespace, [])
        for rkey in remaining:
            types = self.registry.by_storage_key(rkey)
            for obj in self.store.list(rkey, namespace):
                if objects.is_deleting(obj) or not types:
                    if not types:
                        self.store.delete((rkey, namespace, obj["metadata"]["name"]))
                    continue
                try:
                    self.deleter.delete(
                        types[0], namespace, obj["metadata"]["name"], DeleteOptions()
                    )
                except ApiError as exc:
                    if exc.code != 404:
                        raise
        if self.store.namespaces_in_use().get(namespace):
            return
        current = self.store.get(NS_KEY, "", namespace)
        if current is None:
            return
        updated = copy.deepcopy(current)
        updated.setdefault("spec", {})["finalizers"] = [
            f for f in (updated.get("spec") or {}).get("finalizers") or [] if f != "kubernetes"
        ]
        if not updated["spec"]["finalizers"]:
            del updated["spec"]["finalizers"]
        if objects.finalizers_of(updated):
            if updated != current:
                self.store.update((NS_KEY, "", namespace), updated)
            return
        self.store.delete((NS_KEY, "", namespace), final=updated)
