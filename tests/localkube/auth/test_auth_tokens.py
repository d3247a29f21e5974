"""ServiceAccount JWTs (localkube.auth.tokens) and bearer authentication (authn)."""

from __future__ import annotations

import base64
import json
import time

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from hypothesis import given, settings
from hypothesis import strategies as st

from localkube.auth.authn import ADMIN_USER, BearerAuthenticator, bearer_token
from localkube.auth.tokens import TokenAuthority

ISSUER = "https://kubernetes.default.svc.cluster.local"
NOW = 1_700_000_000.0
KEY = ec.generate_private_key(ec.SECP256R1())


def authority(**kwargs: object) -> TokenAuthority:
    return TokenAuthority(KEY, ISSUER, **kwargs)  # type: ignore[arg-type]


def mint(ta: TokenAuthority, **kwargs: object) -> tuple[str, int]:
    args: dict[str, object] = {"audiences": [], "expiration_seconds": 3600, "now": NOW}
    args.update(kwargs)
    return ta.issue("ns", "runner", "uid-1", **args)  # type: ignore[arg-type]


def test_claims_look_like_kubernetes_projected_tokens() -> None:
    ta = authority()
    token, exp = mint(
        ta, audiences=["vault"], bound_object={"kind": "Pod", "name": "p", "uid": "pu"}
    )
    assert exp == int(NOW) + 3600
    header = jwt.get_unverified_header(token)
    assert header["alg"] == "ES256"
    assert header["kid"] == ta.kid
    claims = jwt.decode(token, options={"verify_signature": False})
    assert claims["iss"] == ISSUER
    assert claims["sub"] == "system:serviceaccount:ns:runner"
    assert claims["aud"] == ["vault"]
    assert (claims["iat"], claims["nbf"], claims["exp"]) == (int(NOW), int(NOW), exp)
    assert claims["kubernetes.io"] == {
        "namespace": "ns",
        "serviceaccount": {"name": "runner", "uid": "uid-1"},
        "pod": {"name": "p", "uid": "pu"},
    }
    assert claims["jti"]


def test_authenticate_returns_the_service_account_user() -> None:
    ta = authority()
    token, _ = mint(ta, bound_object={"kind": "Pod", "name": "p", "uid": "pu"})
    user = ta.authenticate(token, now=NOW + 1)
    assert user is not None
    assert user.username == "system:serviceaccount:ns:runner"
    assert user.groups == (
        "system:serviceaccounts",
        "system:serviceaccounts:ns",
        "system:authenticated",
    )
    assert user.uid == "uid-1"
    assert user.extra["authentication.kubernetes.io/pod-name"] == ["p"]
    assert user.extra["authentication.kubernetes.io/pod-uid"] == ["pu"]
    assert user.extra["authentication.kubernetes.io/credential-id"][0].startswith("JTI=")


def test_default_audience_is_the_api_audience() -> None:
    ta = authority()
    token, _ = mint(ta)
    assert jwt.decode(token, options={"verify_signature": False})["aud"] == [ISSUER]
    assert ta.authenticate(token, now=NOW) is not None


def test_expiry_is_exact_and_not_extended_by_the_cache() -> None:
    ta = authority()
    token, exp = mint(ta, expiration_seconds=600)
    assert ta.authenticate(token, now=exp - 1) is not None  # now cached
    assert ta.authenticate(token, now=exp) is None
    assert ta.authenticate(token, now=exp + 3600) is None


def test_leeway_is_configurable() -> None:
    ta = authority(leeway_seconds=60)
    token, exp = mint(ta, expiration_seconds=600)
    assert ta.authenticate(token, now=exp + 59) is not None
    assert ta.authenticate(token, now=exp + 60) is None


def test_not_valid_before_issue_time() -> None:
    ta = authority()
    token, _ = mint(ta)
    assert ta.authenticate(token, now=NOW - 10) is None


def test_audience_must_intersect() -> None:
    ta = authority()
    token, _ = mint(ta, audiences=["vault", "gateway"])
    assert ta.authenticate(token, now=NOW) is None  # API audience by default
    assert ta.authenticate(token, now=NOW, audiences=["gateway"]) is not None
    verified = ta.verify(token, now=NOW, audiences=["x", "vault"])
    assert verified is not None
    assert verified.audiences == ["vault"]
    assert ta.authenticate(token, now=NOW, audiences=["other"]) is None


