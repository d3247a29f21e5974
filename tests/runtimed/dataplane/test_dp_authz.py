"""The SelfSubjectAccessReview cache (seed 000, Authentication and Authorization).

Virtual time (``autojump_clock``); the wall clock is linked to trio's so a JWT ``exp`` and
the 30-second bound are measured on the same time line.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import jwt
import pytest
import trio

from krt.kube.clock import TrioLinkedClock
from runtimed.dataplane.authz import (
    MAX_AGE_SECONDS,
    AuthzCache,
    AuthzUnavailable,
    Outcome,
)
from runtimed.dataplane.tokens import TokenError, bearer_token, token_digest, token_expiry

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


def make_jwt(exp_in: float, *, sub: str = "system:serviceaccount:ns:caller") -> str:
    """An HS256 JWT whose ``exp`` is ``exp_in`` seconds after the clock's epoch + trio now."""
    exp = EPOCH.timestamp() + trio.current_time() + exp_in
    return jwt.encode({"sub": sub, "exp": exp}, "k" * 32, algorithm="HS256")


class FakeReviewer:
    """Answers from a table; counts reviews; can block until released."""

    def __init__(self, outcome: Outcome = Outcome.ALLOWED) -> None:
        self.outcome = outcome
        self.calls: list[tuple[str, str]] = []
        self.release: trio.Event | None = None
        self.fail = False

    async def review(self, token: str, *, namespace: str, name: str) -> Outcome:
        self.calls.append((namespace, name))
        if self.release is not None:
            await self.release.wait()
        if self.fail:
            raise AuthzUnavailable("API server down")
        return self.outcome


def cache_for(reviewer: FakeReviewer) -> AuthzCache:
    return AuthzCache(reviewer, clock=TrioLinkedClock(EPOCH))


async def ask(cache: AuthzCache, token: str, name: str = "fn", uid: str = "u1") -> Outcome:
    return await cache.authorize(token, namespace="ns", name=name, uid=uid)


async def test_opaque_token_decision_lives_30_seconds(autojump_clock: object) -> None:
    reviewer = FakeReviewer()
    cache = cache_for(reviewer)
    assert await ask(cache, "opaque-token") is Outcome.ALLOWED
    await trio.sleep(MAX_AGE_SECONDS - 0.01)
    assert await ask(cache, "opaque-token") is Outcome.ALLOWED
    assert len(reviewer.calls) == 1  # cached: no API traffic
    await trio.sleep(0.02)
    assert await ask(cache, "opaque-token") is Outcome.ALLOWED
    assert len(reviewer.calls) == 2  # 30 s passed: asked again


async def test_decision_never_outlives_the_token_exp(autojump_clock: object) -> None:
    reviewer = FakeReviewer()
    cache = cache_for(reviewer)
    token = make_jwt(10)
    assert await ask(cache, token) is Outcome.ALLOWED
    await trio.sleep(9.9)
    assert await ask(cache, token) is Outcome.ALLOWED
    assert len(reviewer.calls) == 1
    await trio.sleep(0.2)  # past exp: the entry is gone, and the token is known expired
    assert await ask(cache, token) is Outcome.UNAUTHENTICATED
    assert len(reviewer.calls) == 1  # an expired token costs no API request


async def test_long_lived_jwt_is_still_bounded_by_30_seconds(autojump_clock: object) -> None:
    reviewer = FakeReviewer()
    cache = cache_for(reviewer)
    token = make_jwt(3600)
    await ask(cache, token)
    await trio.sleep(MAX_AGE_SECONDS + 0.01)
    await ask(cache, token)
    assert len(reviewer.calls) == 2


async def test_key_is_token_digest_namespace_name_and_uid(autojump_clock: object) -> None:
    reviewer = FakeReviewer()
    cache = cache_for(reviewer)
    await ask(cache, "t1")
    await ask(cache, "t1", uid="u2")  # same name, new Run object (name reuse)
    await ask(cache, "t1", name="other")
    await ask(cache, "t2")
    await ask(cache, "t1")
    assert len(reviewer.calls) == 4


