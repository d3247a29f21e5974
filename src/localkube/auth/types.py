"""Plain data shared by authentication, authorization and the HTTP layer."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class UserInfo:
    """An authenticated caller.

    Attributes:
        username: ``kubernetes-admin`` or ``system:serviceaccount:NS:NAME``.
        groups: e.g. ``("system:masters", "system:authenticated")`` or
            ``("system:serviceaccounts", "system:serviceaccounts:NS", "system:authenticated")``.
        uid: the user's uid (the ServiceAccount's uid for SA tokens), may be empty.
        extra: ``user.extra`` of reviews (for example ``authentication.kubernetes.io/pod-name``).
    """

    username: str
    groups: tuple[str, ...] = ()
    uid: str = ""
    extra: dict[str, list[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class RequestAttributes:
    """What a request asks to do, in the terms RBAC rules use.

    Attributes:
        verb: ``get``, ``list``, ``watch``, ``create``, ``update``, ``patch``, ``delete``,
            ``deletecollection`` for resources; the lower-case HTTP method for
            non-resource URLs.
        resource_request: False for non-resource URLs such as ``/version``.
        api_group: ``""`` for the core group.
        resource: plural, e.g. ``runs``. subresource: e.g. ``status`` or ``""``.
        namespace: ``""`` for cluster-scoped requests.
        name: ``""`` for collection requests.
        path: the URL path (used for non-resource URLs).
    """

    verb: str
    resource_request: bool = True
    api_group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    path: str = ""


@dataclass(frozen=True)
class Decision:
    """An authorization answer. ``reason`` is empty when allowed by nothing in particular."""

    allowed: bool
    reason: str = ""
