"""The registry of served resource types: built-in kinds plus CRD-served kinds.

One :class:`ResourceType` per served group/version/plural. Objects are stored once per
``storage_key`` (``group/plural``) whatever version a client uses: localkube serves every
version of a kind from the same objects and only rewrites ``apiVersion`` on the way out
(the ``None`` conversion strategy of CRDs). CRD kinds are added and removed at run time by
:meth:`ResourceRegistry.set_crd` / :meth:`ResourceRegistry.remove_crd`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

STANDARD_VERBS: tuple[str, ...] = (
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
)
CREATE_ONLY: tuple[str, ...] = ("create",)
BASE_FIELDS = frozenset({"metadata.name", "metadata.namespace"})


@dataclass(frozen=True)
class PrinterColumn:
    """One column of the kubectl Table view (a CRD ``additionalPrinterColumns`` entry).

    Attributes:
        name: the header. type: ``string``, ``integer``, ``number``, ``boolean`` or ``date``.
        json_path: a simple JSONPath such as ``.status.phase`` (dotted fields, ``[n]`` indices).
        description: shown by ``kubectl get -o wide`` help. priority: 0 shows by default.
        format: OpenAPI format (``name`` for the name column).
    """

    name: str
    type: str
    json_path: str
    description: str = ""
    priority: int = 0
    format: str = ""


@dataclass(frozen=True)
class ScalePaths:
    """A CRD's ``subresources.scale``: where the Scale's fields live in the object.

    Attributes:
        spec_replicas: e.g. ``.spec.replicas`` (required by Kubernetes).
        status_replicas: e.g. ``.status.replicas`` (required).
        label_selector: e.g. ``.status.selector`` (a serialized label selector), or "".
    """

    spec_replicas: str
    status_replicas: str
    label_selector: str = ""


def _scale_paths(declared: object) -> ScalePaths:
    """Parse ``subresources.scale`` of a CRD version.

    Raises:
        CRDError: a required path is missing or not a ``.spec``/``.status`` field path.
    """
    scale = declared if isinstance(declared, dict) else {}
    paths: dict[str, str] = {}
    for key, prefix, required in (
        ("specReplicasPath", ".spec.", True),
        ("statusReplicasPath", ".status.", True),
        ("labelSelectorPath", "", False),
    ):
        value = scale.get(key)
        if value is None and not required:
            paths[key] = ""
            continue
        if (
            not isinstance(value, str)
            or not (value.startswith(".spec.") or value.startswith(".status."))
            or not value.startswith(prefix)
            or not all(part.isidentifier() for part in value[1:].split("."))
        ):
            raise CRDError(
                f"spec.versions[].subresources.scale.{key}",
                f"Invalid value: {value!r}: must be a simple JSON path under "
                f"{prefix.rstrip('.') or '.spec or .status'}",
            )
        paths[key] = value
    return ScalePaths(
        paths["specReplicasPath"], paths["statusReplicasPath"], paths["labelSelectorPath"]
    )


@dataclass(frozen=True)
class ResourceType:
    """One served resource (group/version/plural).

    Attributes:
        group: API group, ``""`` for core. version: e.g. ``v1``. plural: URL segment.
        singular, kind, list_kind: names as discovery reports them.
        namespaced: whether objects live in namespaces.
        verbs: verbs discovery advertises and the server accepts.
        short_names, categories: discovery aliases (``po``, ``all``).
        subresources: served subresources: ``status``, ``log``, ``token``, ``scale``,
            ``binding``.
        field_selectors: field paths accepted by ``fieldSelector`` beyond the metadata ones.
        printer_columns: extra Table columns after NAME (CRDs); AGE is always appended.
        strategic_merge: whether strategic merge patch is accepted (built-ins only).
        stored: False for virtual create-only kinds (reviews, TokenRequest).
        crd_name: the owning CRD's name for CRD-served kinds, else "".
        storage_group: store under another group's key (events.k8s.io Events are core
            Events); None for the type's own group.
        conversion: how stored objects are converted for this type (see
            :mod:`localkube.conversion`); "" rewrites ``apiVersion`` only.
        scale_paths: a CRD's scale field paths; None for the built-in kinds (whose Scale
            reads ``spec.replicas``, ``status.replicas`` and ``spec.selector``).
    """

    group: str
    version: str
    plural: str
    singular: str
    kind: str
    namespaced: bool
    verbs: tuple[str, ...] = STANDARD_VERBS
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    subresources: frozenset[str] = frozenset()
    field_selectors: frozenset[str] = frozenset()
    printer_columns: tuple[PrinterColumn, ...] = ()
    strategic_merge: bool = True
    stored: bool = True
    crd_name: str = ""
    list_kind: str = field(default="")
    storage_group: str | None = None
    conversion: str = ""
    scale_paths: ScalePaths | None = None

    @property
    def api_version(self) -> str:
        """``v1`` for core, ``group/version`` otherwise."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def storage_key(self) -> str:
        """The key objects of this kind are stored under (``group/plural``)."""
        group = self.group if self.storage_group is None else self.storage_group
        return f"{group}/{self.plural}"

    @property
    def group_resource(self) -> str:
        """``plural.group`` (``plural`` for core) as messages print it."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def supported_fields(self) -> frozenset[str]:
        """Every field path accepted in a field selector."""
        return BASE_FIELDS | self.field_selectors

    def effective_list_kind(self) -> str:
        """``list_kind`` or ``<Kind>List``."""
        return self.list_kind or f"{self.kind}List"


def _rt(
    group: str,
    version: str,
    plural: str,
    kind: str,
    *,
    namespaced: bool = True,
    short: tuple[str, ...] = (),
    sub: Iterable[str] = (),
    fields: Iterable[str] = (),
    verbs: tuple[str, ...] = STANDARD_VERBS,
    stored: bool = True,
    categories: tuple[str, ...] = (),
) -> ResourceType:
    return ResourceType(
        group=group,
        version=version,
        plural=plural,
        singular=kind.lower(),
        kind=kind,
        namespaced=namespaced,
        verbs=verbs,
        short_names=short,
        categories=categories,
        subresources=frozenset(sub),
        field_selectors=frozenset(fields),
        stored=stored,
    )


_NS_VERBS = ("create", "delete", "get", "list", "patch", "update", "watch")

BUILTINS: tuple[ResourceType, ...] = (
    _rt("", "v1", "namespaces", "Namespace", namespaced=False, short=("ns",),
        sub=("status",), fields=("status.phase",), verbs=_NS_VERBS),
    _rt("", "v1", "pods", "Pod", short=("po",), sub=("status", "log", "binding"), categories=("all",),
        fields=("spec.nodeName", "status.phase", "spec.restartPolicy", "spec.schedulerName",
                "spec.serviceAccountName", "status.podIP", "status.nominatedNodeName")),
    _rt("", "v1", "services", "Service", short=("svc",), sub=("status",), categories=("all",),
        verbs=tuple(v for v in STANDARD_VERBS if v != "deletecollection") + ()),
    _rt("", "v1", "endpoints", "Endpoints", short=("ep",)),
    _rt("", "v1", "configmaps", "ConfigMap", short=("cm",)),
    _rt("", "v1", "secrets", "Secret", fields=("type",)),
    _rt("", "v1", "serviceaccounts", "ServiceAccount", short=("sa",), sub=("token",)),
    _rt("", "v1", "events", "Event", short=("ev",),
        fields=("involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
                "involvedObject.uid", "involvedObject.apiVersion",
                "involvedObject.resourceVersion", "involvedObject.fieldPath", "reason",
                "reportingComponent", "source", "type")),
    _rt("", "v1", "nodes", "Node", namespaced=False, short=("no",), sub=("status",),
        fields=("spec.unschedulable",)),
    _rt("apps", "v1", "deployments", "Deployment", short=("deploy",), sub=("status", "scale"),
        categories=("all",)),
    _rt("apps", "v1", "replicasets", "ReplicaSet", short=("rs",), sub=("status", "scale"),
        categories=("all",)),
    _rt("coordination.k8s.io", "v1", "leases", "Lease"),
    _rt("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice"),
    replace(
        _rt("events.k8s.io", "v1", "events", "Event", short=("ev",),
            fields=("regarding.kind", "regarding.namespace", "regarding.name", "regarding.uid",
                    "regarding.apiVersion", "regarding.resourceVersion", "regarding.fieldPath",
                    "reason", "reportingController", "type")),
        storage_group="", conversion="events",
    ),
    _rt("rbac.authorization.k8s.io", "v1", "roles", "Role"),
    _rt("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding"),
    _rt("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", namespaced=False),
    _rt("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding",
        namespaced=False),
    _rt("authorization.k8s.io", "v1", "selfsubjectaccessreviews", "SelfSubjectAccessReview",
        namespaced=False, verbs=CREATE_ONLY, stored=False),
    _rt("authorization.k8s.io", "v1", "subjectaccessreviews", "SubjectAccessReview",
        namespaced=False, verbs=CREATE_ONLY, stored=False),
    _rt("authorization.k8s.io", "v1", "localsubjectaccessreviews", "LocalSubjectAccessReview",
        verbs=CREATE_ONLY, stored=False),
    _rt("authorization.k8s.io", "v1", "selfsubjectrulesreviews", "SelfSubjectRulesReview",
        namespaced=False, verbs=CREATE_ONLY, stored=False),
    _rt("authentication.k8s.io", "v1", "tokenreviews", "TokenReview", namespaced=False,
        verbs=CREATE_ONLY, stored=False),
    _rt("authentication.k8s.io", "v1", "selfsubjectreviews", "SelfSubjectReview",
        namespaced=False, verbs=CREATE_ONLY, stored=False),
    _rt("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition",
        namespaced=False, short=("crd", "crds"), sub=("status",)),
)  # fmt: skip

GROUP_ORDER: tuple[str, ...] = (
    "",
    "apps",
    "events.k8s.io",
    "authentication.k8s.io",
    "authorization.k8s.io",
    "coordination.k8s.io",
    "discovery.k8s.io",
    "rbac.authorization.k8s.io",
    "apiextensions.k8s.io",
)


_VERSION = re.compile(r"^v(\d+)(?:(alpha|beta)(\d+))?$")


def version_priority(version: str) -> tuple[int, int, int, str]:
    """Sort key putting versions in Kubernetes priority order (preferred first).

    GA before beta before alpha, higher numbers first within each
    (``v2, v1, v1beta2, v1beta1, v1alpha1``), then non-Kubernetes names alphabetically.
    """
    match = _VERSION.match(version)
    if match is None:
        return (3, 0, 0, version)
    major, stage, minor = int(match[1]), match[2], int(match[3] or 0)
    rank = {None: 0, "beta": 1, "alpha": 2}[stage]
    return (rank, -major, -minor, "")


class CRDError(ValueError):
    """A CustomResourceDefinition that cannot be served; ``field`` names the bad field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def types_from_crd(crd: dict[str, Any]) -> list[ResourceType]:
    """Build the served resource types of a CRD (one per served version).

    Args:
        crd: an ``apiextensions.k8s.io/v1`` CustomResourceDefinition object.

    Returns:
        One :class:`ResourceType` per version with ``served: true``.

    Raises:
        CRDError: missing group, names, scope or versions.
    """
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    group = spec.get("group") or ""
    if not group:
        raise CRDError("spec.group", "Required value")
    plural = names.get("plural") or ""
    kind = names.get("kind") or ""
    if not plural:
        raise CRDError("spec.names.plural", "Required value")
    if not kind:
        raise CRDError("spec.names.kind", "Required value")
    scope = spec.get("scope")
    if scope not in ("Namespaced", "Cluster"):
        raise CRDError(
            "spec.scope", f'Unsupported value: "{scope}": supported values: "Cluster", "Namespaced"'
        )
    name = (crd.get("metadata") or {}).get("name", "")
    if name != f"{plural}.{group}":
        raise CRDError(
            "metadata.name", f'Invalid value: "{name}": must be spec.names.plural+"."+spec.group'
        )
    versions = spec.get("versions") or []
    if not versions:
        raise CRDError(
            "spec.versions",
            "Required value: must have exactly one version marked as storage version",
        )
    if sum(1 for v in versions if v.get("storage")) != 1:
        raise CRDError(
            "spec.versions",
            "Invalid value: must have exactly one version marked as storage version",
        )
    result: list[ResourceType] = []
    for version in versions:
        if not version.get("served", False):
            continue
        columns = tuple(
            PrinterColumn(
                name=str(c.get("name", "")),
                type=str(c.get("type", "string")),
                json_path=str(c.get("jsonPath", "")),
                description=str(c.get("description", "")),
                priority=int(c.get("priority", 0) or 0),
                format=str(c.get("format", "")),
            )
            for c in version.get("additionalPrinterColumns") or []
        )
        subresources = set()
        declared = version.get("subresources") or {}
        if "status" in declared:
            subresources.add("status")
        scale_paths = None
        if "scale" in declared:
            subresources.add("scale")
            scale_paths = _scale_paths(declared["scale"])
        selectable = frozenset(
            str(f.get("jsonPath", "")).lstrip(".") for f in version.get("selectableFields") or []
        )
        result.append(
            ResourceType(
                group=group,
                version=str(version.get("name", "")),
                plural=plural,
                singular=names.get("singular") or kind.lower(),
                kind=kind,
                list_kind=names.get("listKind") or f"{kind}List",
                namespaced=scope == "Namespaced",
                short_names=tuple(names.get("shortNames") or ()),
                categories=tuple(names.get("categories") or ()),
                subresources=frozenset(subresources),
                field_selectors=selectable,
                printer_columns=columns,
                strategic_merge=False,
                crd_name=name,
                scale_paths=scale_paths,
            )
        )
    return result


