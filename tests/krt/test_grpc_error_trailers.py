"""Custom trailers on an error status (``krt.grpc.status_messages.StatusWithTrailers``).

runtimed answers a 503-mapped status for a Run that has ended with the trailer
``x-kruntime-retry-after: never``; the servers send a :class:`StatusWithTrailers` raised in
``RpcFailedError`` with its trailers after ``grpc-status``/``grpc-message`` (in a
Trailers-Only response), and the client reports them as the call's trailers.
"""

from __future__ import annotations

import pytest
from purerpc.grpclib.exceptions import RpcFailedError
from purerpc.grpclib.status import Status, StatusCode

from krt.grpc.status_messages import (
    StatusWithTrailers,
    bounded,
    status_fields,
    status_for_error,
)

TRAILER = ("x-kruntime-retry-after", "never")


def test_the_trailers_follow_the_status_fields() -> None:
    status = StatusWithTrailers(StatusCode.FAILED_PRECONDITION, "ended", [TRAILER])
    assert status_fields(status) == [("grpc-status", "9"), ("grpc-message", "ended"), TRAILER]
    assert status_fields(Status(StatusCode.FAILED_PRECONDITION, "x"))[2:] == []


def test_a_raised_status_keeps_its_trailers_and_bound() -> None:
    status = StatusWithTrailers(StatusCode.UNAVAILABLE, "m" * 10_000, [TRAILER])
    answered = status_for_error(RpcFailedError(status), request_type=None, name="s/M")
    assert isinstance(answered, StatusWithTrailers)
    assert answered.trailers == (TRAILER,)
    cut = bounded(answered)
    assert isinstance(cut, StatusWithTrailers)
    assert cut.trailers == (TRAILER,)
    assert len(cut.status_message) < 10_000


@pytest.mark.parametrize(
    "pair",
    [("grpc-status", "0"), ("X-Upper", "v"), (":status", "200"), ("", "v"), ("k", "caf\u00e9")],
)
def test_reserved_or_malformed_trailers_are_refused(pair: tuple[str, str]) -> None:
    with pytest.raises(ValueError, match="trailer"):
        StatusWithTrailers(StatusCode.UNAVAILABLE, "x", [pair])
