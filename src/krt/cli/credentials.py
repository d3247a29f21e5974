"""The bearer token ``krt invoke`` sends to the gateway (seed 000, Authentication).

The gateway (through runtimed) authorizes the caller with a SelfSubjectAccessReview made with
the caller's own token, which must be valid for the Kubernetes API audience. The token is,
first that applies:

1. with ``--service-account`` (``KRT_SERVICE_ACCOUNT``), a short-lived token from a
   TokenRequest (``serviceaccounts/{name}/token``) for that ServiceAccount, whatever the
   kubeconfig holds: an explicit identity applies or the command fails (like kubectl's
   ``--as``), it is never silently replaced by the kubeconfig's own;
2. else the kubeconfig's (or in-cluster ServiceAccount's) bearer token, as kr8s loaded it
   (static ``token``, ``tokenFile``, exec plugins, OIDC ``id-token``);
3. where there is none (client-certificate users, e.g. kind's admin), a TokenRequest token
   for the current identity when a SelfSubjectReview shows it is a ServiceAccount.

Tokens are never printed or logged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from krt.cli.exitcodes import ExitCode, for_http_status
from krt.cli.failures import CommandFailed
from krt.kube.errors import ApiError
from krt.kube.resources import SERVICEACCOUNTS, ResourceRef

if TYPE_CHECKING:
    from krt.kube.client import Kube  # kr8s is imported only when a command connects

SELFSUBJECTREVIEWS = ResourceRef(
    "authentication.k8s.io", "v1", "selfsubjectreviews", False, "SelfSubjectReview"
)
#: Lifetime asked for a TokenRequest token (seconds; the API's minimum is 600).
TOKEN_SECONDS = 600
SERVICEACCOUNT_PREFIX = "system:serviceaccount:"


@dataclass(frozen=True)
class ServiceAccountRef:
    """A ServiceAccount to request a token for.

    Attributes:
        namespace: its namespace; ``""`` for a bare ``NAME`` before the command's
            namespace (``-n``, else the context's, else ``default``) is known.
        name: its name.
    """

    namespace: str
    name: str

    def in_namespace(self, namespace: str) -> ServiceAccountRef:
        """This reference, with ``namespace`` filled in when it has none yet."""
        return self if self.namespace else ServiceAccountRef(namespace, self.name)


def parse_service_account(text: str, default_namespace: str = "") -> ServiceAccountRef:
    """Read ``NAME`` or ``NAMESPACE/NAME`` (or ``system:serviceaccount:NS:NAME``).

    Args:
        text: the flag's value.
        default_namespace: the namespace of a bare ``NAME``; ``""`` leaves it to be filled
            in once connected (:meth:`ServiceAccountRef.in_namespace`).

    Raises:
        ValueError: an empty name, or an empty namespace in the ``NAMESPACE/NAME`` or
            ``system:serviceaccount:NS:NAME`` forms.
    """
    if text.startswith(SERVICEACCOUNT_PREFIX):
        namespace, _, name = text[len(SERVICEACCOUNT_PREFIX) :].partition(":")
        explicit = True
    elif "/" in text:
        namespace, _, name = text.partition("/")
        explicit = True
    else:
        namespace, name, explicit = default_namespace, text, False
    if not name or (explicit and not namespace):
        raise ValueError(f"{text!r} is not NAME, NAMESPACE/NAME or system:serviceaccount:NS:NAME")
    return ServiceAccountRef(namespace, name)


def kubeconfig_token(kube: Kube) -> str | None:
    """The bearer token the client authenticates with, or None (client certificates)."""
    token = getattr(kube.api.auth, "token", None)
    return token.strip() if isinstance(token, str) and token.strip() else None


async def current_service_account(kube: Kube) -> ServiceAccountRef | None:
    """Who am I (SelfSubjectReview)? The ServiceAccount, or None for another kind of user.

    Raises:
        ApiError: the review failed (e.g. 403 on clusters older than 1.28).
    """
    review = await kube.request(
        "POST",
        SELFSUBJECTREVIEWS,
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
    )
    username = str(((review.get("status") or {}).get("userInfo") or {}).get("username") or "")
    if not username.startswith(SERVICEACCOUNT_PREFIX):
        return None
    return parse_service_account(username, "")


async def request_token(kube: Kube, account: ServiceAccountRef) -> str:
    """A TokenRequest for ``account`` (API audience, :data:`TOKEN_SECONDS`).

    Raises:
        ApiError: e.g. 403 when RBAC does not allow ``create serviceaccounts/token``,
            404 for an unknown ServiceAccount.
    """
    answer = await kube.request(
        "POST",
        SERVICEACCOUNTS,
        namespace=account.namespace,
        name=account.name,
        subresource="token",
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": TOKEN_SECONDS},
        },
    )
    token = (answer.get("status") or {}).get("token")
    if not isinstance(token, str) or not token:
        raise CommandFailed(
            ExitCode.SERVER_ERROR,
            f"TokenRequest for {account.namespace}/{account.name} returned no token",
        )
    return token


async def invoke_token(kube: Kube, *, service_account: ServiceAccountRef | None) -> str:
    """Choose the bearer token for an invocation (see the module docstring for the order).

    Args:
        kube: the client connected with the user's kubeconfig.
        service_account: ``--service-account``; when given, always used (a bare name is in
            ``kube.namespace``), even if the kubeconfig has a token of its own.

    Returns:
        The token.

    Raises:
        CommandFailed: no token can be had (exit code 4, with what to do about it), or a
            TokenRequest was refused (e.g. 403 without ``create serviceaccounts/token``, 404
            for an unknown ServiceAccount).
    """
    account = service_account.in_namespace(kube.namespace) if service_account else None
    if account is None:
        token = kubeconfig_token(kube)
        if token is not None:
            return token
        try:
            account = await current_service_account(kube)
        except ApiError:
            account = None
    if account is None:
        raise CommandFailed(
            ExitCode.UNAUTHENTICATED,
            "the kubeconfig authenticates without a bearer token (client certificate?), and the "
            "gateway needs one: pass --service-account NAMESPACE/NAME to use a TokenRequest "
            "token of a ServiceAccount allowed to get the Run",
        )
    try:
        return await request_token(kube, account)
    except ApiError as exc:
        raise CommandFailed(
            for_http_status(exc.code, exc.reason),
            f"cannot get a token for ServiceAccount {account.namespace}/{account.name}: "
            f"{exc.message or exc}",
        ) from exc
