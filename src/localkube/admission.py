"""Kind-specific admission: namespace checks, CRD lifecycle and custom-object validation.

* Namespaced creates need an existing namespace that is not terminating (404 / 403 as in
  kube-apiserver's NamespaceLifecycle plugin).
* Namespaces get ``spec.finalizers: [kubernetes]``.
* A CustomResourceDefinition is checked (names, scope, one storage version) and each served
  version's schema is compiled by :class:`localkube.crd.CRDValidator`; a schema or CEL rule
  it does not support rejects the CRD with 422 naming the construct, rather than serving
  an unvalidated kind. Its ``status`` (conditions Established/NamesAccepted, acceptedNames,
  storedVersions) is set here, and its kinds are served from the moment it is stored.
* Pods, Deployments, ReplicaSets, Services and Secrets get the defaults of
  :mod:`localkube.defaults`; Pods, Deployments, ReplicaSets, ConfigMaps and Secrets the
  checks of :mod:`localkube.validation`.
* Role, ClusterRole and binding writes by a request's caller go through RBAC escalation
  prevention (:mod:`localkube.auth.escalation`).
* A custom object is validated, defaulted and pruned by its version's validator (transition
  rules get the old object on update); errors answer 422 with field paths.
* Field validation (``fieldValidation``): a built-in body, or a patch's result, with fields
  its kind's schema does not declare is refused (Strict) or answered with warnings (Warn,
  the default) by :meth:`Admission.check_fields` (:mod:`localkube.field_validation`); a
  custom object's unknown fields are found by its validator's pruning, in :meth:`admit`.
"""

from __future__ import annotations

import copy
import json
from typing import Any, Protocol

from localkube import builtin_schemas, field_validation, objects, request_warnings, storage
from localkube.access import StoreRbac
from localkube.auth import escalation
from localkube.auth.rbac import RBAC_GROUP
from localkube.defaults import DEFAULTERS
from localkube.errors import ApiError, FieldError, invalid
from localkube.field_validation import Directive
from localkube.request_user import CURRENT_USER
from localkube.resources import CRDError, ResourceRegistry, ResourceType
from localkube.validation import VALIDATORS

CRD_KEY = "apiextensions.k8s.io/customresourcedefinitions"


