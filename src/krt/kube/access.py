"""Ask the API server whether the caller may do something: SelfSubjectAccessReview.

Seed 000 (gateway authorization): the receiving runtimed submits a SelfSubjectAccessReview
*with the invoker's bearer token* and requires the caller to be allowed to ``get`` the exact
Run being invoked. This keeps namespace RBAC authoritative without granting runtimed
TokenReview or SubjectAccessReview rights. Pair :func:`check_access` with
:meth:`krt.kube.client.Kube.with_token` so the review is made as the caller; caching the
decision (at most 30 s, never past the token's expiry) is the caller's job.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from krt.kube.interface import KubeClient
from krt.kube.resources import SELFSUBJECTACCESSREVIEWS

__all__ = ["AccessDecision", "check_access"]


@dataclass(frozen=True, slots=True)
class AccessDecision:
    """The API server's answer to a SelfSubjectAccessReview.

    Attributes:
        allowed: the action is permitted.
        denied: explicitly denied (an authorizer said no, not merely no rule allowing it).
        reason: the authorizer's explanation, possibly empty.
        evaluation_error: set when the authorizer could not evaluate all rules.
    """

    allowed: bool
    denied: bool = False
    reason: str = ""
    evaluation_error: str = ""


async def check_access(
    kube: KubeClient,
    *,
    verb: str,
    resource: str,
    group: str = "",
    namespace: str | None = None,
    name: str | None = None,
    subresource: str | None = None,
) -> AccessDecision:
    """Submit a SelfSubjectAccessReview for the identity ``kube`` authenticates as.

    Args:
        kube: the client; use ``kube.with_token(caller_token)`` to ask for a caller.
        verb: e.g. ``get``.
        resource: plural resource name, e.g. ``runs``.
        group: API group, e.g. ``kruntimes.io`` (``""`` for the core group).
        namespace: the namespace, or None for cluster-wide.
        name: one object's name, or None for any.
        subresource: e.g. ``status``, or None.

    Returns:
        The decision.

    Raises:
        Unauthorized: the token is invalid or expired (the caller gets 401, not 403).
        ApiError, ConnectionFailed: the review could not be made.
        ValueError: empty verb or resource.
    """
    if not verb or not resource:
        raise ValueError("verb and resource must not be empty")
    attributes: dict[str, Any] = {"verb": verb, "resource": resource, "group": group}
    if namespace:
        attributes["namespace"] = namespace
    if name:
        attributes["name"] = name
    if subresource:
        attributes["subresource"] = subresource
    review = await kube.create(
        SELFSUBJECTACCESSREVIEWS,
        {"metadata": {}, "spec": {"resourceAttributes": attributes}},
    )
    status = review.get("status") or {}
    return AccessDecision(
        allowed=bool(status.get("allowed")),
        denied=bool(status.get("denied")),
        reason=str(status.get("reason") or ""),
        evaluation_error=str(status.get("evaluationError") or ""),
    )
