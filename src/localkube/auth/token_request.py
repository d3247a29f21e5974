"""``TokenRequest`` (``POST .../serviceaccounts/NAME/token``) as a pure function (issue 3).

What kube-apiserver's ``serviceaccounts/token`` subresource does, minus storage: validate
and default the request, check an optional bound object, mint the JWT, and answer the
request with ``status.token`` and ``status.expirationTimestamp``. kubectl create token and
kubelet-style projected tokens both go through it.

Rules (Kubernetes ``ValidateTokenRequest`` and the token REST handler):

* ``spec.expirationSeconds`` defaults to 3600, must be at least 600 and at most 2^32;
* empty ``spec.audiences`` means the API audiences;
* ``spec.boundObjectRef`` may name a Pod or Secret in the ServiceAccount's namespace; it
  must exist, a Pod must run as this ServiceAccount, and a given ``uid`` must match.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from localkube.auth.tokens import TokenAuthority
from localkube.errors import ApiError, FieldError, invalid

GROUP = "authentication.k8s.io"
DEFAULT_EXPIRATION_SECONDS = 3600
MIN_EXPIRATION_SECONDS = 600
MAX_EXPIRATION_SECONDS = 1 << 32

ObjectGetter = Callable[[str, str, str], Mapping[str, Any] | None]
"""``get_object(kind, namespace, name) -> object dict | None`` for Pods and Secrets."""

_PLURALS = {"Pod": "pods", "Secret": "secrets"}


def _meta(obj: Mapping[str, Any], key: str) -> str:
    metadata = obj.get("metadata")
    value = metadata.get(key) if isinstance(metadata, Mapping) else None
    return value if isinstance(value, str) else ""


def _bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def rfc3339(unix_seconds: int) -> str:
    """Format unix seconds the way Kubernetes serializes ``metav1.Time``."""
    return datetime.fromtimestamp(unix_seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _expiration(spec: Mapping[str, Any], name: str) -> int:
    value = spec.get("expirationSeconds")
    if value is None:
        return DEFAULT_EXPIRATION_SECONDS
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad_request(f"spec.expirationSeconds: expected an integer, got {value!r}")
    if value < MIN_EXPIRATION_SECONDS:
        detail = "may not specify a duration less than 10 minutes"
    elif value > MAX_EXPIRATION_SECONDS:
        detail = "may not specify a duration larger than 2^32 seconds"
    else:
        return value
    error = FieldError(
        "spec.expirationSeconds", "FieldValueInvalid", f"Invalid value: {value}: {detail}"
    )
    raise invalid("TokenRequest", GROUP, name, [error])


def _bound_object(
    spec: Mapping[str, Any], service_account: Mapping[str, Any], get_object: ObjectGetter
) -> dict[str, str] | None:
    ref = spec.get("boundObjectRef")
    if ref is None:
        return None
    if not isinstance(ref, Mapping):
        raise _bad_request("spec.boundObjectRef: expected an object")
    kind = ref.get("kind")
    if kind not in _PLURALS:
        raise _bad_request(f"cannot bind token to object of type {kind}")
    name = ref.get("name")
    if not isinstance(name, str) or not name:
        raise _bad_request("spec.boundObjectRef.name: required")
    namespace = _meta(service_account, "namespace")
    obj = get_object(kind, namespace, name)
    if obj is None:
        raise ApiError(
            404,
            "NotFound",
            f'{_PLURALS[kind]} "{name}" not found',
            details={"name": name, "kind": _PLURALS[kind]},
        )
    uid = _meta(obj, "uid")
    wanted_uid = ref.get("uid")
    if wanted_uid and wanted_uid != uid:
        raise ApiError(
            409,
            "Conflict",
            f"the UID in the bound object reference ({wanted_uid}) does not match the UID in "
            "record. The object might have been deleted and then recreated",
        )
    if kind == "Pod":
        pod_spec = obj.get("spec")
        pod_sa = pod_spec.get("serviceAccountName") if isinstance(pod_spec, Mapping) else None
        if (pod_sa or "default") != _meta(service_account, "name"):
            raise _bad_request(
                "cannot bind token for serviceaccount "
                f'"{_meta(service_account, "name")}" to pod running with different '
                "serviceaccount name."
            )
    return {"kind": kind, "name": name, "uid": uid}


def token_request(
    body: object,
    *,
    service_account: Mapping[str, Any],
    authority: TokenAuthority,
    now: float,
    get_object: ObjectGetter,
) -> dict[str, Any]:
    """Answer a TokenRequest for ``service_account``.

    Args:
        body: the request (``authentication.k8s.io/v1`` TokenRequest; ``spec`` may be empty).
        service_account: the stored ServiceAccount object (name, namespace, uid).
        authority: signs the token.
        now: current unix time in seconds.
        get_object: looks up the bound Pod or Secret.

    Returns:
        The request with ``spec`` defaulted and ``status: {"token", "expirationTimestamp"}``.

    Raises:
        ApiError: 400 for a malformed body or an unsupported bound kind or a Pod of another
            ServiceAccount; 422 for an expiration outside [600, 2^32] seconds; 404 for a
            missing bound object; 409 for a bound object uid mismatch.
    """
    if not isinstance(body, Mapping):
        raise _bad_request("TokenRequest: the request body must be a JSON object")
    kind = body.get("kind")
    if kind not in (None, "", "TokenRequest"):
        raise _bad_request(f"expected kind TokenRequest, got {kind!r}")
    spec_in = body.get("spec") or {}
    if not isinstance(spec_in, Mapping):
        raise _bad_request("spec: expected an object")
    name = _meta(service_account, "name")
    expiration = _expiration(spec_in, name)
    audiences = spec_in.get("audiences") or []
    if not isinstance(audiences, list) or not all(isinstance(a, str) and a for a in audiences):
        raise _bad_request("spec.audiences: expected a list of non-empty strings")
    bound = _bound_object(spec_in, service_account, get_object)
    token, expires_at = authority.issue(
        _meta(service_account, "namespace"),
        name,
        _meta(service_account, "uid"),
        audiences=list(audiences) or list(authority.api_audiences),
        expiration_seconds=expiration,
        now=now,
        bound_object=bound,
    )
    response = copy.deepcopy(dict(body))
    response["kind"] = "TokenRequest"
    response["apiVersion"] = body.get("apiVersion") or f"{GROUP}/v1"
    metadata = dict(response.get("metadata") or {})
    metadata.setdefault("name", name)
    metadata.setdefault("namespace", _meta(service_account, "namespace"))
    metadata.setdefault("creationTimestamp", None)
    response["metadata"] = metadata
    spec = dict(spec_in)
    spec["audiences"] = list(audiences) or list(authority.api_audiences)
    spec["expirationSeconds"] = expiration
    spec.setdefault("boundObjectRef", None)
    response["spec"] = spec
    response["status"] = {"token": token, "expirationTimestamp": rfc3339(expires_at)}
    return response
