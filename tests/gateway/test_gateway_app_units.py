"""The invoke app and dispatcher in memory: validation order, limits, deadlines, fuzzing."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import trio
import trio.testing
from conftest import NAMESPACE, PATH, RUNTIME, UID
from gwfakes import call_asgi
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.app import GatewayApp
from gateway.errors import HttpError
from gateway.invoke import Invoker, InvokeRequest, InvokeResult
from gateway.metrics import GatewayMetrics
from gateway.pool import ConnectFailedError, PoolKey, ServiceNotFoundError
from gateway.validation import MAX_BODY_BYTES
from krt.api.endpoint import FunctionEndpointRef
from krt.grpc.client import ConnectionLostError
from krt.proto.executor.v1 import runtime_pb2 as pb

GOOD = [
    (b"authorization", b"Bearer tok"),
    (b"content-type", b"application/json"),
]
#: every status the gateway may answer with (docs/gateway.md, "Status codes")
DOCUMENTED = {200, 400, 401, 403, 404, 405, 413, 415, 429, 500, 503, 504}


class RecordingInvoker:
    """Stands in for :class:`Invoker`: records requests, answers with a fixed result."""

    def __init__(self, outcome: InvokeResult | HttpError | None = None) -> None:
        self.requests: list[InvokeRequest] = []
        self.outcome = outcome or InvokeResult(b'{"ok":true}', "application/json", None)
        self.cancelled = False

    async def invoke(self, request: InvokeRequest) -> InvokeResult:
        self.requests.append(request)
        if isinstance(self.outcome, HttpError):
            raise self.outcome
        if self.outcome.output == b"hang":
            try:
                await trio.sleep_forever()
            except trio.Cancelled:
                self.cancelled = True
                raise
        return self.outcome


def make_app(invoker: Any, metrics: GatewayMetrics | None = None) -> GatewayApp:
    return GatewayApp(
        invoker, metrics or GatewayMetrics(), default_timeout_seconds=30, max_timeout_seconds=60
    )


async def post(app: GatewayApp, headers: list[tuple[bytes, bytes]], *chunks: bytes, **kw: Any):
    return await call_asgi(app, path=PATH, headers=headers, chunks=list(chunks) or [b"{}"], **kw)


async def test_valid_request_is_dispatched_with_path_token_body_and_timeout() -> None:
    invoker = RecordingInvoker()
    response = await post(
        make_app(invoker),
        [*GOOD, (b"x-kruntime-invocation-id", b"abc"), (b"x-kruntime-timeout", b"1500")],
        b'{"a":',
        b"1}",
    )
    assert response.status == 200
    assert response.headers["x-kruntime-invocation-id"] == "abc"
    (request,) = invoker.requests
    assert request.ref == FunctionEndpointRef(NAMESPACE, RUNTIME, UID)
    assert request.token == "tok"
    assert request.body == b'{"a":1}'
    assert request.timeout_seconds == 1.5


@pytest.mark.parametrize(
    ("headers", "body", "status", "reason"),
    [
        # 1. token before everything else
        ([(b"content-type", b"text/plain")], b"not json", 401, "Unauthorized"),
        ([(b"authorization", b"Basic abc"), *GOOD[1:]], b"{}", 401, "Unauthorized"),
        ([(b"authorization", b"Bearer "), *GOOD[1:]], b"{}", 401, "Unauthorized"),
        ([(b"authorization", b"Bearer a b"), *GOOD[1:]], b"{}", 401, "Unauthorized"),
        ([*GOOD, (b"authorization", b"Bearer other")], b"{}", 401, "Unauthorized"),
        # 2. content type before size, JSON and invocation ID
        ([GOOD[0]], b"{}", 415, "UnsupportedMediaType"),
        ([GOOD[0], (b"content-type", b"text/plain")], b"x" * 10, 415, "UnsupportedMediaType"),
        ([GOOD[0], (b"content-type", b"application/json; charset=latin-1")], b"{}", 415,
         "UnsupportedMediaType"),
        ([GOOD[0], (b"content-type", b"application/jsonx")], b"{}", 415, "UnsupportedMediaType"),
        # 3. size before JSON validity
        ([*GOOD, (b"content-length", str(MAX_BODY_BYTES + 1).encode())], b"nope", 413,
         "RequestTooLarge"),
        ([*GOOD, (b"content-length", b"9" * 30)], b"nope", 413, "RequestTooLarge"),
        ([*GOOD, (b"content-length", b"-1")], b"{}", 400, "InvalidContentLength"),
        # 4. JSON before the invocation ID
        ([*GOOD, (b"x-kruntime-invocation-id", b"x" * 200)], b"{", 400, "InvalidJSON"),
        ([*GOOD], b"", 400, "InvalidJSON"),
        ([*GOOD], b"NaN", 400, "InvalidJSON"),
        ([*GOOD], b'{"a": 1} {"b": 2}', 400, "InvalidJSON"),
        ([*GOOD], b"\xff", 400, "InvalidJSON"),
        ([*GOOD], b"[" * 100_000 + b"]" * 100_000, 400, "InvalidJSON"),
        # 5. the invocation ID
        ([*GOOD, (b"x-kruntime-invocation-id", b"x" * 129)], b"{}", 400, "InvalidInvocationID"),
        ([*GOOD, (b"x-kruntime-invocation-id", b"a b")], b"{}", 400, "InvalidInvocationID"),
        ([*GOOD, (b"x-kruntime-invocation-id", "é".encode())], b"{}", 400,
         "InvalidInvocationID"),
        ([*GOOD, (b"x-kruntime-invocation-id", b"a"), (b"x-kruntime-invocation-id", b"b")],
         b"{}", 400, "InvalidInvocationID"),
        # 6. the timeout
        ([*GOOD, (b"x-kruntime-timeout", b"0")], b"{}", 400, "InvalidTimeout"),
        ([*GOOD, (b"x-kruntime-timeout", b"1.5")], b"{}", 400, "InvalidTimeout"),
        ([*GOOD, (b"x-kruntime-timeout", b"-5")], b"{}", 400, "InvalidTimeout"),
    ],
)  # fmt: skip
async def test_rejections_in_the_documented_order_never_dispatch(
    headers: list[tuple[bytes, bytes]], body: bytes, status: int, reason: str
) -> None:
    invoker = RecordingInvoker()
    metrics = GatewayMetrics()
    response = await post(make_app(invoker, metrics), headers, body)
    error = json.loads(response.body)["error"]
    assert (response.status, error["reason"]) == (status, reason), error
    assert error["code"] == status
    assert response.headers["content-type"] == "application/json"
    assert error["invocationId"] == response.headers["x-kruntime-invocation-id"]
    assert invoker.requests == []
    assert (
        metrics.registry.get_sample_value("krt_gateway_invocations_total", {"code": str(status)})
        == 1
    )
    if status == 401:
        assert response.headers["www-authenticate"] == "Bearer"
    if status == 413:
        assert str(MAX_BODY_BYTES) in error["message"]
        assert error["limitBytes"] == MAX_BODY_BYTES


async def test_body_is_not_read_when_content_length_exceeds_the_limit() -> None:
    invoker = RecordingInvoker()
    headers = [*GOOD, (b"content-length", str(MAX_BODY_BYTES + 1).encode())]
    response = await post(make_app(invoker), headers, b"x" * 10)
    assert response.status == 413
    assert response.receives_before_response == 0
    # afterwards the unread rest is discarded (not stored) so the client can read the 413
    assert response.receives == 1


async def test_chunked_body_is_counted_while_streaming_and_not_read_past_the_limit() -> None:
    invoker = RecordingInvoker()
    chunk = b" " * (256 * 1024)
    chunks = [chunk] * 4 + [b"1"] + [b"never read"] * 10  # 1 MiB + 1 after five chunks
    response = await post(make_app(invoker), GOOD, *chunks)
    assert response.status == 413
    assert response.receives_before_response == 5
    assert invoker.requests == []
    assert response.receives == len(chunks)  # the rest discarded after the response


async def test_discarding_after_an_early_rejection_is_bounded(
    autojump_clock: trio.testing.MockClock,
) -> None:
    chunk = b" " * (1024 * 1024)
    response = await post(make_app(RecordingInvoker()), GOOD[1:], *([chunk] * 100))
    assert response.status == 401
    assert response.receives_before_response == 0
    assert response.receives == 5  # 4 MiB discarded at most, then the app returns
    start = trio.current_time()
    # a client that stalls mid-body is dropped after DRAIN_SECONDS
    stalled = await call_asgi(
        make_app(RecordingInvoker()), path=PATH, headers=GOOD[1:], chunks=[b"x"] * 0
    )
    assert stalled.status == 401
    assert trio.current_time() - start == pytest.approx(2.0)


async def test_body_of_exactly_the_limit_passes() -> None:
    invoker = RecordingInvoker()
    body = b'"' + b"a" * (MAX_BODY_BYTES - 2) + b'"'
    response = await post(
        make_app(invoker), GOOD, body[: MAX_BODY_BYTES // 2], body[MAX_BODY_BYTES // 2 :]
    )
    assert response.status == 200
    assert invoker.requests[0].body == body


async def test_invocation_id_limits_128_bytes_passes_and_absent_is_generated() -> None:
    invoker = RecordingInvoker()
    app = make_app(invoker)
    ok = await post(app, [*GOOD, (b"x-kruntime-invocation-id", b"~" * 128)])
    assert ok.status == 200
    assert ok.headers["x-kruntime-invocation-id"] == "~" * 128
    generated = await post(app, GOOD)
    assert generated.status == 200
    first = generated.headers["x-kruntime-invocation-id"]
    second = (await post(app, GOOD)).headers["x-kruntime-invocation-id"]
    assert re.fullmatch(r"[0-9a-f]{32}", first)  # 128 random bits, lowercase hex
    assert first != second
    assert invoker.requests[1].invocation_id == first


async def test_invalid_invocation_id_is_answered_with_a_generated_one() -> None:
    response = await post(
        make_app(RecordingInvoker()), [*GOOD, (b"x-kruntime-invocation-id", b"x" * 129)]
    )
    assert response.status == 400
    assert len(response.headers["x-kruntime-invocation-id"]) == 32


async def test_timeout_header_is_clamped_to_the_maximum_and_defaults() -> None:
    invoker = RecordingInvoker()
    app = make_app(invoker)
    await post(app, [*GOOD, (b"x-kruntime-timeout", b"999999")])
    await post(app, GOOD)
    assert [r.timeout_seconds for r in invoker.requests] == [60, 30]


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("POST", "/v1/namespaces/demo/runtimes/python/runs/abc:invoke", 404),
        ("POST", "/v1/namespaces/Demo/runtimes/python/functions/abc:invoke", 404),
        ("POST", "/v1/namespaces/demo/runtimes/python/functions/a%2Fb:invoke", 404),
        ("POST", "/", 404),
        ("GET", PATH, 405),
        ("PUT", PATH, 405),
    ],
)
async def test_routes_other_than_the_invoke_path(method: str, path: str, status: int) -> None:
    invoker = RecordingInvoker()
    response = await call_asgi(
        make_app(invoker), method=method, path=path, headers=GOOD, chunks=[b"{}"]
    )
    assert response.status == status
    assert (
        json.loads(response.body)["error"]["invocationId"]
        == response.headers["x-kruntime-invocation-id"]
    )
    assert invoker.requests == []
    if status == 405:
        assert response.headers["allow"] == "POST"


async def test_upstream_error_is_answered_with_its_status_and_headers() -> None:
    error = HttpError(503, "FunctionUnavailable", "recovering", headers={"retry-after": "3"})
    response = await post(
        make_app(RecordingInvoker(error)), [*GOOD, (b"x-kruntime-invocation-id", b"id-1")]
    )
    assert response.status == 503
    assert response.headers["retry-after"] == "3"
    assert json.loads(response.body) == {
        "error": {"code": 503, "reason": "FunctionUnavailable", "message": "recovering",
                  "invocationId": "id-1"}
    }  # fmt: skip


async def test_disconnect_during_invocation_cancels_it_and_sends_nothing() -> None:
    invoker = RecordingInvoker(InvokeResult(b"hang", "application/json", None))
    metrics = GatewayMetrics()
    response = await post(make_app(invoker, metrics), GOOD, disconnect_after_body=True)
    assert response.status == 0  # nothing sent
    assert invoker.cancelled
    assert metrics.registry.get_sample_value("krt_gateway_invocations_total", {"code": "499"}) == 1
    assert metrics.registry.get_sample_value("krt_gateway_invocations_in_flight") == 0


async def test_healthz_and_lifespan() -> None:
    app = make_app(RecordingInvoker())
    response = await call_asgi(app, method="GET", path="/healthz", headers=[], chunks=[])
    assert response.status == 200
    messages = iter([{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}])
    sent: list[str] = []

    async def receive() -> dict[str, str]:
        return next(messages)

    async def send(message: dict[str, str]) -> None:
        sent.append(message["type"])

    await app({"type": "lifespan"}, receive, send)
    assert sent == ["lifespan.startup.complete", "lifespan.shutdown.complete"]


# --- the dispatcher's own deadline, on virtual time -------------------------------------------


class HangingPool:
    def __init__(self, error: BaseException | None = None) -> None:
        self.cancelled = False
        self.calls: list[dict[str, Any]] = []
        self.error = error

    async def unary_call(
        self, key: PoolKey, service: str, method: str, payload: bytes, **kw: Any
    ) -> bytes:
        self.calls.append(
            {"key": key, "service": service, "method": method, "payload": payload, **kw}
        )
        if self.error is not None:
            raise self.error
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            self.cancelled = True
            raise
        raise AssertionError


def invoke_request(timeout: float = 2.0) -> InvokeRequest:
    return InvokeRequest(FunctionEndpointRef(NAMESPACE, RUNTIME, UID), "tok", "inv", b"{}", timeout)


async def test_gateway_deadline_cancels_the_call_and_answers_504(
    autojump_clock: trio.testing.MockClock,
) -> None:
    pool = HangingPool()
    invoker = Invoker(pool, deadline_grace_seconds=0.5, retry_after_seconds=1)  # type: ignore[arg-type]
    start = trio.current_time()
    with pytest.raises(HttpError) as excinfo:
        await invoker.invoke(invoke_request(2.0))
    assert trio.current_time() - start == pytest.approx(2.5)
    assert excinfo.value.status == 504
    assert excinfo.value.reason == "InvocationTimeout"
    assert pool.cancelled
    (call,) = pool.calls
    assert call["timeout_seconds"] == pytest.approx(2.5)
    request = pb.InvokeFunctionRequest.FromString(call["payload"])
    assert request.timeout_millis == 2000
    assert (call["service"], call["method"]) == ("executor.v1.FunctionRuntime", "InvokeFunction")
    assert call["metadata"][0] == ("authorization", "Bearer tok")


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (ConnectFailedError("refused"), "RuntimeUnreachable"),
        (ConnectionLostError("reset", dispatched=False), "RuntimeUnreachable"),
    ],
)
async def test_connection_failures_are_503_with_retry_after(error: Exception, reason: str) -> None:
    invoker = Invoker(HangingPool(error), deadline_grace_seconds=0.5, retry_after_seconds=7)  # type: ignore[arg-type]
    with pytest.raises(HttpError) as excinfo:
        await invoker.invoke(invoke_request())
    assert (excinfo.value.status, excinfo.value.reason) == (503, reason)
    assert excinfo.value.headers["retry-after"] == "7"


async def test_a_connection_lost_after_dispatch_is_502_interrupted_without_retry_after() -> None:
    """Seed 000: no retry after dispatch; the outcome is unknown, so no "retry later" 503."""
    lost = ConnectionLostError("peer closed the connection", dispatched=True)
    invoker = Invoker(HangingPool(lost), deadline_grace_seconds=0.5, retry_after_seconds=7)  # type: ignore[arg-type]
    with pytest.raises(HttpError) as excinfo:
        await invoker.invoke(invoke_request())
    assert (excinfo.value.status, excinfo.value.reason) == (502, "InvocationInterrupted")
    assert "retry-after" not in excinfo.value.headers
    assert excinfo.value.message == (
        "the connection to the Runtime Service broke during the call (peer closed the "
        "connection); the invocation may have run and was not retried"
    )


async def test_a_service_name_that_does_not_exist_is_404_function_not_found() -> None:
    missing = ServiceNotFoundError("Service runtime-nosuch.default.svc does not resolve")
    invoker = Invoker(HangingPool(missing), deadline_grace_seconds=0.5, retry_after_seconds=7)  # type: ignore[arg-type]
    with pytest.raises(HttpError) as excinfo:
        await invoker.invoke(invoke_request())
    assert (excinfo.value.status, excinfo.value.reason) == (404, "FunctionNotFound")
    assert "retry-after" not in excinfo.value.headers
    assert excinfo.value.message == (
        f"no Runtime {RUNTIME!r} in namespace {NAMESPACE} "
        "(Service runtime-nosuch.default.svc does not resolve)"
    )


# --- fuzzing: nothing crashes, every rejection is documented ----------------------------------

_header_names = st.sampled_from(
    [b"authorization", b"content-type", b"content-length", b"x-kruntime-invocation-id",
     b"x-kruntime-timeout", b"x-other"]
)  # fmt: skip
_header_values = st.one_of(
    st.binary(max_size=300),
    st.sampled_from([b"Bearer t", b"application/json", b"0", b"12", b"99999999", b"bearer x"]),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    headers=st.lists(st.tuples(_header_names, _header_values), max_size=8),
    body=st.one_of(st.binary(max_size=200), st.sampled_from([b"{}", b"[1, 2]", b'"x"', b"nul"])),
    keep_valid=st.booleans(),
)
async def test_fuzzed_headers_and_bodies_get_documented_answers(
    headers: list[tuple[bytes, bytes]], body: bytes, keep_valid: bool
) -> None:
    invoker = RecordingInvoker()
    all_headers = [*GOOD, *headers] if keep_valid else headers
    response = await post(make_app(invoker), all_headers, body)
    assert response.status in DOCUMENTED
    assert "x-kruntime-invocation-id" in response.headers
    if response.status != 200:
        error = json.loads(response.body)["error"]
        assert error["code"] == response.status
        assert invoker.requests == []
    else:
        assert len(invoker.requests) == 1


# --- mapping details ------------------------------------------------------------------------


def test_retry_after_trailer_is_honoured_and_clamped() -> None:
    from gateway.mapping import error_for_status, retry_after_seconds

    assert retry_after_seconds([("x-kruntime-retry-after", "7")], 1) == 7
    assert retry_after_seconds([("x-kruntime-retry-after", "0")], 1) == 1
    assert retry_after_seconds([("x-kruntime-retry-after", "100000")], 1) == 300
    assert retry_after_seconds([("x-kruntime-retry-after", "soon")], 2) == 2
    assert retry_after_seconds([], 3) == 3
    error = error_for_status(9, "recovering", [("x-kruntime-retry-after", "12")], retry_after=1)
    assert (error.status, error.headers["retry-after"]) == (503, "12")
    not_found = error_for_status(5, "gone", [("x-kruntime-retry-after", "12")])
    assert "retry-after" not in not_found.headers


def test_unknown_status_codes_and_handler_error_types() -> None:
    from gateway.mapping import error_for_status

    odd = error_for_status(99, "")
    assert (odd.status, odd.reason, odd.details["grpcCode"]) == (500, "InternalError", "CODE_99")
    handler = error_for_status(2, "pkg.mod.CustomError: it broke: badly")
    assert handler.details["errorType"] == "pkg.mod.CustomError"
    untyped = error_for_status(2, "it broke")
    assert untyped.details["errorType"] == "UNKNOWN"
    assert len(error_for_status(13, "x" * 10_000).message) == 2048


def test_output_content_type_is_sanitized() -> None:
    from gateway.mapping import output_content_type

    assert output_content_type("") == "application/json"
    assert output_content_type("text/plain") == "text/plain"
    assert output_content_type("text/plain\r\nx-evil: 1") == "application/octet-stream"