class ResourceRegistry:
    """The set of served resource types, looked up by URL parts or by kind."""

    def __init__(self) -> None:
        self._types: dict[tuple[str, str, str], ResourceType] = {}
        self._crd_types: dict[str, list[ResourceType]] = {}
        for rt in BUILTINS:
            self._types[(rt.group, rt.version, rt.plural)] = rt

    def lookup(self, group: str, version: str, plural: str) -> ResourceType | None:
        """Return the type served at ``/apis/group/version/plural`` (core: group ``""``)."""
        return self._types.get((group, version, plural))

    def by_kind(self, api_version: str, kind: str) -> ResourceType | None:
        """Return the type for an object's ``apiVersion`` and ``kind``, if served."""
        group, _, version = api_version.rpartition("/")
        for rt in self._types.values():
            if rt.group == group and rt.version == version and rt.kind == kind:
                return rt
        return None

    def by_storage_key(self, storage_key: str) -> list[ResourceType]:
        """Return every served version of the kind stored under ``storage_key``."""
        return [rt for rt in self._types.values() if rt.storage_key == storage_key]

    def all(self) -> list[ResourceType]:
        """Return every served type."""
        return list(self._types.values())

    def groups(self) -> list[tuple[str, list[str]]]:
        """Return ``(group, versions)`` pairs in discovery order (core group first)."""
        found: dict[str, list[str]] = {}
        for rt in self._types.values():
            versions = found.setdefault(rt.group, [])
            if rt.version not in versions:
                versions.append(rt.version)
        ordered = [g for g in GROUP_ORDER if g in found]
        ordered += sorted(g for g in found if g not in GROUP_ORDER)
        return [(g, sorted(found[g], key=version_priority)) for g in ordered]

    def in_group_version(self, group: str, version: str) -> list[ResourceType]:
        """Return the types served under one group/version."""
        return [rt for rt in self._types.values() if rt.group == group and rt.version == version]

    def set_crd(self, crd: dict[str, Any]) -> list[ResourceType]:
        """Serve (or re-serve after an update) the kinds a CRD defines.

        Raises:
            CRDError: the CRD is malformed (see :func:`types_from_crd`); nothing changes.
        """
        types = types_from_crd(crd)
        name = crd["metadata"]["name"]
        for rt in types:
            existing = self._types.get((rt.group, rt.version, rt.plural))
            if existing is not None and existing.crd_name != name:
                raise CRDError("spec.names.plural", f'Invalid value: "{rt.plural}": already served')
        self.remove_crd(name)
        for rt in types:
            self._types[(rt.group, rt.version, rt.plural)] = rt
        self._crd_types[name] = types
        return types

    def remove_crd(self, name: str) -> None:
        """Stop serving the kinds of CRD ``name`` (a no-op if it serves nothing)."""
        for rt in self._crd_types.pop(name, []):
            self._types.pop((rt.group, rt.version, rt.plural), None)