def test_forged_tokens_are_rejected() -> None:
    ta = authority()
    token, _ = mint(ta)
    # same claims signed by another key
    other = TokenAuthority(ec.generate_private_key(ec.SECP256R1()), ISSUER)
    forged, _ = mint(other)
    assert ta.authenticate(forged, now=NOW) is None
    # payload swapped (namespace escalated), signature kept
    head, payload, sig = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=="))
    claims["kubernetes.io"]["namespace"] = "kube-system"
    claims["sub"] = "system:serviceaccount:kube-system:runner"
    tampered = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    assert ta.authenticate(f"{head}.{tampered}.{sig}", now=NOW) is None
    # alg=none
    unsigned = jwt.encode(claims, "", algorithm="none")
    assert ta.authenticate(unsigned, now=NOW) is None
    # HS256 keyed with something public
    hmac_token = jwt.encode(claims, "secret-but-not-ours-xxxxxxxxxxxxx", algorithm="HS256")
    assert ta.authenticate(hmac_token, now=NOW) is None
    # a validly signed token from another issuer
    other_issuer = TokenAuthority(KEY, "https://elsewhere")
    foreign, _ = mint(other_issuer, audiences=[ISSUER])
    assert ta.authenticate(foreign, now=NOW) is None


def test_signed_but_wrongly_shaped_claims_are_rejected() -> None:
    ta = authority()
    base = {"iss": ISSUER, "aud": [ISSUER], "exp": int(NOW) + 60, "iat": int(NOW), "nbf": int(NOW)}
    for claims in [
        {**base, "sub": "system:serviceaccount:ns:x"},  # no kubernetes.io
        {
            **base,
            "sub": "admin",
            "kubernetes.io": {"namespace": "ns", "serviceaccount": {"name": "x", "uid": "u"}},
        },
        {
            **base,
            "sub": "system:serviceaccount:ns:x",
            "kubernetes.io": {"namespace": "ns", "serviceaccount": "x"},
        },
        {**base, "sub": "system:serviceaccount:ns:x", "kubernetes.io": []},
        {
            **base,
            "exp": "soon",
            "sub": "system:serviceaccount:ns:x",
            "kubernetes.io": {"namespace": "ns", "serviceaccount": {"name": "x", "uid": "u"}},
        },
    ]:
        token = jwt.encode(claims, KEY, algorithm="ES256")
        assert ta.authenticate(token, now=NOW) is None, claims


@pytest.mark.parametrize(
    "garbage",
    [
        "",
        "x",
        "a.b.c",
        "...",
        "Bearer x",
        "é.é.é",
        "\ud800.a.b",
        "a" * 100_000,
        "eyJhbGciOiJFUzI1NiJ9.e30.",
    ],
)
def test_garbage_is_rejected_without_raising(garbage: str) -> None:
    assert authority().authenticate(garbage, now=NOW) is None


@settings(max_examples=200)
@given(st.text(alphabet=st.characters(), max_size=300))
def test_arbitrary_text_never_raises(text: str) -> None:
    assert authority().authenticate(text, now=NOW) is None


def test_hooks_are_checked_on_every_call() -> None:
    alive = {"sa": True, "pod": True}
    seen: list[tuple[str, ...]] = []

    def sa_exists(ns: str, name: str, uid: str) -> bool:
        seen.append((ns, name, uid))
        return alive["sa"]

    def bound_exists(kind: str, ns: str, name: str, uid: str) -> bool:
        seen.append((kind, ns, name, uid))
        return alive["pod"]

    ta = authority(sa_exists=sa_exists, bound_object_exists=bound_exists)
    token, _ = mint(ta, bound_object={"kind": "Pod", "name": "p", "uid": "pu"})
    assert ta.authenticate(token, now=NOW) is not None
    assert ("ns", "runner", "uid-1") in seen
    assert ("Pod", "ns", "p", "pu") in seen
    alive["pod"] = False
    assert ta.authenticate(token, now=NOW) is None  # cached signature, hook still consulted
    alive["pod"], alive["sa"] = True, False
    assert ta.authenticate(token, now=NOW) is None


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"expiration_seconds": 0}, "expiration_seconds"),
        ({"expiration_seconds": -5}, "expiration_seconds"),
        ({"expiration_seconds": True}, "expiration_seconds"),
        ({"audiences": [""]}, "audiences[0]"),
        ({"bound_object": {"kind": "Deployment", "name": "d", "uid": "u"}}, "bound_object.kind"),
        ({"bound_object": {"kind": "Pod", "name": "", "uid": "u"}}, "bound_object.name"),
    ],
)
def test_issue_rejects_bad_input_naming_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=field.replace("[", r"\[").replace("]", r"\]")):
        mint(authority(), **kwargs)


