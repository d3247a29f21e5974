"""Caller bearer tokens on the invoke path: extraction, digest and the unverified ``exp``.

Seed 000, Authentication and Authorization: the receiving runtimed authorizes the caller
with a SelfSubjectAccessReview made *with the caller's token*; decisions are cached "at most
30 seconds and never beyond the token's known expiry", keyed by "a token digest plus Run
namespace, name, and UID", and "raw tokens are never logged". This module holds the three
token facts the cache needs, so the raw token never travels further than the review itself:

* :func:`bearer_token` reads ``authorization: Bearer <token>`` from gRPC metadata;
* :func:`token_digest` is the cache key part (SHA-256, hex);
* :func:`token_expiry` decodes a JWT's ``exp`` claim *without verifying the signature*
  (PyJWT), only to bound the cache; the API server remains the one that verifies the token.
  Opaque (non-JWT) tokens have no known expiry.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

import jwt

__all__ = ["TokenError", "bearer_token", "token_digest", "token_expiry"]

_PREFIX = "bearer "
#: A token: one or more visible ASCII characters (a regex: tokens are ~1 KiB JWTs, and a
#: per-character Python loop cost tens of microseconds on every invocation).
_VISIBLE_ASCII = re.compile(r"[\x21-\x7e]+")


class TokenError(ValueError):
    """The ``authorization`` metadata is absent or not one ``Bearer <token>`` value."""


def bearer_token(metadata: Iterable[tuple[str, str]]) -> str:
    """Return the caller's bearer token from gRPC metadata.

    Args:
        metadata: ``(name, value)`` pairs with lowercase names (purerpc's custom metadata).

    Returns:
        The token (printable ASCII, no whitespace).

    Raises:
        TokenError: no ``authorization`` entry, more than one, a scheme other than
            ``Bearer``, or a token that is empty or has whitespace/control characters. The
            message never contains the token.
    """
    values = [value for name, value in metadata if name == "authorization"]
    if not values:
        raise TokenError("no bearer token: the call has no 'authorization' metadata")
    if len(values) > 1:
        raise TokenError(f"'authorization' metadata sent {len(values)} times; expected once")
    value = values[0]
    if value[: len(_PREFIX)].lower() != _PREFIX:
        raise TokenError("'authorization' metadata is not of the form 'Bearer <token>'")
    token = value[len(_PREFIX) :].strip()
    if not _VISIBLE_ASCII.fullmatch(token):
        raise TokenError("the bearer token is empty or has whitespace or control characters")
    return token


def token_digest(token: str) -> str:
    """SHA-256 of the token (64 lowercase hex characters): the cache key part, safe to log."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def token_expiry(token: str) -> float | None:
    """The JWT ``exp`` claim in unix seconds, read without verification; ``None`` if unknown.

    Only bounds how long a decision is cached: a forged ``exp`` can only shorten the cache
    life of the forger's own token, because the API server verifies the token on every
    cache miss.

    Args:
        token: a bearer token.

    Returns:
        ``exp`` as a float, or ``None`` for an opaque token, a JWT without a numeric
        ``exp``, or anything PyJWT cannot decode.
    """
    try:
        claims = jwt.decode(
            token,
            options={
                "verify_signature": False,
                "verify_exp": False,
                "verify_nbf": False,
                "verify_iat": False,
                "verify_aud": False,
                "verify_iss": False,
            },
        )
    except jwt.PyJWTError:
        return None
    exp = claims.get("exp") if isinstance(claims, dict) else None
    if isinstance(exp, bool) or not isinstance(exp, int | float):
        return None
    return float(exp)
