"""ServiceAccount tokens: signed JWTs shaped like Kubernetes projected tokens (issue 3).

:class:`TokenAuthority` mints the tokens ``TokenRequest`` (``serviceaccounts/token``) returns
and verifies the bearer tokens of API requests and ``TokenReview``. Tokens carry the claims
of Kubernetes bound ServiceAccount tokens::

    {"iss": ISSUER, "sub": "system:serviceaccount:NS:NAME", "aud": [...],
     "exp": ..., "iat": ..., "nbf": ..., "jti": "<uuid>",
     "kubernetes.io": {"namespace": NS, "serviceaccount": {"name", "uid"},
                       "pod": {"name", "uid"}}}      # "pod"/"secret"/"node" when bound

Signing and verification use PyJWT over ``cryptography`` keys (ES256 for a P-256 key,
RS256 for an RSA key); the header carries a ``kid`` computed as Kubernetes does (base64url
of the SHA-256 of the DER public key), so :meth:`TokenAuthority.jwks` can serve
``/openid/v1/jwks``.

Verification costs about a tenth of a millisecond per ES256 signature; since the API server
authenticates every request, verified tokens are cached by SHA-256 digest until their
``exp`` (bounded, least recently used evicted). Expiry, audience and the optional
"does the ServiceAccount / bound object still exist" hooks are re-checked on every call,
so the cache never extends a token's life.

Time is an argument (``now``, unix seconds), never read from the system clock, so tests
control it. Kubernetes accepts tokens up to 60 s past ``exp`` for clock skew; localkube has
one clock and by default accepts none (``leeway_seconds``).
"""

from __future__ import annotations

import base64
import hashlib
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from localkube.auth.types import UserInfo

SigningKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey

SaExists = Callable[[str, str, str], bool]
"""``sa_exists(namespace, name, uid) -> bool``: the ServiceAccount still exists with that uid."""

BoundObjectExists = Callable[[str, str, str, str], bool]
"""``bound_object_exists(kind, namespace, name, uid) -> bool`` for Pod/Secret-bound tokens
(``namespace`` is ``""`` for a Node)."""

BOUND_KINDS = {"Pod": "pod", "Secret": "secret", "Node": "node"}
"""Object kinds a token may be bound to, and the claim that records the binding."""

MAX_TOKEN_BYTES = 16 * 1024
"""Longer bearer strings are rejected without parsing."""

SA_PREFIX = "system:serviceaccount:"


@dataclass(frozen=True)
class VerifiedToken:
    """A token that passed verification.

    Attributes:
        user: the ServiceAccount user.
        audiences: the intersection of the token's and the requested audiences.
        expires_at: ``exp`` (unix seconds).
    """

    user: UserInfo
    audiences: list[str]
    expires_at: int


@dataclass(frozen=True)
class _Claims:
    """What the cache keeps of a token whose signature and shape were verified once."""

    namespace: str
    name: str
    uid: str
    audiences: tuple[str, ...]
    not_before: int
    expires_at: int
    bound_kind: str
    bound_name: str
    bound_uid: str
    user: UserInfo


def key_id(public_key: ec.EllipticCurvePublicKey | rsa.RSAPublicKey) -> str:
    """Return the ``kid`` Kubernetes uses: base64url (unpadded) SHA-256 of the DER SPKI."""
    der = public_key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return base64.urlsafe_b64encode(hashlib.sha256(der).digest()).rstrip(b"=").decode("ascii")


def _algorithm(key: SigningKey) -> str:
    if isinstance(key, ec.EllipticCurvePrivateKey):
        if not isinstance(key.curve, ec.SECP256R1):
            raise ValueError(f"signing_key: EC keys must use P-256 (ES256), not {key.curve.name}")
        return "ES256"
    if isinstance(key, rsa.RSAPrivateKey):
        if key.key_size < 2048:
            raise ValueError(f"signing_key: RSA keys need at least 2048 bits, got {key.key_size}")
        return "RS256"
    raise TypeError(f"signing_key: expected an EC P-256 or RSA private key, got {type(key)!r}")