def test_issue_rejects_empty_names() -> None:
    with pytest.raises(ValueError, match="namespace"):
        authority().issue("", "x", "u", audiences=[], expiration_seconds=60, now=NOW)


def test_rsa_keys_sign_rs256_and_weak_keys_are_refused() -> None:
    ta = TokenAuthority(rsa.generate_private_key(public_exponent=65537, key_size=2048), ISSUER)
    token, _ = mint(ta)
    assert jwt.get_unverified_header(token)["alg"] == "RS256"
    assert ta.authenticate(token, now=NOW) is not None
    with pytest.raises(ValueError, match="P-256"):
        TokenAuthority(ec.generate_private_key(ec.SECP384R1()), ISSUER)


def test_cache_is_bounded() -> None:
    ta = authority(cache_size=2)
    tokens = [mint(ta)[0] for _ in range(3)]
    for token in tokens:
        assert ta.authenticate(token, now=NOW) is not None
    assert len(ta._cache) == 2
    ta.forget_expired(now=NOW + 7200)
    assert len(ta._cache) == 0


def test_jwks_verifies_the_tokens() -> None:
    ta = authority()
    token, _ = mint(ta)
    jwk = ta.jwks()["keys"][0]
    assert jwk["kid"] == ta.kid
    assert jwk["alg"] == "ES256"
    key = jwt.PyJWK(jwk).key
    claims = jwt.decode(
        token,
        key,
        algorithms=["ES256"],
        audience=ISSUER,
        options={"verify_exp": False, "verify_iat": False, "verify_nbf": False},
    )
    assert claims["sub"] == "system:serviceaccount:ns:runner"
    assert ta.openid_configuration()["jwks_uri"] == ISSUER + "/openid/v1/jwks"


def test_verification_cost_is_measured_and_cached() -> None:
    """Not a timing assertion: prints the figures and checks the cache is used."""
    ta = authority()
    token, _ = mint(ta)
    start = time.perf_counter()
    ta.authenticate(token, now=NOW)
    first = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(100):
        ta.authenticate(token, now=NOW)
    cached = (time.perf_counter() - start) / 100
    print(f"ES256 verify {first * 1e6:.0f} us, cached {cached * 1e6:.1f} us")
    assert len(ta._cache) == 1


# --- BearerAuthenticator -----------------------------------------------------------------

ADMIN_TOKEN = "a" * 43


def test_admin_token_is_kubernetes_admin() -> None:
    authn = BearerAuthenticator(admin_token=ADMIN_TOKEN, token_authority=authority())
    assert authn.authenticate(ADMIN_TOKEN, now=NOW) == ADMIN_USER
    assert ADMIN_USER.username == "kubernetes-admin"
    assert ADMIN_USER.groups == ("system:masters", "system:authenticated")
    assert authn.authenticate(ADMIN_TOKEN[:-1], now=NOW) is None
    assert authn.authenticate(ADMIN_TOKEN + "a", now=NOW) is None


def test_authenticator_accepts_service_account_tokens() -> None:
    ta = authority()
    authn = BearerAuthenticator(admin_token=ADMIN_TOKEN, token_authority=ta)
    token, _ = mint(ta)
    user = authn.authenticate_header(f"Bearer {token}", now=NOW)
    assert user is not None
    assert user.username == "system:serviceaccount:ns:runner"
    assert authn.authenticate_header(None, now=NOW) is None
    assert authn.authenticate("\ud800", now=NOW) is None


def test_short_admin_token_refused() -> None:
    with pytest.raises(ValueError, match="admin_token"):
        BearerAuthenticator(admin_token="short", token_authority=authority())


@pytest.mark.parametrize(
    ("header", "token"),
    [
        ("Bearer abc", "abc"),
        ("bearer abc", "abc"),
        ("BEARER abc extra", "abc"),
        ("Basic abc", None),
        ("Bearer", None),
        ("Bearer ", None),
        ("", None),
        (None, None),
    ],
)
def test_bearer_token_parsing(header: str | None, token: str | None) -> None:
    assert bearer_token(header) == token


def test_admin_token_is_valid_for_the_api_audience_only() -> None:
    authn = BearerAuthenticator(admin_token=ADMIN_TOKEN, token_authority=authority())
    verified = authn.verify(ADMIN_TOKEN, now=NOW, audiences=["vault", ISSUER])
    assert verified is not None
    assert verified.audiences == [ISSUER]
    assert authn.verify(ADMIN_TOKEN, now=NOW, audiences=["vault"]) is None
