"""The authenticated caller of the request being served, for admission checks.

kube-apiserver's admission plugins read the user from the request context; localkube's
do the same through this context variable, set by the HTTP layer for each request.
Writes made by the server itself (bootstrap, controllers) run with no user and are
treated as privileged, like kube-apiserver's loopback client.
"""

from __future__ import annotations

from contextvars import ContextVar

from localkube.auth.types import UserInfo

CURRENT_USER: ContextVar[UserInfo | None] = ContextVar("localkube_request_user", default=None)
"""The caller of the current request; None outside requests (server-internal writes)."""
