"""The authentication and authorization review APIs, as pure request -> response functions.

Covers issue 3's SelfSubjectAccessReview ("answers for the caller"), SubjectAccessReview
("for privileged callers"), TokenReview, and the extras kubectl uses:
LocalSubjectAccessReview, SelfSubjectRulesReview (``kubectl auth can-i --list``) and
SelfSubjectReview (``kubectl auth whoami``). Seed 000 ("Authentication and
Authorization") has runtimed ask exactly the SelfSubjectAccessReview question "may this
token's user get this Run".

Each function takes the decoded request body, the authenticated caller and the
callables it needs, and returns the response body (the request with ``status`` filled
in), or raises :class:`~localkube.errors.ApiError`: 400 for a body that is not the
expected shape, 422 with Kubernetes' field messages for an invalid spec, 403 when the
caller may not use a review API that needs privileges. The API server has already
authorized the ``create`` request itself; the privilege checks here repeat it so the
functions are safe on their own.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

from localkube.auth.rbac import UserRules, forbidden_error
from localkube.auth.tokens import VerifiedToken
from localkube.auth.types import Decision, RequestAttributes, UserInfo
from localkube.errors import ApiError, FieldError, invalid

AUTHORIZATION_GROUP = "authorization.k8s.io"
AUTHENTICATION_GROUP = "authentication.k8s.io"

Authorizer = Callable[[UserInfo, RequestAttributes], Decision]
"""``authorize(user, attrs) -> Decision`` (``rbac.authorize`` bound to the cluster's RBAC)."""

TokenVerifier = Callable[[str, list[str] | None], VerifiedToken | None]
"""``verify(token, audiences) -> VerifiedToken | None`` (``BearerAuthenticator.verify``
with ``now`` bound)."""

RulesLister = Callable[[UserInfo, str], UserRules]
"""``rules_for(user, namespace) -> UserRules`` (``rbac.rules_for`` bound to the RBAC)."""


def _bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def _mapping(value: object, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _bad_request(f"{where}: expected an object, got {type(value).__name__}")
    return value


def _string(obj: Mapping[str, Any], key: str, where: str) -> str:
    value = obj.get(key, "")
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _bad_request(f"{where}.{key}: expected a string, got {type(value).__name__}")
    return value


def _strings(obj: Mapping[str, Any], key: str, where: str) -> list[str]:
    value = obj.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _bad_request(f"{where}.{key}: expected a list of strings")
    return list(value)


def _extra(obj: Mapping[str, Any], where: str) -> dict[str, list[str]]:
    raw = _mapping(obj.get("extra"), f"{where}.extra")
    return {str(k): _strings(raw, k, f"{where}.extra") for k in raw}


def _response(
    body: Mapping[str, Any], kind: str, group: str, status: dict[str, Any]
) -> dict[str, Any]:
    """Return the request echoed back with ``status``, as kube-apiserver answers reviews."""
    response = copy.deepcopy(dict(body))
    response["kind"] = kind
    response["apiVersion"] = body.get("apiVersion") or f"{group}/v1"
    metadata = dict(_mapping(body.get("metadata"), "metadata"))
    metadata.setdefault("creationTimestamp", None)
    response["metadata"] = metadata
    response.setdefault("spec", {})
    response["status"] = status
    return response


def _check_kind(body: object, kind: str) -> Mapping[str, Any]:
    if not isinstance(body, Mapping):
        raise _bad_request(f"{kind}: the request body must be a JSON object")
    got = body.get("kind")
    if got not in (None, "", kind):
        raise _bad_request(f"expected kind {kind}, got {got!r}")
    return body


def _access_attributes(spec: Mapping[str, Any], kind: str, name: str) -> RequestAttributes:
    """Translate ``spec.resourceAttributes`` / ``spec.nonResourceAttributes``; validate."""
    resource = spec.get("resourceAttributes")
    non_resource = spec.get("nonResourceAttributes")
    errors: list[FieldError] = []
    if resource is not None and non_resource is not None:
        errors.append(
            FieldError(
                "spec.nonResourceAttributes",
                "FieldValueInvalid",
                'Invalid value: "object": cannot be specified in combination with resourceAttributes',
            )
        )
    if resource is None and non_resource is None:
        errors.append(
            FieldError(
                "spec.resourceAttributes",
                "FieldValueInvalid",
                'Invalid value: "null": exactly one of nonResourceAttributes or '
                "resourceAttributes must be specified",
            )
        )
    if errors:
        raise invalid(kind, AUTHORIZATION_GROUP, name, errors)
    if resource is not None:
        attrs = _mapping(resource, "spec.resourceAttributes")
        where = "spec.resourceAttributes"
        return RequestAttributes(
            verb=_string(attrs, "verb", where),
            resource_request=True,
            api_group=_string(attrs, "group", where),
            resource=_string(attrs, "resource", where),
            subresource=_string(attrs, "subresource", where),
            namespace=_string(attrs, "namespace", where),
            name=_string(attrs, "name", where),
        )
    attrs = _mapping(non_resource, "spec.nonResourceAttributes")
    where = "spec.nonResourceAttributes"
    return RequestAttributes(
        verb=_string(attrs, "verb", where),
        resource_request=False,
        path=_string(attrs, "path", where),
    )


def _access_status(decision: Decision) -> dict[str, Any]:
    status: dict[str, Any] = {"allowed": decision.allowed}
    if decision.reason:
        status["reason"] = decision.reason
    return status


def _require(
    caller: UserInfo, authorize: Authorizer, *, group: str, resource: str, namespace: str = ""
) -> None:
    attrs = RequestAttributes(
        verb="create", api_group=group, resource=resource, namespace=namespace
    )
    decision = authorize(caller, attrs)
    if not decision.allowed:
        raise forbidden_error(caller, attrs, decision.reason)


def self_subject_access_review(
    body: object, *, caller: UserInfo, authorize: Authorizer
) -> dict[str, Any]:
    """Answer a SelfSubjectAccessReview: may the caller do what ``spec`` describes?

    Args:
        body: the request, ``{"spec": {"resourceAttributes": {namespace, verb, group,
            resource, subresource, name}}}`` or ``{"spec": {"nonResourceAttributes":
            {path, verb}}}``.
        caller: the authenticated caller.
        authorize: the cluster's authorizer.

    Returns:
        The request with ``status: {"allowed": bool, "reason"?: str}``.

    Raises:
        ApiError: 400 for a malformed body, 422 unless exactly one attribute set is given.
    """
    kind = "SelfSubjectAccessReview"
    request = _check_kind(body, kind)
    spec = _mapping(request.get("spec"), "spec")
    attrs = _access_attributes(spec, kind, _name(request))
    return _response(request, kind, AUTHORIZATION_GROUP, _access_status(authorize(caller, attrs)))


def _name(body: Mapping[str, Any]) -> str:
    metadata = body.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    return name if isinstance(name, str) else ""


def _subject(spec: Mapping[str, Any], kind: str, name: str) -> UserInfo:
    user = _string(spec, "user", "spec")
    groups = _strings(spec, "groups", "spec")
    if not user and not groups:
        raise invalid(
            kind,
            AUTHORIZATION_GROUP,
            name,
            [
                FieldError(
                    "spec.user",
                    "FieldValueInvalid",
                    'Invalid value: "": at least one of user or group must be specified',
                )
            ],
        )
    return UserInfo(
        username=user,
        groups=tuple(groups),
        uid=_string(spec, "uid", "spec"),
        extra=_extra(spec, "spec"),
    )


def subject_access_review(
    body: object, *, caller: UserInfo, authorize: Authorizer
) -> dict[str, Any]:
    """Answer a SubjectAccessReview: may ``spec.user``/``spec.groups`` do it?

    The subject is evaluated exactly as given (no implicit ``system:authenticated``).

    Raises:
        ApiError: 403 unless the caller may ``create subjectaccessreviews``; 400 for a
            malformed body; 422 without user and groups or without exactly one
            attribute set.
    """
    kind = "SubjectAccessReview"
    request = _check_kind(body, kind)
    _require(caller, authorize, group=AUTHORIZATION_GROUP, resource="subjectaccessreviews")
    spec = _mapping(request.get("spec"), "spec")
    name = _name(request)
    attrs = _access_attributes(spec, kind, name)
    subject = _subject(spec, kind, name)
    return _response(request, kind, AUTHORIZATION_GROUP, _access_status(authorize(subject, attrs)))


def local_subject_access_review(
    body: object, *, namespace: str, caller: UserInfo, authorize: Authorizer
) -> dict[str, Any]:
    """Answer a LocalSubjectAccessReview posted to ``namespace``.

    Raises:
        ApiError: 403 unless the caller may ``create localsubjectaccessreviews`` in the
            namespace; 400 for a ``resourceAttributes.namespace`` other than the URL's (an
            empty one is set to it); 422 for non-resource attributes or the SAR rules above.
    """
    kind = "LocalSubjectAccessReview"
    request = _check_kind(body, kind)
    _require(
        caller,
        authorize,
        group=AUTHORIZATION_GROUP,
        resource="localsubjectaccessreviews",
        namespace=namespace,
    )
    spec = _mapping(request.get("spec"), "spec")
    name = _name(request)
    if spec.get("nonResourceAttributes") is not None:
        raise invalid(
            kind,
            AUTHORIZATION_GROUP,
            name,
            [
                FieldError(
                    "spec.nonResourceAttributes",
                    "FieldValueInvalid",
                    'Invalid value: "object": disallowed on this kind of request',
                )
            ],
        )
    attrs = _access_attributes(spec, kind, name)
    if attrs.namespace and attrs.namespace != namespace:
        raise _bad_request(f"spec.resourceAttributes.namespace must match namespace: {namespace}")
    attrs = RequestAttributes(
        verb=attrs.verb,
        api_group=attrs.api_group,
        resource=attrs.resource,
        subresource=attrs.subresource,
        namespace=namespace,
        name=attrs.name,
    )
    subject = _subject(spec, kind, name)
    response = _response(
        request, kind, AUTHORIZATION_GROUP, _access_status(authorize(subject, attrs))
    )
    response["metadata"].setdefault("namespace", namespace)
    return response


def _user_dict(user: UserInfo) -> dict[str, Any]:
    out: dict[str, Any] = {"username": user.username}
    if user.uid:
        out["uid"] = user.uid
    if user.groups:
        out["groups"] = list(user.groups)
    if user.extra:
        out["extra"] = {k: list(v) for k, v in user.extra.items()}
    return out


def token_review(
    body: object, *, caller: UserInfo, authorize: Authorizer, verify: TokenVerifier
) -> dict[str, Any]:
    """Answer a TokenReview: who does ``spec.token`` authenticate as?

    Args:
        body: ``{"spec": {"token": "...", "audiences": [...]}}``; no audiences means the
            API server's audiences.
        caller: the authenticated caller (needs ``create tokenreviews``).
        authorize: the cluster's authorizer.
        verify: token verification with the current time bound.

    Returns:
        The request with ``status: {"authenticated": true, "user": {...}, "audiences":
        [...]}`` or ``status: {"user": {}, "error": "invalid bearer token"}``.

    Raises:
        ApiError: 403 unless the caller may ``create tokenreviews``; 400 without a token.
    """
    kind = "TokenReview"
    request = _check_kind(body, kind)
    _require(caller, authorize, group=AUTHENTICATION_GROUP, resource="tokenreviews")
    spec = _mapping(request.get("spec"), "spec")
    token = _string(spec, "token", "spec")
    if not token:
        raise _bad_request("token is required for TokenReview in authentication group")
    audiences = _strings(spec, "audiences", "spec")
    verified = verify(token, audiences or None)
    status: dict[str, Any]
    if verified is None:
        status = {"user": {}, "error": "invalid bearer token"}
    else:
        status = {"authenticated": True, "user": _user_dict(verified.user)}
        if verified.audiences:
            status["audiences"] = list(verified.audiences)
    return _response(request, kind, AUTHENTICATION_GROUP, status)


def self_subject_rules_review(
    body: object, *, caller: UserInfo, rules_for: RulesLister
) -> dict[str, Any]:
    """Answer a SelfSubjectRulesReview (``kubectl auth can-i --list``).

    Args:
        body: ``{"spec": {"namespace": "ns"}}``.
        caller: the authenticated caller.
        rules_for: lists the caller's rules in a namespace.

    Returns:
        The request with ``status: {"resourceRules": [...], "nonResourceRules": [...],
        "incomplete": bool, "evaluationError"?: str}``.

    Raises:
        ApiError: 400 for a malformed body.
    """
    kind = "SelfSubjectRulesReview"
    request = _check_kind(body, kind)
    spec = _mapping(request.get("spec"), "spec")
    namespace = _string(spec, "namespace", "spec")
    rules = rules_for(caller, namespace)
    status: dict[str, Any] = {
        "resourceRules": rules.resource_rules,
        "nonResourceRules": rules.non_resource_rules,
        "incomplete": bool(rules.errors),
    }
    if rules.errors:
        status["evaluationError"] = ", ".join(rules.errors)
    return _response(request, kind, AUTHORIZATION_GROUP, status)


def self_subject_review(body: object, *, caller: UserInfo) -> dict[str, Any]:
    """Answer a SelfSubjectReview (``kubectl auth whoami``) with the caller's user info."""
    kind = "SelfSubjectReview"
    request = _check_kind(body, kind)
    return _response(request, kind, AUTHENTICATION_GROUP, {"userInfo": _user_dict(caller)})
