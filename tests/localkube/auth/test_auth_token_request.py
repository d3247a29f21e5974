"""TokenRequest (localkube.auth.token_request): defaults, limits, bound objects."""

from __future__ import annotations

from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from localkube.auth.token_request import rfc3339, token_request
from localkube.auth.tokens import TokenAuthority
from localkube.errors import ApiError

NOW = 1_700_000_000.0
ISSUER = "https://kubernetes.default.svc.cluster.local"
TA = TokenAuthority(ec.generate_private_key(ec.SECP256R1()), ISSUER)
SA = {"metadata": {"name": "runner", "namespace": "ns", "uid": "sa-uid"}}
OBJECTS: dict[tuple[str, str, str], dict[str, Any]] = {
    ("Pod", "ns", "p"): {
        "metadata": {"name": "p", "uid": "pod-uid"},
        "spec": {"serviceAccountName": "runner"},
    },
    ("Pod", "ns", "other"): {"metadata": {"name": "other", "uid": "o"}, "spec": {}},
    ("Secret", "ns", "s"): {"metadata": {"name": "s", "uid": "secret-uid"}},
}


def request(spec: dict[str, Any] | None = None) -> dict[str, Any]:
    return token_request(
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec or {}},
        service_account=SA,
        authority=TA,
        now=NOW,
        get_object=lambda kind, ns, name: OBJECTS.get((kind, ns, name)),
    )


def test_defaults_one_hour_and_api_audience() -> None:
    response = request()
    assert response["spec"]["expirationSeconds"] == 3600
    assert response["spec"]["audiences"] == [ISSUER]
    assert response["status"]["expirationTimestamp"] == rfc3339(int(NOW) + 3600)
    assert response["status"]["expirationTimestamp"] == "2023-11-14T23:13:20Z"
    user = TA.authenticate(response["status"]["token"], now=NOW)
    assert user is not None
    assert user.username == "system:serviceaccount:ns:runner"
    assert user.uid == "sa-uid"


def test_audiences_and_expiration_are_honoured() -> None:
    response = request({"audiences": ["gateway"], "expirationSeconds": 600})
    claims = jwt.decode(response["status"]["token"], options={"verify_signature": False})
    assert claims["aud"] == ["gateway"]
    assert claims["exp"] - claims["iat"] == 600


@pytest.mark.parametrize(
    ("seconds", "message"),
    [
        (599, "Invalid value: 599: may not specify a duration less than 10 minutes"),
        ((1 << 32) + 1, "may not specify a duration larger than 2^32 seconds"),
    ],
)
def test_expiration_limits(seconds: int, message: str) -> None:
    with pytest.raises(ApiError) as excinfo:
        request({"expirationSeconds": seconds})
    assert excinfo.value.code == 422
    assert message in excinfo.value.message
    assert excinfo.value.message.startswith(
        'TokenRequest.authentication.k8s.io "runner" is invalid: spec.expirationSeconds:'
    )


def test_bound_pod_token_carries_the_pod() -> None:
    response = request({"boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "p"}})
    user = TA.authenticate(response["status"]["token"], now=NOW)
    assert user is not None
    assert user.extra["authentication.kubernetes.io/pod-uid"] == ["pod-uid"]


def test_bound_secret() -> None:
    response = request({"boundObjectRef": {"kind": "Secret", "name": "s", "uid": "secret-uid"}})
    claims = jwt.decode(response["status"]["token"], options={"verify_signature": False})
    assert claims["kubernetes.io"]["secret"] == {"name": "s", "uid": "secret-uid"}


@pytest.mark.parametrize(
    ("ref", "code", "text"),
    [
        (
            {"kind": "Deployment", "name": "d"},
            400,
            "cannot bind token to object of type Deployment",
        ),
        ({"kind": "Pod", "name": "missing"}, 404, 'pods "missing" not found'),
        ({"kind": "Pod", "name": "p", "uid": "stale"}, 409, "does not match the UID in record"),
        (
            {"kind": "Pod", "name": "other"},
            400,
            "to pod running with different serviceaccount name",
        ),
    ],
)
def test_bound_object_errors(ref: dict[str, Any], code: int, text: str) -> None:
    with pytest.raises(ApiError) as excinfo:
        request({"boundObjectRef": ref})
    assert excinfo.value.code == code
    assert text in excinfo.value.message


@pytest.mark.parametrize(
    "spec",
    [
        {"expirationSeconds": "600"},
        {"audiences": "x"},
        {"audiences": [""]},
        {"boundObjectRef": "pod"},
    ],
)
def test_malformed_specs_are_bad_requests(spec: dict[str, Any]) -> None:
    with pytest.raises(ApiError) as excinfo:
        request(spec)
    assert excinfo.value.code == 400
