"""Mapping request paths onto resources: ``/api/v1/...`` and ``/apis/{group}/{version}/...``.

Pure functions: :func:`resolve` turns a path into a :class:`Route` (type, namespace, name,
subresource) or a discovery target, and :func:`request_verb` names the Kubernetes verb of
a method on a route (``list`` vs ``watch`` vs ``get``, ``delete`` vs ``deletecollection``),
which is what RBAC authorizes. Unknown paths raise the 404 kube-apiserver answers.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass

from localkube.errors import ApiError
from localkube.resources import ResourceRegistry, ResourceType

SUBRESOURCE_VERBS: dict[str, tuple[str, ...]] = {
    "status": ("get", "update", "patch"),
    "scale": ("get", "update", "patch"),
    "log": ("get",),
    "token": ("create",),
    "binding": ("create",),
}
"""The verbs each subresource serves (anything else is 405)."""


@dataclass(frozen=True)
class Route:
    """A resource request's target.

    Attributes:
        rt: the type. namespace: ``""`` for cluster-scoped or all namespaces;
            ``all_namespaces`` marks a namespaced list across namespaces.
        name: ``""`` for collections. subresource: e.g. ``status``.
    """

    rt: ResourceType
    namespace: str
    name: str
    subresource: str
    all_namespaces: bool = False


def not_found_path() -> ApiError:
    """The 404 kube-apiserver answers for a path it does not serve."""
    return ApiError(404, "NotFound", "the server could not find the requested resource", details={})


def resolve(registry: ResourceRegistry, path: str) -> Route | tuple[str, str] | None:
    """Resolve a path to a :class:`Route`, to ``(group, version)`` for a discovery path
    under ``/api/v1`` or ``/apis/g/v``, or None for anything else.

    Raises:
        ApiError: 404 for an unknown resource under a known prefix.
    """
    segments = path.strip("/").split("/")
    if "%" in path:
        segments = [urllib.parse.unquote(s) for s in segments]
    if segments[0] == "api" and len(segments) >= 2:
        group, version, rest = "", segments[1], segments[2:]
    elif segments[0] == "apis" and len(segments) >= 3:
        group, version, rest = segments[1], segments[2], segments[3:]
    else:
        return None
    if not rest:
        return (group, version)
    namespace = ""
    if (
        rest[0] == "namespaces"
        and len(rest) >= 3
        and not (len(rest) == 3 and group == "" and rest[2] in ("status", "finalize"))
    ):
        namespace, rest = rest[1], rest[2:]
        scoped = True
    else:
        scoped = False
    if len(rest) > 3 or not all(rest):
        raise not_found_path()
    rt = registry.lookup(group, version, rest[0])
    if rt is None:
        raise not_found_path()
    name = rest[1] if len(rest) > 1 else ""
    sub = rest[2] if len(rest) > 2 else ""
    if scoped and not rt.namespaced:
        raise not_found_path()
    if rt.namespaced and not scoped and name:
        raise not_found_path()
    if sub and sub not in rt.subresources:
        raise not_found_path()
    return Route(rt, namespace, name, sub, all_namespaces=rt.namespaced and not scoped)


def request_verb(method: str, route: Route, query: dict[str, str]) -> str:
    """Return the Kubernetes verb of ``method`` on ``route`` (``watch=true`` makes a watch).

    Raises:
        ApiError: 405 for a method the API does not use.
    """
    if method == "GET":
        if not route.name:
            return "watch" if query.get("watch") in ("true", "1") else "list"
        return "get"
    if method == "POST":
        return "create"
    if method == "PUT":
        return "update"
    if method == "PATCH":
        return "patch"
    if method == "DELETE":
        return "delete" if route.name else "deletecollection"
    raise ApiError(
        405,
        "MethodNotAllowed",
        f"the server does not allow this method on the requested resource ({method})",
    )


def wants_table(accept: str) -> bool:
    """Return whether an ``Accept`` header asks for the ``meta.k8s.io`` Table view."""
    return "as=Table" in accept.replace(" ", "")
