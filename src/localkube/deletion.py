"""DELETE semantics: preconditions, propagation policy, finalizers and Pod grace periods.

Rules (issue 3, "Verbs" and "Finalizers and deletionTimestamp"; Kubernetes "Garbage
Collection" and "Finalizers"):

* Preconditions on ``uid`` and ``resourceVersion`` fail with 409 Conflict.
* ``propagationPolicy``: ``Background`` (default) deletes now and lets the garbage
  collector remove dependents; ``Foreground`` adds the ``foregroundDeletion`` finalizer and
  ``Orphan`` the ``orphan`` finalizer, both handled by :mod:`localkube.gc`.
* An object with finalizers gets ``deletionTimestamp`` and stays; it goes when an update
  removes the last finalizer (:meth:`Deleter.finalized`).
* A Pod bound to a node (``spec.nodeName``) with a grace period above zero gets
  ``deletionTimestamp`` = now + grace and ``deletionGracePeriodSeconds`` and stays until
  the node deletes it with grace 0; an unbound Pod is deleted at once, as in Kubernetes.
* A Namespace becomes ``Terminating``; :mod:`localkube.namespace_lifecycle` empties it.
* Deleting a CustomResourceDefinition that still has objects gives it the
  ``customresourcecleanup.apiextensions.k8s.io`` finalizer and a ``Terminating``
  condition, deletes every object (honouring their finalizers; creates are refused
  meanwhile, see :func:`crd_terminating_error`), and removes the CRD, which stops being
  served, once the last object is gone.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from localkube import objects, storage
from localkube.errors import ApiError
from localkube.resources import ResourceRegistry, ResourceType

if TYPE_CHECKING:
    from localkube.admission import Admission

FOREGROUND = "foregroundDeletion"
ORPHAN = "orphan"
NAMESPACE_FINALIZER = "kubernetes"
CRD_CLEANUP = "customresourcecleanup.apiextensions.k8s.io"
CRD_KEY = "apiextensions.k8s.io/customresourcedefinitions"
_POLICIES = ("Background", "Foreground", "Orphan")


@dataclass(frozen=True)
class DeleteOptions:
    """A parsed ``DeleteOptions``.

    Attributes:
        propagation: ``Background``, ``Foreground`` or ``Orphan``.
        grace_period: seconds, None for the object's default.
        uid, resource_version: preconditions ("" for none).
        dry_run: validate only.
    """

    propagation: str = "Background"
    grace_period: int | None = None
    uid: str = ""
    resource_version: str = ""
    dry_run: bool = False

    @classmethod
    def parse(cls, query: dict[str, str], body: Any) -> DeleteOptions:
        """Merge query parameters and a ``DeleteOptions`` body (the body wins).

        Raises:
            ApiError: 400 for an unknown propagationPolicy or a non-integer grace period.
        """
        data: dict[str, Any] = {}
        for name in ("propagationPolicy", "gracePeriodSeconds", "orphanDependents", "dryRun"):
            if name in query:
                data[name] = query[name]
        if isinstance(body, dict):
            data.update({k: v for k, v in body.items() if v is not None})
        policy = data.get("propagationPolicy")
        orphan = data.get("orphanDependents")
        if policy is None:
            policy = "Orphan" if orphan in (True, "true") else "Background"
        if policy not in _POLICIES:
            raise ApiError(
                400,
                "BadRequest",
                f'propagationPolicy: Unsupported value: "{policy}": supported values: "Background", "Foreground", "Orphan"',
            )
        grace: int | None = None
        if data.get("gracePeriodSeconds") is not None:
            try:
                grace = int(data["gracePeriodSeconds"])
            except (TypeError, ValueError):
                raise ApiError(400, "BadRequest", "gracePeriodSeconds must be an integer") from None
        pre = data.get("preconditions") or {}
        dry = data.get("dryRun")
        return cls(
            propagation=policy,
            grace_period=grace,
            uid=str(pre.get("uid") or ""),
            resource_version=str(pre.get("resourceVersion") or ""),
            dry_run=bool(dry) and dry != [] and dry != "",
        )


class Deleter:
    """Carries out deletions for the REST layer, the garbage collector and controllers.

    Args:
        store: the object store. registry: served types.
        clock: wall-clock source for deletionTimestamp.
    """

    def __init__(
        self,
        store: storage.Store,
        registry: ResourceRegistry,
        *,
        clock: Callable[[], datetime],
    ) -> None:
        self.store = store
        self.registry = registry
        self.clock = clock
        self.admission: Admission | None = None

    def finalized(self, rt: ResourceType, old: dict[str, Any], new: dict[str, Any]) -> bool:
        """Return whether an update of a deleting object removed its last finalizer."""
        if not objects.is_deleting(old) or not objects.finalizers_of(old):
            return False
        if objects.finalizers_of(new):
            return False
        if rt.storage_key == "/pods" and _waits_for_node(new):
            return False
        if rt.storage_key == "/namespaces" and (new.get("spec") or {}).get("finalizers"):
            return False
        return True

    def remove(
        self,
        key: storage.ObjectKey,
        rt: ResourceType,
        final: dict[str, Any] | None,
        *,
        expected_revision: int | None,
    ) -> dict[str, Any]:
        """Delete an object from the store now (no finalizer checks).

        Raises:
            ApiError: 404 if it is gone, 409 on a stale ``expected_revision``.
        """
        try:
            deleted = self.store.delete(key, expected_revision=expected_revision, final=final)
        except storage.NotFound:
            raise ApiError(404, "NotFound", f'{rt.group_resource} "{key[2]}" not found') from None
        except storage.Conflict:
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {rt.group_resource} "{key[2]}": the object has been modified; please apply your changes to the latest version and try again',
            ) from None
        if self.admission is not None:
            self.admission.after_delete(rt, deleted)
        if rt.crd_name:
            self._finish_crd_cleanup(rt.crd_name)
        return deleted

    def delete(
        self, rt: ResourceType, namespace: str, name: str, options: DeleteOptions
    ) -> tuple[dict[str, Any], bool]:
        """DELETE one object.

        Args:
            rt: the type. namespace: ``""`` for cluster-scoped. name: the object name.
            options: parsed DeleteOptions.

        Returns:
            ``(object, deleted)``: the final object and True if it is gone, or the object
            with ``deletionTimestamp`` and False if deletion is pending.

        Raises:
            ApiError: 404 NotFound, 409 Conflict (precondition or concurrent change).
        """
        key = (rt.storage_key, namespace if rt.namespaced else "", name)
        current = self.store.get(*key)
        if current is None:
            raise ApiError(
                404,
                "NotFound",
                f'{rt.group_resource} "{name}" not found',
                details={"name": name, "group": rt.group, "kind": rt.plural},
            )
        meta = current["metadata"]
        if options.uid and options.uid != meta.get("uid"):
            raise ApiError(
                409,
                "Conflict",
                f"Precondition failed: UID in precondition: {options.uid}, UID in object meta: {meta.get('uid')}",
                details={"name": name, "group": rt.group, "kind": rt.plural},
            )
        if options.resource_version and options.resource_version != meta.get("resourceVersion"):
            raise ApiError(
                409,
                "Conflict",
                f"Precondition failed: ResourceVersion in precondition: {options.resource_version}, ResourceVersion in object meta: {meta.get('resourceVersion')}",
                details={"name": name, "group": rt.group, "kind": rt.plural},
            )
        revision = int(meta["resourceVersion"])
        obj = copy.deepcopy(current)
        new_meta = obj["metadata"]
        finalizers = objects.finalizers_of(obj)
        if options.propagation == "Foreground" and FOREGROUND not in finalizers:
            finalizers.append(FOREGROUND)
        elif options.propagation == "Orphan" and ORPHAN not in finalizers:
            finalizers.append(ORPHAN)
        if (
            options.propagation != "Foreground"
            and FOREGROUND in finalizers
            and not objects.is_deleting(current)
        ):
            finalizers.remove(FOREGROUND)
        now = self.clock()
        pending = bool(finalizers)
        if rt.storage_key == "/namespaces":
            obj.setdefault("spec", {}).setdefault("finalizers", [NAMESPACE_FINALIZER])
            obj["status"] = {**(obj.get("status") or {}), "phase": "Terminating"}
            pending = True
        if rt.storage_key == "/pods" and (obj.get("spec") or {}).get("nodeName"):
            grace = options.grace_period
            if grace is None:
                grace = int((obj.get("spec") or {}).get("terminationGracePeriodSeconds", 30))
            current_grace = new_meta.get("deletionGracePeriodSeconds")
            if grace > 0 or (current_grace is None and pending):
                if current_grace is None or grace < int(current_grace):
                    new_meta["deletionGracePeriodSeconds"] = grace
                    new_meta["deletionTimestamp"] = objects.now_rfc3339(
                        now + timedelta(seconds=grace)
                    )
                pending = True
            else:
                new_meta["deletionGracePeriodSeconds"] = 0
        if rt.storage_key == CRD_KEY and not objects.is_deleting(current):
            if self._crd_objects(current):
                finalizers.append(CRD_CLEANUP)
                pending = True
                obj["status"] = _with_terminating_condition(obj, objects.now_rfc3339(now))
        if not pending:
            if options.dry_run:
                return obj, True
            return self.remove(key, rt, None, expected_revision=revision), True
        if finalizers:
            new_meta["finalizers"] = finalizers
        new_meta.setdefault("deletionTimestamp", objects.now_rfc3339(now))
        new_meta.setdefault("deletionGracePeriodSeconds", 0)
        if obj == current or options.dry_run:
            return obj, False
        try:
            stored = self.store.update(key, obj, expected_revision=revision)
        except storage.Conflict:
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {rt.group_resource} "{name}": the object has been modified; please apply your changes to the latest version and try again',
            ) from None
        if CRD_CLEANUP in finalizers and CRD_CLEANUP not in objects.finalizers_of(current):
            self._delete_crd_objects(stored)
            stored = self.store.get(*key) or stored
        return stored, False

    def _crd_objects(self, crd: dict[str, Any]) -> list[dict[str, Any]]:
        return self.store.list(_crd_storage_key(crd))

    def _delete_crd_objects(self, crd: dict[str, Any]) -> None:
        """Delete every object of a terminating CRD (finalizers honoured), then maybe it."""
        for obj in self._crd_objects(crd):
            meta = obj["metadata"]
            types = self.registry.by_storage_key(_crd_storage_key(crd))
            if not types:
                break
            if objects.is_deleting(obj):
                continue
            try:
                self.delete(types[0], meta.get("namespace", ""), meta["name"], DeleteOptions())
            except ApiError as exc:
                if exc.code != 404:
                    raise
        self._finish_crd_cleanup(crd["metadata"]["name"])

    def _finish_crd_cleanup(self, crd_name: str) -> None:
        """Remove a terminating CRD once none of its objects remain."""
        crd = self.store.get(CRD_KEY, "", crd_name)
        if crd is None or CRD_CLEANUP not in objects.finalizers_of(crd) or self._crd_objects(crd):
            return
        updated = copy.deepcopy(crd)
        remaining = [f for f in objects.finalizers_of(crd) if f != CRD_CLEANUP]
        if remaining:
            updated["metadata"]["finalizers"] = remaining
        else:
            updated["metadata"].pop("finalizers", None)
        crd_types = self.registry.by_storage_key(CRD_KEY)
        revision = int(crd["metadata"]["resourceVersion"])
        if remaining or not crd_types:
            self.store.update((CRD_KEY, "", crd_name), updated, expected_revision=revision)
        else:
            self.remove((CRD_KEY, "", crd_name), crd_types[0], updated, expected_revision=revision)


def _crd_storage_key(crd: dict[str, Any]) -> str:
    spec = crd.get("spec") or {}
    return f"{spec.get('group', '')}/{(spec.get('names') or {}).get('plural', '')}"


def _with_terminating_condition(crd: dict[str, Any], now: str) -> dict[str, Any]:
    status = copy.deepcopy(crd.get("status") or {})
    conditions = [c for c in status.get("conditions") or [] if c.get("type") != "Terminating"]
    conditions.append(
        {
            "type": "Terminating",
            "status": "True",
            "reason": "InstanceDeletionInProgress",
            "message": "CustomResource deletion is in progress",
            "lastTransitionTime": now,
        }
    )
    status["conditions"] = conditions
    return status


def crd_terminating_error() -> ApiError:
    """The 405 kube-apiserver answers a create of a custom object whose CRD is terminating."""
    return ApiError(
        405,
        "MethodNotAllowed",
        "create not allowed while custom resource definition is terminating",
    )


def _waits_for_node(pod: dict[str, Any]) -> bool:
    meta = pod.get("metadata") or {}
    grace = meta.get("deletionGracePeriodSeconds")
    return bool((pod.get("spec") or {}).get("nodeName")) and grace is not None and int(grace) > 0