class ObjectValidator(Protocol):
    """What admission needs from a CRD version validator (``localkube.crd.CRDValidator``)."""

    def admit(
        self, obj: dict[str, Any], old: dict[str, Any] | None
    ) -> tuple[dict[str, Any], list[FieldError]]:
        """Return the defaulted, pruned object and its validation errors."""
        ...

    def pruned(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Return ``obj`` with only unknown fields removed (strict field validation)."""
        ...


def _build_validator(schema: dict[str, Any]) -> ObjectValidator:
    from localkube.crd import CRDValidator

    validator: ObjectValidator = CRDValidator(schema)
    return validator


def _unsupported_schema_error() -> type[Exception]:
    from localkube import crd

    error: type[Exception] = crd.UnsupportedSchema
    return error


class Admission:
    """Admission checks and side effects, called by :class:`localkube.handlers.Handlers`.

    Args:
        store: the object store. registry: served types (CRD kinds are added here).
    """

    def __init__(self, store: storage.Store, registry: ResourceRegistry) -> None:
        self.store = store
        self.registry = registry
        self._validators: dict[tuple[str, str], tuple[str, ObjectValidator | None]] = {}
        # validators compiled while admitting a CRD write, served once it is stored: CRD name
        # -> (the admitted spec, validator per version)
        self._admitted: dict[str, tuple[Any, dict[str, ObjectValidator | None]]] = {}

    # namespaces -----------------------------------------------------------------

    def check_namespace_open(
        self, namespace: str, *, resource: str = "", group: str = "", name: str = ""
    ) -> None:
        """Raise unless ``namespace`` exists and is not terminating (NamespaceLifecycle).

        Args:
            namespace: the namespace of the object being created.
            resource: its plural resource name. group: its API group. name: its name
                (empty for ``generateName``); all three only word the 403.

        Raises:
            ApiError: 404 NotFound (missing), 403 Forbidden (terminating), worded as
                kube-apiserver's ``configmaps "x" is forbidden: unable to create ...``.
        """
        ns = self.store.get("/namespaces", "", namespace)
        if ns is None:
            raise ApiError(
                404,
                "NotFound",
                f'namespaces "{namespace}" not found',
                details={"name": namespace, "kind": "namespaces"},
            )
        if objects.is_deleting(ns):
            qualified = f"{resource}.{group}" if group else resource
            subject = f'{qualified} "{name}"' if name else qualified
            raise ApiError(
                403,
                "Forbidden",
                f"{subject} is forbidden: unable to create new content in namespace "
                f"{namespace} because it is being terminated",
                details={
                    "name": name,
                    "group": group,
                    "kind": resource,
                    "causes": [
                        {
                            "reason": "NamespaceTerminating",
                            "message": f"namespace {namespace} is being terminated",
                            "field": "metadata.namespace",
                        }
                    ],
                },
            )

    # CRDs -------------------------------------------------------------------------

    def load_crds(self) -> None:
        """Serve every stored CRD (at start-up); a CRD that no longer compiles is skipped."""
        for crd in self.store.list(CRD_KEY):
            try:
                compiled = self._compile(crd)
                self.registry.set_crd(crd)
            except (ApiError, CRDError):
                continue
            self._keep_validators(crd, compiled)

    def _keep_validators(
        self, crd: dict[str, Any], compiled: dict[str, ObjectValidator | None]
    ) -> None:
        """Serve ``compiled`` for the stored ``crd`` (until its resourceVersion changes)."""
        name = crd["metadata"]["name"]
        rv = crd["metadata"]["resourceVersion"]
        for key in [k for k in self._validators if k[0] == name]:
            del self._validators[key]
        for version, validator in compiled.items():
            self._validators[(name, version)] = (rv, validator)

    def _compile(self, crd: dict[str, Any]) -> dict[str, ObjectValidator | None]:
        name = crd.get("metadata", {}).get("name", "")
        compiled: dict[str, ObjectValidator | None] = {}
        for index, version in enumerate((crd.get("spec") or {}).get("versions") or []):
            schema = (version.get("schema") or {}).get("openAPIV3Schema")
            if schema is None:
                raise invalid(
                    "CustomResourceDefinition",
                    "apiextensions.k8s.io",
                    name,
                    [
                        FieldError(
                            f"spec.versions[{index}].schema.openAPIV3Schema",
                            "FieldValueRequired",
                            "Required value: schemas are required",
                        )
                    ],
                )
            try:
                compiled[str(version.get("name"))] = _build_validator(schema)
            except ImportError:
                compiled[str(version.get("name"))] = None
            except Exception as exc:
                if isinstance(exc, _unsupported_schema_error()):
                    raise invalid(
                        "CustomResourceDefinition",
                        "apiextensions.k8s.io",
                        name,
                        [
                            FieldError(
                                f"spec.versions[{index}].schema.openAPIV3Schema",
                                "FieldValueInvalid",
                                f"Invalid value: {exc}",
                            )
                        ],
                    ) from None
                raise
        return compiled

    def _validator(self, rt: ResourceType) -> ObjectValidator | None:
        crd = self.store.get(CRD_KEY, "", rt.crd_name)
        if crd is None:
            return None
        rv = crd["metadata"]["resourceVersion"]
        cached = self._validators.get((rt.crd_name, rt.version))
        if cached is not None and cached[0] == rv:
            return cached[1]
        compiled = self._compile(crd)
        self._keep_validators(crd, compiled)
        return compiled.get(rt.version)

    def _crd_status(self, crd: dict[str, Any], old: dict[str, Any] | None) -> None:
        spec = crd.get("spec") or {}
        stored = [v.get("name") for v in spec.get("versions") or [] if v.get("storage")]
        previous = list(((old or {}).get("status") or {}).get("storedVersions") or [])
        for version in stored:
            if version not in previous:
                previous.append(version)
        now = crd["metadata"].get("creationTimestamp", objects.now_rfc3339())
        crd["status"] = {
            "acceptedNames": spec.get("names") or {},
            "storedVersions": previous,
            "conditions": [
                {
                    "type": "NamesAccepted",
                    "status": "True",
                    "reason": "NoConflicts",
                    "message": "no conflicts found",
                    "lastTransitionTime": now,
                },
                {
                    "type": "Established",
                    "status": "True",
                    "reason": "InitialNamesAccepted",
                    "message": "the initial names have been accepted",
                    "lastTransitionTime": now,
                },
            ],
        }
        if objects.is_deleting(crd):
            crd["status"]["conditions"].append(
                {
                    "type": "Terminating",
                    "status": "True",
                    "reason": "InstanceDeletionInProgress",
                    "message": "CustomResource deletion is in progress",
                    "lastTransitionTime": now,
                }
            )

    # field validation ------------------------------------------------------------

    def check_fields(
        self,
        rt: ResourceType,
        obj: dict[str, Any],
        directive: Directive,
        *,
        patch: tuple[str, Any] | None = None,
    ) -> None:
        """Apply ``fieldValidation`` to a built-in kind's body or patched object.

        Unknown fields never reach the store: like kube-apiserver's decoding into the Go
        type, Warn and Ignore drop them. Custom objects are checked in :meth:`admit`
        instead (their schema is the CRD's; its pruning drops them).

        Args:
            rt: the type. obj: the body (create, update) or the patched object, in the
                request's version; under Warn and Ignore its unknown fields are removed.
            directive: Strict refuses unknown fields, Warn drops them with one warning
                each (:mod:`localkube.request_warnings`), Ignore drops them silently.
            patch: for a patch, ``(patch kind, patch document)`` with kind ``json``,
                ``merge`` or ``strategic`` (words the Strict error); None otherwise.

        Raises:
            ApiError: under Strict, 400 BadRequest (create, update) or 422 Invalid
                (patch), worded as :mod:`localkube.field_validation` describes.
        """
        if rt.crd_name:
            return
        definition = builtin_schemas.definition_name(rt.group, rt.version, rt.kind)
        if definition is None:
            return
        strict = directive is Directive.STRICT
        unknown = field_validation.unknown_fields(obj, definition, remove=not strict)
        if not unknown or directive is Directive.IGNORE:
            return
        if directive is Directive.WARN:
            for path in unknown:
                request_warnings.add(field_validation.unknown_field(path))
            return
        if patch is None:
            raise field_validation.body_error(rt.kind, rt.version, unknown)
        kind, document = patch
        shown = (
            field_validation.go_map_text(document)
            if kind == "strategic"
            else json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
        )
        raise field_validation.patch_error(shown, unknown)

    # hooks ---------------------------------------------------------------------

    def admit(
        self,
        rt: ResourceType,
        obj: dict[str, Any],
        old: dict[str, Any] | None,
        *,
        strict: bool = False,
        warn: bool = False,
    ) -> dict[str, Any]:
        """Validate (and default/prune) an object about to be created or updated.

        Args:
            rt: the type. obj: the object. old: the stored object on update.
            strict: ``fieldValidation=Strict``: a custom object with fields its schema
                does not declare is rejected instead of pruned.
            warn: ``fieldValidation=Warn``: such fields are pruned with one warning each
                (``unknown field "spec.x"``, :mod:`localkube.request_warnings`).

        Returns:
            The object to store (possibly a new dict).

        Raises:
            ApiError: 422 Invalid with field causes; 400 BadRequest for unknown fields
                under ``strict``; 403 Forbidden when the request's caller would grant RBAC
                permissions it does not hold (:mod:`localkube.auth.escalation`).
        """
        name = str(obj.get("metadata", {}).get("name", ""))
        user = CURRENT_USER.get()
        if user is not None and rt.group == RBAC_GROUP:
            escalation.check_write(user, rt.plural, obj, old, StoreRbac(self.store))
        if rt.storage_key == "/namespaces":
            spec = obj.setdefault("spec", {})
            if old is None:
                spec.setdefault("finalizers", ["kubernetes"])
            else:
                spec["finalizers"] = (old.get("spec") or {}).get("finalizers", [])
            return obj
        if rt.storage_key == CRD_KEY:
            try:
                from localkube.resources import types_from_crd

                types_from_crd(obj)
            except CRDError as exc:
                raise invalid(
                    rt.kind,
                    rt.group,
                    name,
                    [FieldError(exc.field, "FieldValueInvalid", exc.message)],
                ) from None
            if old is not None:
                for field in ("group", "scope"):
                    if (obj.get("spec") or {}).get(field) != (old.get("spec") or {}).get(field):
                        raise invalid(
                            rt.kind,
                            rt.group,
                            name,
                            [
                                FieldError(
                                    f"spec.{field}",
                                    "FieldValueInvalid",
                                    "Invalid value: field is immutable",
                                )
                            ],
                        )
            self._admitted[name] = (copy.deepcopy(obj.get("spec")), self._compile(obj))
            self._crd_status(obj, old)
            return obj
        if rt.crd_name:
            return self._admit_custom(rt, obj, old, strict=strict, warn=warn)
        defaulter = DEFAULTERS.get(rt.storage_key)
        if defaulter is not None:
            defaulter(obj, creating=old is None)
        validator = VALIDATORS.get(rt.storage_key)
        if validator is not None:
            errors = validator(obj, old)
            if errors:
                raise invalid(rt.kind, rt.group, name, errors)
        return obj

    def _admit_custom(
        self,
        rt: ResourceType,
        obj: dict[str, Any],
        old: dict[str, Any] | None,
        *,
        strict: bool = False,
        warn: bool = False,
    ) -> dict[str, Any]:
        validator = self._validator(rt)
        if validator is None:
            return obj
        admitted, errors = validator.admit(obj, old)
        if strict or warn:
            # against pruning alone: a null known field is dropped by defaulting, not unknown
            known = validator.pruned(obj) if isinstance(obj, dict) else admitted
            unknown = sorted(
                path
                for key in obj
                if key not in ("apiVersion", "kind", "metadata")
                for path in _pruned_paths(obj[key], known.get(key), key, key in known)
            )
            if unknown and not strict:
                for path in unknown:
                    request_warnings.add(field_validation.unknown_field(path))
            elif unknown:
                detail = ", ".join(f'unknown field "{p}"' for p in unknown)
                raise ApiError(
                    400,
                    "BadRequest",
                    f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: '
                    f"strict decoding error: {detail}",
                )
        if errors:
            raise invalid(rt.kind, rt.group, str(obj.get("metadata", {}).get("name", "")), errors)
        # the validator may prune metadata fields it does not know: keep ours
        admitted["metadata"] = obj["metadata"]
        admitted["apiVersion"] = obj["apiVersion"]
        admitted["kind"] = obj["kind"]
        return admitted

    def admit_status(
        self, rt: ResourceType, obj: dict[str, Any], old: dict[str, Any]
    ) -> dict[str, Any]:
        """Validate a status write (custom objects are validated as a whole).

        Raises:
            ApiError: 422 Invalid.
        """
        if rt.crd_name:
            return self._admit_custom(rt, obj, old)
        if rt.storage_key == CRD_KEY:
            return obj
        return obj

    def before_write(
        self, rt: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None
    ) -> None:
        """Last check before the store write (CRD names must not clash).

        Raises:
            ApiError: 422 when a CRD's plural is already served by another CRD.
        """
        if rt.storage_key == CRD_KEY:
            for served in self.registry.all():
                spec = obj.get("spec") or {}
                if (
                    served.group == spec.get("group")
                    and served.plural == (spec.get("names") or {}).get("plural")
                    and served.crd_name != obj["metadata"]["name"]
                ):
                    raise invalid(
                        rt.kind,
                        rt.group,
                        obj["metadata"]["name"],
                        [
                            FieldError(
                                "spec.names.plural",
                                "FieldValueInvalid",
                                "Invalid value: already served",
                            )
                        ],
                    )

    def after_write(
        self, rt: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None
    ) -> None:
        """Side effects after a successful write (serve a CRD's kinds and validators)."""
        if rt.storage_key == CRD_KEY:
            try:
                self.registry.set_crd(obj)
            except CRDError:
                pass
            admitted = self._admitted.pop(obj["metadata"]["name"], None)
            if admitted is not None and admitted[0] == obj.get("spec"):
                self._keep_validators(obj, admitted[1])

    def after_delete(self, rt: ResourceType, obj: dict[str, Any]) -> None:
        """Side effects after a deletion (stop serving a CRD's kinds, end their watches)."""
        if rt.storage_key == CRD_KEY:
            name = obj["metadata"]["name"]
            spec = obj.get("spec") or {}
            plural = (spec.get("names") or {}).get("plural", "")
            self.store.end_watches(f"{spec.get('group', '')}/{plural}")
            self.registry.remove_crd(name)
            for key in [k for k in self._validators if k[0] == name]:
                del self._validators[key]


def _pruned_paths(before: Any, after: Any, path: str, present: bool = True) -> list[str]:
    """Return the dotted paths present in ``before`` that pruning removed from ``after``."""
    if not present:
        return [path]
    if isinstance(before, dict) and isinstance(after, dict):
        found: list[str] = []
        for key, value in before.items():
            found += _pruned_paths(value, after.get(key), f"{path}.{key}", key in after)
        return found
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        found = []
        for index, (b, a) in enumerate(zip(before, after, strict=True)):
            found += _pruned_paths(b, a, f"{path}[{index}]")
        return found
    return []