def _require_name(field: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{field}: must be a non-empty string, got {value!r}")
    return value


class TokenAuthority:
    """Mints and verifies ServiceAccount JWTs for one cluster.

    Args:
        signing_key: an EC P-256 (ES256) or RSA >= 2048-bit (RS256) private key.
        issuer: the ``iss`` claim, e.g. ``https://kubernetes.default.svc.cluster.local``.
        api_audiences: audiences the API server accepts; default ``[issuer]`` (Kubernetes'
            default ``--api-audiences``). Used when a token is issued or verified without
            explicit audiences.
        sa_exists: optional hook checked on every authentication; a token whose
            ServiceAccount is gone (or has a new uid) is rejected. May be set later.
        bound_object_exists: optional hook for tokens bound to a Pod, Secret or Node.
        leeway_seconds: tolerated clock skew for ``nbf``/``exp`` (seconds, default 0).
        cache_size: maximum number of verified tokens remembered.

    Raises:
        TypeError, ValueError: unusable key, empty issuer, negative leeway or cache size.
    """

    def __init__(
        self,
        signing_key: SigningKey,
        issuer: str,
        *,
        api_audiences: Sequence[str] | None = None,
        sa_exists: SaExists | None = None,
        bound_object_exists: BoundObjectExists | None = None,
        leeway_seconds: int = 0,
        cache_size: int = 4096,
    ) -> None:
        self.algorithm = _algorithm(signing_key)
        self.issuer = _require_name("issuer", issuer)
        self.api_audiences = list(api_audiences) if api_audiences else [issuer]
        if leeway_seconds < 0:
            raise ValueError(f"leeway_seconds: must be >= 0, got {leeway_seconds}")
        if cache_size < 0:
            raise ValueError(f"cache_size: must be >= 0, got {cache_size}")
        self.sa_exists = sa_exists
        self.bound_object_exists = bound_object_exists
        self._key = signing_key
        self._public_key = signing_key.public_key()
        self.kid = key_id(self._public_key)
        self._leeway = leeway_seconds
        self._cache_size = cache_size
        self._cache: OrderedDict[bytes, _Claims] = OrderedDict()

    def issue(
        self,
        namespace: str,
        name: str,
        uid: str,
        *,
        audiences: list[str],
        expiration_seconds: int,
        now: float,
        bound_object: Mapping[str, Any] | None = None,
    ) -> tuple[str, int]:
        """Mint a token for ServiceAccount ``namespace/name``.

        Args:
            namespace, name: the ServiceAccount. uid: its ``metadata.uid``.
            audiences: intended audiences; empty means :attr:`api_audiences`.
            expiration_seconds: lifetime in seconds (> 0). TokenRequest's 600 s minimum
                is checked by ``token_request``, not here.
            now: current unix time in seconds.
            bound_object: optional ``{"kind": "Pod"|"Secret"|"Node", "name", "uid"}``
                (TokenRequest ``spec.boundObjectRef``).

        Returns:
            ``(token, exp)`` with ``exp`` in unix seconds.

        Raises:
            ValueError: an empty name, bad lifetime, bad audience or bound object.
        """
        _require_name("namespace", namespace)
        _require_name("name", name)
        if not isinstance(uid, str):
            raise ValueError(f"uid: must be a string, got {uid!r}")
        if isinstance(expiration_seconds, bool) or not isinstance(expiration_seconds, int):
            raise ValueError(f"expiration_seconds: must be an integer, got {expiration_seconds!r}")
        if expiration_seconds <= 0:
            raise ValueError(f"expiration_seconds: must be positive, got {expiration_seconds}")
        for index, audience in enumerate(audiences):
            _require_name(f"audiences[{index}]", audience)
        issued_at = int(now)
        expires_at = issued_at + expiration_seconds
        private: dict[str, Any] = {
            "namespace": namespace,
            "serviceaccount": {"name": name, "uid": uid},
        }
        if bound_object is not None:
            kind = bound_object.get("kind")
            if kind not in BOUND_KINDS:
                raise ValueError(
                    f"bound_object.kind: must be one of {sorted(BOUND_KINDS)}, got {kind!r}"
                )
            private[BOUND_KINDS[kind]] = {
                "name": _require_name("bound_object.name", bound_object.get("name")),
                "uid": _require_name("bound_object.uid", bound_object.get("uid")),
            }
        claims = {
            "iss": self.issuer,
            "sub": f"{SA_PREFIX}{namespace}:{name}",
            "aud": list(audiences) or list(self.api_audiences),
            "exp": expires_at,
            "iat": issued_at,
            "nbf": issued_at,
            "jti": str(uuid.uuid4()),
            "kubernetes.io": private,
        }
        token = jwt.encode(claims, self._key, algorithm=self.algorithm, headers={"kid": self.kid})
        return token, expires_at

    def authenticate(
        self, token: str, *, now: float, audiences: list[str] | None = None
    ) -> UserInfo | None:
        """Return the ServiceAccount user of a valid token, else None.

        Args:
            token: the bearer string (anything: garbage returns None, never raises).
            now: current unix time in seconds.
            audiences: acceptable audiences (one must be in the token's ``aud``); None or
                empty means :attr:`api_audiences`.

        Returns:
            ``UserInfo(system:serviceaccount:NS:NAME, groups=(system:serviceaccounts,
            system:serviceaccounts:NS, system:authenticated), uid=SA uid, extra=...)`` or
            None for forged, malformed, not yet valid, expired or wrong-audience tokens and
            for tokens whose ServiceAccount or bound object the hooks report gone.

        Raises:
            Only what the ``sa_exists`` / ``bound_object_exists`` hooks raise (a storage
            failure is a server error, not an unauthenticated caller).
        """
        verified = self.verify(token, now=now, audiences=audiences)
        return verified.user if verified else None

    def verify(
        self, token: str, *, now: float, audiences: list[str] | None = None
    ) -> VerifiedToken | None:
        """Like :meth:`authenticate`, also returning the matched audiences and expiry."""
        claims = self._claims(token)
        if claims is None:
            return None
        if now + self._leeway < claims.not_before or now >= claims.expires_at + self._leeway:
            return None
        wanted = audiences or self.api_audiences
        matched = [a for a in wanted if a in claims.audiences]
        if not matched:
            return None
        if self.sa_exists is not None and not self.sa_exists(
            claims.namespace, claims.name, claims.uid
        ):
            return None
        if claims.bound_kind and self.bound_object_exists is not None:
            bound_namespace = "" if claims.bound_kind == "Node" else claims.namespace
            if not self.bound_object_exists(
                claims.bound_kind, bound_namespace, claims.bound_name, claims.bound_uid
            ):
                return None
        return VerifiedToken(claims.user, matched, claims.expires_at)

    def _claims(self, token: object) -> _Claims | None:
        """Return the verified claims of ``token`` (cached), or None if it is not ours."""
        if not isinstance(token, str) or len(token) > MAX_TOKEN_BYTES or token.count(".") != 2:
            return None
        digest = hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
        cached = self._cache.get(digest)
        if cached is not None:
            self._cache.move_to_end(digest)
            return cached
        try:
            header = jwt.get_unverified_header(token)
            if header.get("alg") != self.algorithm:
                return None
            payload = jwt.decode(
                token,
                self._public_key,
                algorithms=[self.algorithm],
                options={
                    "verify_exp": False,  # checked against the caller's ``now``
                    "verify_nbf": False,
                    "verify_iat": False,
                    "verify_aud": False,
                    "verify_iss": False,
                },
            )
            claims = _parse_claims(payload, self.issuer)
        except (jwt.PyJWTError, ValueError, TypeError, KeyError, AttributeError):
            return None
        if claims is not None and self._cache_size:
            self._cache[digest] = claims
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return claims

    def forget_expired(self, *, now: float) -> None:
        """Drop cached tokens whose ``exp`` has passed (optional housekeeping)."""
        for digest in [d for d, c in self._cache.items() if c.expires_at + self._leeway <= now]:
            del self._cache[digest]

    def jwks(self) -> dict[str, Any]:
        """Return the JSON Web Key Set of the verification key (``/openid/v1/jwks``)."""
        if isinstance(self._public_key, ec.EllipticCurvePublicKey):
            jwk = jwt.algorithms.ECAlgorithm.to_jwk(self._public_key, as_dict=True)
        else:
            jwk = jwt.algorithms.RSAAlgorithm.to_jwk(self._public_key, as_dict=True)
        jwk.update({"kid": self.kid, "use": "sig", "alg": self.algorithm})
        return {"keys": [jwk]}

    def openid_configuration(self) -> dict[str, Any]:
        """Return the OIDC discovery document (``/.well-known/openid-configuration``)."""
        return {
            "issuer": self.issuer,
            "jwks_uri": f"{self.issuer}/openid/v1/jwks",
            "response_types_supported": ["id_token"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": [self.algorithm],
        }


def _int_claim(payload: Mapping[str, Any], key: str) -> int:
    value = payload[key]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{key} is not a number")
    return int(value)


def _parse_claims(payload: Mapping[str, Any], issuer: str) -> _Claims | None:
    """Check the shape of a signature-verified payload and build the user from it."""
    if payload.get("iss") != issuer:
        return None
    private = payload["kubernetes.io"]
    namespace = private["namespace"]
    service_account = private["serviceaccount"]
    name, uid = service_account["name"], service_account["uid"]
    if not all(isinstance(v, str) for v in (namespace, name, uid)) or not namespace or not name:
        return None
    if payload.get("sub") != f"{SA_PREFIX}{namespace}:{name}":
        return None
    aud = payload["aud"]
    audiences = (aud,) if isinstance(aud, str) else tuple(a for a in aud if isinstance(a, str))
    extra: dict[str, list[str]] = {}
    bound_kind = bound_name = bound_uid = ""
    for kind, claim in BOUND_KINDS.items():
        ref = private.get(claim)
        if isinstance(ref, Mapping):
            bound_kind, bound_name, bound_uid = kind, str(ref["name"]), str(ref["uid"])
            extra[f"authentication.kubernetes.io/{claim}-name"] = [bound_name]
            extra[f"authentication.kubernetes.io/{claim}-uid"] = [bound_uid]
    jti = payload.get("jti")
    if isinstance(jti, str) and jti:
        extra["authentication.kubernetes.io/credential-id"] = [f"JTI={jti}"]
    user = UserInfo(
        username=f"{SA_PREFIX}{namespace}:{name}",
        groups=(
            "system:serviceaccounts",
            f"system:serviceaccounts:{namespace}",
            "system:authenticated",
        ),
        uid=uid,
        extra=extra,
    )
    return _Claims(
        namespace=namespace,
        name=name,
        uid=uid,
        audiences=audiences,
        not_before=_int_claim(payload, "nbf"),
        expires_at=_int_claim(payload, "exp"),
        bound_kind=bound_kind,
        bound_name=bound_name,
        bound_uid=bound_uid,
        user=user,
    )
