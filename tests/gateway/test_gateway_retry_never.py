"""``x-kruntime-retry-after: never``: a 503 for a Run that has ended gets no ``Retry-After``.

runtimed answers FAILED_PRECONDITION for every known Run it cannot invoke (seed 000: 503),
but one that has ended (Failed, Timeout, Cancelled) will never be Ready again; a client
told ``Retry-After`` would retry forever (F5). runtimed marks that answer with the trailer
value ``never`` and the gateway leaves the header out.
"""

from __future__ import annotations

from gateway.mapping import error_for_status, retry_after_seconds, unavailable

NEVER = [("x-kruntime-retry-after", "never")]


def test_never_means_no_retry_after() -> None:
    assert retry_after_seconds(NEVER, 1) is None
    assert retry_after_seconds([("x-kruntime-retry-after", " never ")], 1) is None


def test_an_ended_run_is_503_without_retry_after() -> None:
    error = error_for_status(9, "the Run has ended (Failed: RegistrationLost)", NEVER)
    assert (error.status, error.reason) == (503, "FunctionUnavailable")
    assert "retry-after" not in error.headers
    assert error.details["grpcCode"] == "FAILED_PRECONDITION"
    assert error.message == "the Run has ended (Failed: RegistrationLost)"


def test_other_503s_keep_their_retry_after() -> None:
    assert error_for_status(9, "not Ready", retry_after=4).headers["retry-after"] == "4"
    assert (
        error_for_status(14, "cache behind", [("x-kruntime-retry-after", "9")]).headers[
            "retry-after"
        ]
        == "9"
    )
    assert unavailable("x", retry_after=2).headers == {"retry-after": "2"}
    assert unavailable("x", retry_after=None).headers == {}


def test_a_non_ascii_digit_is_not_a_number() -> None:
    # "²".isdigit() is True but int("²") raises: such a trailer is ignored, not a crash
    assert retry_after_seconds([("x-kruntime-retry-after", "²")], 3) == 3
