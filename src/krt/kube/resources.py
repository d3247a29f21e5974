"""Which REST collection an object lives in: :class:`ResourceRef` and the ones we use.

The client speaks plain dicts over REST, so every call names its resource type explicitly
instead of discovering it: discovery costs round trips at start-up and hides typos until
run time. A :class:`ResourceRef` is enough to build every URL (collection, object,
subresource) and to stamp ``apiVersion``/``kind`` on new objects.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final
from urllib.parse import quote

from krt.api import constants

__all__ = [
    "DEPLOYMENTS",
    "ENDPOINTSLICES",
    "EVENTS",
    "LEASES",
    "NAMESPACES",
    "PODS",
    "ROLEBINDINGS",
    "ROLES",
    "RUNS",
    "RUNTIMES",
    "SELFSUBJECTACCESSREVIEWS",
    "SERVICEACCOUNTS",
    "SERVICES",
    "ResourceRef",
]

#: Characters ``quote(segment, safe="")`` leaves as they are (RFC 3986 unreserved).
_UNRESERVED: Final = re.compile(r"[A-Za-z0-9_.~-]+")


def _segment(text: str) -> str:
    """``text`` URL-quoted as one path segment; names (DNS labels) need no quoting."""
    return text if _UNRESERVED.fullmatch(text) else quote(text, safe="")


@dataclass(frozen=True, slots=True)
class ResourceRef:
    """A Kubernetes resource type as the REST API addresses it.

    Attributes:
        group: API group, ``""`` for the core group (Pods, Services, Events).
        version: API version within the group, e.g. ``v1``.
        plural: the URL segment, e.g. ``pods``.
        namespaced: whether objects live in namespaces.
        kind: the object kind, e.g. ``Pod``.
    """

    group: str
    version: str
    plural: str
    namespaced: bool
    kind: str

    @property
    def api_version(self) -> str:
        """``apiVersion`` of objects of this type (``v1`` or ``group/version``)."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def base(self) -> str:
        """The REST root: ``/api`` for the core group, ``/apis`` for named groups."""
        return "/apis" if self.group else "/api"

    def path(
        self,
        namespace: str | None = None,
        name: str | None = None,
        subresource: str | None = None,
    ) -> str:
        """Return the URL path of the collection, an object or its subresource.

        Args:
            namespace: required for namespaced types when addressing one object; ``None``
                on a namespaced collection means all namespaces. Must be ``None`` for
                cluster-scoped types.
            name: the object's name, or ``None`` for the collection.
            subresource: e.g. ``status``; needs ``name``.

        Returns:
            e.g. ``/api/v1/namespaces/default/pods/p1/status``.

        Raises:
            ValueError: a namespace on a cluster-scoped type, no namespace for one namespaced
                object, a subresource without a name, or an empty name/namespace.
        """
        namespace_part, tail = self.url_parts(namespace, name, subresource)
        parts = [self.base, self.api_version]
        if namespace_part is not None:
            parts += ["namespaces", _segment(namespace_part)]
        parts.append(tail)
        return "/".join(parts)

    def url_parts(
        self,
        namespace: str | None = None,
        name: str | None = None,
        subresource: str | None = None,
    ) -> tuple[str | None, str]:
        """Split an address into (namespace or None, the path after the namespace part).

        The second element is ``plural[/name[/subresource]]`` with the name URL-quoted: the
        shape kr8s's ``Api.call_api(version=..., base=..., namespace=..., url=...)`` takes.

        Raises:
            ValueError: as for :meth:`path`.
        """
        if namespace is not None:
            if not self.namespaced:
                raise ValueError(
                    f"{self.plural} is cluster-scoped: namespace must be None, got {namespace!r}"
                )
            if not namespace:
                raise ValueError(f"{self.plural}: namespace must not be empty")
        elif self.namespaced and name is not None:
            raise ValueError(f"{self.plural} is namespaced: a namespace is required for {name!r}")
        tail = [self.plural]
        if name is not None:
            if not name:
                raise ValueError(f"{self.plural}: name must not be empty")
            tail.append(_segment(name))
        if subresource is not None:
            if name is None:
                raise ValueError(f"{self.plural}: subresource {subresource!r} needs a name")
            tail.append(subresource)
        return namespace, "/".join(tail)

    def __str__(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


PODS: Final = ResourceRef("", "v1", "pods", True, "Pod")
SERVICES: Final = ResourceRef("", "v1", "services", True, "Service")
SERVICEACCOUNTS: Final = ResourceRef("", "v1", "serviceaccounts", True, "ServiceAccount")
EVENTS: Final = ResourceRef("", "v1", "events", True, "Event")
NAMESPACES: Final = ResourceRef("", "v1", "namespaces", False, "Namespace")
ENDPOINTSLICES: Final = ResourceRef(
    "discovery.k8s.io", "v1", "endpointslices", True, "EndpointSlice"
)
DEPLOYMENTS: Final = ResourceRef("apps", "v1", "deployments", True, "Deployment")
LEASES: Final = ResourceRef("coordination.k8s.io", "v1", "leases", True, "Lease")
ROLES: Final = ResourceRef("rbac.authorization.k8s.io", "v1", "roles", True, "Role")
ROLEBINDINGS: Final = ResourceRef(
    "rbac.authorization.k8s.io", "v1", "rolebindings", True, "RoleBinding"
)
SELFSUBJECTACCESSREVIEWS: Final = ResourceRef(
    "authorization.k8s.io", "v1", "selfsubjectaccessreviews", False, "SelfSubjectAccessReview"
)
RUNS: Final = ResourceRef(
    constants.GROUP, constants.VERSION, constants.RUN_PLURAL, True, constants.RUN_KIND
)
RUNTIMES: Final = ResourceRef(
    constants.GROUP, constants.VERSION, constants.RUNTIME_PLURAL, True, constants.RUNTIME_KIND
)
