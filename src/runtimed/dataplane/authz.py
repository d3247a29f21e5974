"""The SelfSubjectAccessReview authorization cache of the invoke path (seed 000).

Seed 000, Authentication and Authorization: the receiving runtimed "submits a
SelfSubjectAccessReview and requires the caller to be allowed to get the exact Run being
invoked" (verb ``get``, resource ``runs``, group ``kruntimes.io``, the Run's namespace and
name). "Authorization decisions may be cached for at most 30 seconds and never beyond the
token's known expiry. Cache keys use a token digest plus Run namespace, name, and UID."

Design:

* every outcome (allowed, denied, unauthenticated) is cached under
  ``(sha256(token), namespace, name, uid)`` until ``min(now + 30 s, exp)``, measured on
  trio's clock (so tests run on ``autojump_clock``); the JWT ``exp`` is converted from wall
  time through the injectable :class:`~krt.kube.clock.Clock`. A token whose ``exp`` has
  passed is unauthenticated without any API request. Transport or server errors are not
  cached: the next call asks again.
* concurrent misses for one key coalesce: the first caller makes the review, the others
  wait for its outcome. If that first caller is cancelled (its client went away), a
  waiting caller takes over and asks itself, so no waiter is left hanging.
* the raw token is handed to the :class:`Reviewer` only; the cache stores digests, and
  nothing here logs a token.
* the cache is bounded (:data:`MAX_ENTRIES`): expired entries are swept on insert, and the
  oldest entry is dropped when it is full.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final, Protocol

import trio

from krt.api.constants import GROUP, RUN_PLURAL
from krt.kube.access import check_access
from krt.kube.client import Kube
from krt.kube.clock import Clock, SystemClock
from krt.kube.errors import ApiError, KubeError, Unauthorized
from runtimed.dataplane.tokens import token_digest, token_expiry

__all__ = [
    "MAX_AGE_SECONDS",
    "MAX_ENTRIES",
    "AuthzCache",
    "AuthzKey",
    "AuthzUnavailable",
    "KubeReviewer",
    "Outcome",
    "Reviewer",
]

log = logging.getLogger(__name__)

#: Longest a decision is cached (seconds; seed 000: "at most 30 seconds").
MAX_AGE_SECONDS: Final = 30.0
#: Most decisions kept at once.
MAX_ENTRIES: Final = 10_000


class Outcome(StrEnum):
    """What the API server said about a caller and a Run."""

    ALLOWED = "allowed"
    DENIED = "denied"
    """The caller is authenticated but may not ``get`` this Run (gRPC PERMISSION_DENIED)."""
    UNAUTHENTICATED = "unauthenticated"
    """The token is invalid or expired (gRPC UNAUTHENTICATED)."""


class AuthzUnavailable(Exception):
    """The review could not be made (API server unreachable or erroring); not cached."""


@dataclass(frozen=True, slots=True)
class AuthzKey:
    """The cache key: token digest plus the exact Run (seed 000)."""

    token_sha256: str
    namespace: str
    name: str
    uid: str


class Reviewer(Protocol):
    """Makes one SelfSubjectAccessReview as the caller (fakes implement it in tests)."""

    async def review(self, token: str, *, namespace: str, name: str) -> Outcome:
        """Return whether the token's identity may ``get`` Run ``namespace/name``.

        Raises:
            AuthzUnavailable: no answer from the API server.
        """
        ...


class KubeReviewer:
    """:class:`Reviewer` over the Kubernetes API (``Kube.with_token`` + SSAR).

    Args:
        kube: runtimed's client; the review is sent on a view authenticated as the caller.
    """

    def __init__(self, kube: Kube) -> None:
        self._kube = kube

    async def review(self, token: str, *, namespace: str, name: str) -> Outcome:
        """Submit the SSAR (verb ``get``, resource ``runs``, group ``kruntimes.io``).

        Raises:
            AuthzUnavailable: the API server could not be reached or answered an error
                other than 401.
        """
        try:
            caller = self._kube.with_token(token)
        except ValueError:
            return Outcome.UNAUTHENTICATED  # not a token the API server could accept
        try:
            decision = await check_access(
                caller,
                verb="get",
                resource=RUN_PLURAL,
                group=GROUP,
                namespace=namespace,
                name=name,
            )
        except Unauthorized:
            return Outcome.UNAUTHENTICATED
        except ApiError as exc:  # status and reason only: the message may name the caller
            why = f"the API server answered {exc.code}" + (f" {exc.reason}" if exc.reason else "")
            raise AuthzUnavailable(f"SelfSubjectAccessReview failed: {why}") from exc
        except KubeError as exc:
            raise AuthzUnavailable(f"SelfSubjectAccessReview failed: {exc}") from exc
        return Outcome.ALLOWED if decision.allowed else Outcome.DENIED


@dataclass(eq=False, slots=True)
class _Pending:
    """A review in progress that other callers wait for."""

    done: trio.Event = field(default_factory=trio.Event)
    outcome: Outcome | None = None
    error: AuthzUnavailable | None = None


class AuthzCache:
    """Bounded, coalescing cache of SelfSubjectAccessReview outcomes (seed 000).

    Args:
        reviewer: makes the reviews on misses.
        clock: wall clock for the token's ``exp`` (default the system clock).
        max_age: longest life of an entry, seconds (at most :data:`MAX_AGE_SECONDS`).
        max_entries: most entries kept.
        on_lookup: called with ``"hit"`` or ``"miss"`` for every lookup (metrics).

    Raises:
        ValueError: ``max_age`` not in (0, 30] or ``max_entries`` < 1.
    """

    def __init__(
        self,
        reviewer: Reviewer,
        *,
        clock: Clock | None = None,
        max_age: float = MAX_AGE_SECONDS,
        max_entries: int = MAX_ENTRIES,
        on_lookup: Callable[[str], None] | None = None,
    ) -> None:
        if not 0 < max_age <= MAX_AGE_SECONDS:
            raise ValueError(f"max_age must be in (0, {MAX_AGE_SECONDS:g}] seconds, got {max_age}")
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        self._reviewer = reviewer
        self._clock = clock or SystemClock()
        self._max_age = max_age
        self._max_entries = max_entries
        self._on_lookup = on_lookup or (lambda _result: None)
        self._entries: dict[AuthzKey, tuple[Outcome, float]] = {}
        self._pending: dict[AuthzKey, _Pending] = {}
        #: Reviews made (API requests), for tests and diagnostics.
        self.reviews = 0

    def __len__(self) -> int:
        return len(self._entries)

    def _lifetime(self, token: str) -> float:
        """Seconds a decision for ``token`` may live from now (<= 0: already expired)."""
        exp = token_expiry(token)
        if exp is None:
            return self._max_age
        return min(self._max_age, exp - self._clock.now().timestamp())

    def _cached(self, key: AuthzKey) -> Outcome | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        outcome, expires_at = entry
        if trio.current_time() >= expires_at:
            del self._entries[key]
            return None
        return outcome

    def _store(self, key: AuthzKey, outcome: Outcome, lifetime: float) -> None:
        now = trio.current_time()
        if len(self._entries) >= self._max_entries:
            for old in [k for k, (_, expires) in self._entries.items() if expires <= now]:
                del self._entries[old]
        while len(self._entries) >= self._max_entries:
            del self._entries[next(iter(self._entries))]
        self._entries.pop(key, None)
        self._entries[key] = (outcome, now + lifetime)

    async def authorize(self, token: str, *, namespace: str, name: str, uid: str) -> Outcome:
        """Return the (possibly cached) outcome for ``token`` and Run ``namespace/name/uid``.

        Args:
            token: the caller's bearer token (never stored or logged).
            namespace, name, uid: the exact Run being invoked.

        Raises:
            AuthzUnavailable: the review could not be made (nothing is cached).
        """
        key = AuthzKey(token_digest(token), namespace, name, uid)
        while True:
            cached = self._cached(key)
            if cached is not None:
                self._on_lookup("hit")
                return cached
            pending = self._pending.get(key)
            if pending is None:
                break
            await pending.done.wait()
            if pending.error is not None:
                raise pending.error
            if pending.outcome is not None:
                self._on_lookup("hit")
                return pending.outcome
            # the caller making the review was cancelled: look again, maybe take over
        self._on_lookup("miss")
        lifetime = self._lifetime(token)
        if lifetime <= 0:
            return Outcome.UNAUTHENTICATED  # exp has passed: no API request needed
        pending = _Pending()
        self._pending[key] = pending
        try:
            self.reviews += 1
            try:
                outcome = await self._reviewer.review(token, namespace=namespace, name=name)
            except AuthzUnavailable as exc:
                pending.error = exc
                raise
            pending.outcome = outcome
            # the review took time: bound the entry by what is left of the token's life
            self._store(key, outcome, min(lifetime, self._lifetime(token)))
            return outcome
        finally:
            del self._pending[key]
            pending.done.set()
