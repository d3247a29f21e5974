"""The proxy's per-call checks and metrics, as rewritten for speed, keep their rules."""

from __future__ import annotations

import pytest

from krt.proto.executor.v1 import runtime_pb2 as pb
from runtimed.dataplane.metrics import DataplaneMetrics
from runtimed.dataplane.proxy import MAX_INVOCATION_ID_BYTES, _check_request, _Reject
from runtimed.dataplane.tokens import TokenError, bearer_token

JWT = "eyJhbGciOiJSUzI1NiJ9." + "eyJzdWIiOiJzeXN0ZW0ifQ" * 40 + "." + "c2lnbmF0dXJl" * 30


def test_a_kilobyte_jwt_is_a_valid_token() -> None:
    assert len(JWT) > 1000
    assert bearer_token([("authorization", f"Bearer {JWT}")]) == JWT


@pytest.mark.parametrize("bad", ["a\tb", "a\x7fb", "caf\u00e9", "a\nb", "a\x00b", "\u00a0"])
def test_tokens_with_invisible_or_non_ascii_characters_are_refused(bad: str) -> None:
    with pytest.raises(TokenError, match="whitespace or control characters"):
        bearer_token([("authorization", f"Bearer {bad}")])


def request(invocation_id: str) -> pb.InvokeFunctionRequest:
    return pb.InvokeFunctionRequest(
        registration=pb.FunctionRegistration(run_uid="uid-1"), invocation_id=invocation_id
    )


@pytest.mark.parametrize("good", ["", "inv-1", "~" * MAX_INVOCATION_ID_BYTES, "!#$%&'()*+"])
def test_invocation_ids_of_visible_ascii_pass(good: str) -> None:
    _check_request(request(good))


@pytest.mark.parametrize(
    "bad",
    ["a b", "caf\u00e9", "x" * (MAX_INVOCATION_ID_BYTES + 1), "a\x7f", "tab\t", "\u00e9" * 100],
)
def test_invocation_ids_outside_visible_ascii_are_invalid(bad: str) -> None:
    with pytest.raises(_Reject, match=f"at most {MAX_INVOCATION_ID_BYTES} bytes of visible ASCII"):
        _check_request(request(bad))


def test_record_counts_each_code_and_route_in_its_own_series() -> None:
    metrics = DataplaneMetrics()
    for _ in range(3):
        metrics.record(code="OK", route="local", seconds=0.002)
    metrics.record(code="RESOURCE_EXHAUSTED", route="local", seconds=0.0001)
    metrics.record(code="OK", route="remote", seconds=0.02)
    sample = metrics.registry.get_sample_value
    assert sample("runtimed_invocations_total", {"code": "OK", "route": "local"}) == 3
    assert (
        sample("runtimed_invocations_total", {"code": "RESOURCE_EXHAUSTED", "route": "local"}) == 1
    )
    assert sample("runtimed_invocations_total", {"code": "OK", "route": "remote"}) == 1
    assert sample("runtimed_invocation_duration_seconds_count", {"route": "local"}) == 4
    assert sample("runtimed_invocation_duration_seconds_count", {"route": "remote"}) == 1
    assert (
        sample("runtimed_invocation_duration_seconds_bucket", {"route": "local", "le": "0.0005"})
        == 1
    )
