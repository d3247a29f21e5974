"""Bearer-token authentication for the API server (issue 3, "Authentication").

Two kinds of bearer token are accepted, as on a kubeadm cluster whose admin kubeconfig
holds a static token:

* the cluster's admin token (from the kubeconfig ``localkube apiserver`` writes), which
  authenticates as ``kubernetes-admin`` in ``system:masters``;
* ServiceAccount JWTs minted by ``TokenRequest`` (see ``tokens.TokenAuthority``).

Anything else is unauthenticated: the API server answers 401.
"""

from __future__ import annotations

import hmac

from localkube.auth.tokens import TokenAuthority, VerifiedToken
from localkube.auth.types import UserInfo

ADMIN_USER = UserInfo(
    username="kubernetes-admin",
    groups=("system:masters", "system:authenticated"),
)
"""Who the admin token authenticates as."""

ANONYMOUS_USER = UserInfo(username="system:anonymous", groups=("system:unauthenticated",))
"""The user of a request without credentials, should the server allow anonymous requests."""


def bearer_token(authorization: str | None) -> str | None:
    """Extract the token from an ``Authorization`` header value, as kube-apiserver does.

    Returns:
        The token of ``Bearer <token>`` (scheme case-insensitive), or None when the header
        is absent, uses another scheme or has no token.
    """
    if not authorization:
        return None
    parts = authorization.strip().split(" ", 2)
    if len(parts) < 2 or parts[0].lower() != "bearer" or not parts[1]:
        return None
    return parts[1]


class BearerAuthenticator:
    """Authenticates bearer tokens: the admin token first, then ServiceAccount JWTs.

    Args:
        admin_token: the static admin token (compared in constant time).
        token_authority: verifies ServiceAccount tokens.

    Raises:
        ValueError: an admin token shorter than 16 characters.
    """

    def __init__(self, *, admin_token: str, token_authority: TokenAuthority) -> None:
        if len(admin_token) < 16:
            raise ValueError("admin_token: must be at least 16 characters")
        self._admin_token = admin_token.encode("utf-8")
        self.token_authority = token_authority

    def verify(
        self, token: str, *, now: float, audiences: list[str] | None = None
    ) -> VerifiedToken | None:
        """Return the verified token (user, matched audiences, expiry) or None.

        The admin token is valid for the API audiences only (Kubernetes wraps static
        tokens as audience-agnostic: a review asking for other audiences fails) and never
        expires (``expires_at`` 0).

        Args:
            token: the bearer string; any garbage returns None.
            now: current unix time in seconds.
            audiences: acceptable audiences; None means the API audiences.
        """
        if not isinstance(token, str):
            return None
        try:
            encoded = token.encode("utf-8")
        except UnicodeEncodeError:
            return None
        if hmac.compare_digest(encoded, self._admin_token):
            api = self.token_authority.api_audiences
            matched = [a for a in audiences if a in api] if audiences else list(api)
            return VerifiedToken(ADMIN_USER, matched, 0) if matched else None
        return self.token_authority.verify(token, now=now, audiences=audiences)

    def authenticate(
        self, token: str, *, now: float, audiences: list[str] | None = None
    ) -> UserInfo | None:
        """Return the user a bearer token authenticates as, or None (answer 401)."""
        verified = self.verify(token, now=now, audiences=audiences)
        return verified.user if verified else None

    def authenticate_header(self, authorization: str | None, *, now: float) -> UserInfo | None:
        """Authenticate an ``Authorization`` header value for the API audiences."""
        token = bearer_token(authorization)
        return None if token is None else self.authenticate(token, now=now)