async def test_denied_and_unauthenticated_are_cached_too(autojump_clock: object) -> None:
    for outcome in (Outcome.DENIED, Outcome.UNAUTHENTICATED):
        reviewer = FakeReviewer(outcome)
        cache = cache_for(reviewer)
        assert await ask(cache, "t") is outcome
        assert await ask(cache, "t") is outcome
        assert len(reviewer.calls) == 1


async def test_api_errors_are_not_cached(autojump_clock: object) -> None:
    reviewer = FakeReviewer()
    reviewer.fail = True
    cache = cache_for(reviewer)
    with pytest.raises(AuthzUnavailable):
        await ask(cache, "t")
    reviewer.fail = False
    assert await ask(cache, "t") is Outcome.ALLOWED
    assert len(reviewer.calls) == 2


async def test_concurrent_misses_coalesce_into_one_review(autojump_clock: object) -> None:
    reviewer = FakeReviewer()
    reviewer.release = trio.Event()
    lookups: list[str] = []
    cache = AuthzCache(reviewer, clock=TrioLinkedClock(EPOCH), on_lookup=lookups.append)
    results: list[Outcome] = []

    async def one() -> None:
        results.append(await ask(cache, "t"))

    async with trio.open_nursery() as nursery:
        for _ in range(5):
            nursery.start_soon(one)
        await trio.sleep(1)
        assert len(reviewer.calls) == 1
        reviewer.release.set()
    assert results == [Outcome.ALLOWED] * 5
    assert len(reviewer.calls) == 1
    assert lookups.count("miss") == 1
    assert lookups.count("hit") == 4


async def test_cancelled_first_caller_hands_over_to_a_waiter(autojump_clock: object) -> None:
    reviewer = FakeReviewer()
    reviewer.release = trio.Event()
    cache = cache_for(reviewer)
    results: list[Outcome] = []

    async def waiter() -> None:
        results.append(await ask(cache, "t"))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)  # runs after the first caller below took the lead
        with trio.move_on_after(1):
            await ask(cache, "t")  # leads the review; then its client goes away
        reviewer.release.set()
    assert results == [Outcome.ALLOWED]
    assert len(reviewer.calls) == 2  # the waiter took over with its own review


async def test_cache_is_bounded(autojump_clock: object) -> None:
    reviewer = FakeReviewer()
    cache = AuthzCache(reviewer, clock=TrioLinkedClock(EPOCH), max_entries=3)
    for index in range(10):
        await ask(cache, f"t{index}")
    assert len(cache) == 3


def test_bad_settings_are_rejected() -> None:
    with pytest.raises(ValueError, match="max_age"):
        AuthzCache(FakeReviewer(), max_age=31)
    with pytest.raises(ValueError, match="max_entries"):
        AuthzCache(FakeReviewer(), max_entries=0)


def test_bearer_token_parsing_never_echoes_the_token() -> None:
    assert bearer_token([("authorization", "Bearer abc.def")]) == "abc.def"
    assert bearer_token([("authorization", "bearer abc")]) == "abc"
    for metadata in (
        [],
        [("authorization", "Basic c2VjcmV0")],
        [("authorization", "Bearer ")],
        [("authorization", "Bearer se cret")],
        [("authorization", "Bearer a"), ("authorization", "Bearer b")],
    ):
        with pytest.raises(TokenError) as info:
            bearer_token(metadata)
        assert "secret" not in str(info.value)
        assert "c2VjcmV0" not in str(info.value)


def test_token_expiry_and_digest() -> None:
    token = jwt.encode({"exp": 1234567890}, "k" * 32, algorithm="HS256")
    assert token_expiry(token) == 1234567890.0
    assert token_expiry("opaque") is None
    assert token_expiry(jwt.encode({"sub": "x"}, "k" * 32, algorithm="HS256")) is None
    assert len(token_digest("t")) == 64
    assert token_digest("t") != token_digest("u")


async def test_no_raw_token_in_logs(
    autojump_clock: object, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    reviewer = FakeReviewer()
    reviewer.fail = True
    cache = cache_for(reviewer)
    token = make_jwt(100)
    with pytest.raises(AuthzUnavailable) as info:
        await ask(cache, token)
    assert token not in caplog.text
    assert token not in str(info.value)
