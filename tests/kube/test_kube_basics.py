"""Pure pieces: RFC 3339 times and clocks, Status -> exception mapping, URLs, backoff."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta, timezone

import pytest
import trio
import trio.testing

from krt.kube import errors
from krt.kube.backoff import Backoff
from krt.kube.clock import (
    Clock,
    FakeClock,
    SystemClock,
    TrioLinkedClock,
    format_micro_time,
    format_time,
    parse_time,
)
from krt.kube.resources import (
    DEPLOYMENTS,
    LEASES,
    NAMESPACES,
    PODS,
    RUNS,
    RUNTIMES,
    SELFSUBJECTACCESSREVIEWS,
    ResourceRef,
)

# -- clock -----------------------------------------------------------------------------


def test_formats_are_kubernetes_time_and_microtime() -> None:
    moment = datetime(2026, 11, 29, 9, 30, 1, 123456, tzinfo=timezone(timedelta(hours=1)))
    assert format_time(moment) == "2026-11-29T08:30:01Z"
    assert format_micro_time(moment) == "2026-11-29T08:30:01.123456Z"
    with pytest.raises(ValueError, match="naive"):
        format_time(datetime(2026, 1, 1))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-11-29T08:30:01Z", datetime(2026, 11, 29, 8, 30, 1, tzinfo=UTC)),
        ("2026-11-29T08:30:01.5Z", datetime(2026, 11, 29, 8, 30, 1, 500000, tzinfo=UTC)),
        ("2026-11-29T08:30:01.123456789Z", datetime(2026, 11, 29, 8, 30, 1, 123456, tzinfo=UTC)),
        ("2026-11-29T09:30:01+01:00", datetime(2026, 11, 29, 8, 30, 1, tzinfo=UTC)),
        ("2026-11-29t08:30:01z", datetime(2026, 11, 29, 8, 30, 1, tzinfo=UTC)),
    ],
)
def test_parse_time(text: str, expected: datetime) -> None:
    assert parse_time(text) == expected
    assert parse_time(text).tzinfo == UTC


@pytest.mark.parametrize(
    "bad", ["", "2026-11-29", "2026-11-29T08:30:01", "2026-13-01T00:00:00Z", "now", 17]
)
def test_parse_time_rejects(bad: object) -> None:
    with pytest.raises(ValueError, match="RFC 3339"):
        parse_time(bad)  # type: ignore[arg-type]


def test_roundtrip_micro_time() -> None:
    moment = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    assert parse_time(format_micro_time(moment)) == moment


def test_clocks() -> None:
    fake = FakeClock(datetime(2026, 1, 1, tzinfo=UTC))
    fake.advance(1.5)
    assert fake.now() == datetime(2026, 1, 1, 0, 0, 1, 500000, tzinfo=UTC)
    fake.set(datetime(2027, 1, 1, tzinfo=UTC))
    assert fake.now().year == 2027
    with pytest.raises(ValueError, match="timezone-aware"):
        FakeClock(datetime(2026, 1, 1))
    with pytest.raises(ValueError, match="timezone-aware"):
        fake.set(datetime(2026, 1, 1))
    assert isinstance(fake, Clock)
    assert isinstance(SystemClock(), Clock)
    assert SystemClock().now().tzinfo is not None


async def test_trio_linked_clock_follows_virtual_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    clock = TrioLinkedClock(datetime(2026, 1, 1, tzinfo=UTC))
    await trio.sleep(90)
    assert clock.now() == datetime(2026, 1, 1, 0, 1, 30, tzinfo=UTC)


# -- errors ----------------------------------------------------------------------------


def status(code: int, reason: str, **details: object) -> dict[str, object]:
    return {
        "kind": "Status",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": f"{reason} happened",
        "details": details,
    }


@pytest.mark.parametrize(
    ("code", "reason", "cls"),
    [
        (400, "BadRequest", errors.BadRequest),
        (401, "Unauthorized", errors.Unauthorized),
        (403, "Forbidden", errors.Forbidden),
        (404, "NotFound", errors.NotFound),
        (405, "MethodNotAllowed", errors.MethodNotAllowed),
        (409, "Conflict", errors.Conflict),
        (409, "AlreadyExists", errors.AlreadyExists),
        (410, "Expired", errors.Gone),
        (422, "Invalid", errors.Invalid),
        (429, "TooManyRequests", errors.TooManyRequests),
        (500, "InternalError", errors.ServerError),
        (503, "ServiceUnavailable", errors.ServerError),
        (504, "Timeout", errors.ServerTimeout),
        (418, "Teapot", errors.ApiError),
    ],
)
def test_status_maps_to_class(code: int, reason: str, cls: type[errors.ApiError]) -> None:
    error = errors.error_from_status(code, status(code, reason))
    assert type(error) is cls
    assert (error.code, error.reason, error.message) == (code, reason, f"{reason} happened")
    assert isinstance(error, errors.ApiError)
    assert isinstance(error, errors.KubeError)


def test_causes_and_retry_after_are_parsed() -> None:
    error = errors.error_from_status(
        422,
        status(
            422,
            "Invalid",
            causes=[
                {"reason": "FieldValueInvalid", "message": "bad", "field": "spec.timeout"},
                "junk",
            ],
        ),
    )
    assert error.causes == (errors.Cause("FieldValueInvalid", "bad", "spec.timeout"),)
    throttled = errors.error_from_status(429, status(429, "TooManyRequests", retryAfterSeconds=3))
    assert throttled.retry_after == 3.0


def test_non_status_bodies_still_map() -> None:
    error = errors.error_from_status(502, "<html>bad gateway</html>")
    assert isinstance(error, errors.ServerError)
    assert "bad gateway" in error.message
    assert errors.error_from_status(404, None).message == "HTTP 404"


def test_transient_classification() -> None:
    assert errors.is_transient(errors.ConnectionFailed("x"))
    assert errors.is_transient(errors.error_from_status(503, None))
    assert errors.is_transient(errors.error_from_status(429, None))
    for code in (400, 401, 403, 404, 409, 410, 422):
        assert not errors.is_transient(errors.error_from_status(code, None))
    assert not errors.is_transient(ValueError())


# -- resources -------------------------------------------------------------------------


def test_paths() -> None:
    assert PODS.path("default", "p1", "status") == "/api/v1/namespaces/default/pods/p1/status"
    assert PODS.path() == "/api/v1/pods"
    assert PODS.path("ns") == "/api/v1/namespaces/ns/pods"
    assert LEASES.path("ns", "l") == "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l"
    assert NAMESPACES.path(None, "default") == "/api/v1/namespaces/default"
    assert RUNS.path("ns", "r") == "/apis/kruntimes.io/v1alpha1/namespaces/ns/runs/r"
    assert RUNTIMES.api_version == "kruntimes.io/v1alpha1"
    assert RUNTIMES.kind == "Runtime"
    assert SELFSUBJECTACCESSREVIEWS.path() == (
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
    )
    assert DEPLOYMENTS.api_version == "apps/v1"
    assert str(LEASES) == "leases.coordination.k8s.io"
    assert str(PODS) == "pods"


def test_names_are_quoted() -> None:
    assert PODS.path("ns", "a/b") == "/api/v1/namespaces/ns/pods/a%2Fb"
    # every character outside the unreserved set is quoted, in names and namespaces
    assert PODS.path("n s", "a.b_c~d-e") == "/api/v1/namespaces/n%20s/pods/a.b_c~d-e"
    assert PODS.path("ns", "x?y#z%é") == "/api/v1/namespaces/ns/pods/x%3Fy%23z%25%C3%A9"
    assert PODS.path("ns", "a\nb") == "/api/v1/namespaces/ns/pods/a%0Ab"


@pytest.mark.parametrize(
    ("ref", "args", "match"),
    [
        (NAMESPACES, ("default", "x"), "cluster-scoped"),
        (PODS, (None, "p"), "namespace is required"),
        (PODS, ("ns", None, "status"), "needs a name"),
        (PODS, ("", None), "namespace must not be empty"),
        (PODS, ("ns", ""), "name must not be empty"),
    ],
)
def test_bad_addresses(ref: ResourceRef, args: tuple[object, ...], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ref.path(*args)  # type: ignore[arg-type]


# -- backoff ---------------------------------------------------------------------------


def test_backoff_doubles_with_jitter_and_caps() -> None:
    backoff = Backoff(base=1.0, maximum=10.0, jitter=0.5, rng=random.Random(7))
    delays = [backoff.next_delay() for _ in range(8)]
    for n, delay in enumerate(delays):
        ceiling = min(10.0, 2.0**n)
        assert ceiling / 2 <= delay <= ceiling
    backoff.reset()
    assert backoff.next_delay() <= 1.0


def test_backoff_without_jitter_is_exact() -> None:
    backoff = Backoff(base=0.5, maximum=3.0, jitter=0.0)
    assert [backoff.next_delay() for _ in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]


def test_backoff_survives_long_outages() -> None:
    backoff = Backoff(base=1.0, maximum=30.0)
    for _ in range(5000):
        delay = backoff.next_delay()
    assert 15.0 <= delay <= 30.0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"base": 0}, "base must be > 0"),
        ({"base": 2, "maximum": 1}, "below base"),
        ({"jitter": 1.5}, "jitter"),
    ],
)
def test_backoff_validation(kwargs: dict[str, float], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Backoff(**kwargs)  # type: ignore[arg-type]
