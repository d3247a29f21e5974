"""The gateway end to end over HTTPS: validation, dispatch, status mapping, cancellation."""

from __future__ import annotations

import functools
import json

import httpx
import purerpc
import pytest
import trio
import trio.testing
from conftest import NAMESPACE, RUNTIME, TOKEN, UID, StackFactory, TLSFiles
from gwfakes import delay_then, error_body, fail_with, respond

from gateway.tls_reload import UpstreamTLS
from krt.proto.executor.v1 import runtime_pb2 as pb


async def test_success_returns_output_content_type_outputs_and_invocation_id(
    gateway_stack: StackFactory,
) -> None:
    async with gateway_stack() as stack:
        response = await stack.invoke(b'{"hello": "world"}', x_kruntime_invocation_id="inv-42")
        assert response.status_code == 200
        assert response.content == b'{"hello": "world"}'
        assert response.headers["content-type"] == "application/json"
        assert response.headers["x-kruntime-invocation-id"] == "inv-42"
        assert json.loads(response.headers["x-kruntime-outputs"]) == {"size": "18"}
        received = stack.fake.received[0]
        request = received.request
        assert request.registration.run_uid == UID
        assert request.registration.registration_id == ""
        assert request.invocation_id == "inv-42"
        assert request.input == b'{"hello": "world"}'
        assert request.content_type == "application/json"
        assert request.timeout_millis == 30_000
        assert received.metadata["authorization"] == f"Bearer {TOKEN}"
        assert received.metadata["x-kruntime-namespace"] == NAMESPACE
        assert received.metadata["x-kruntime-runtime"] == RUNTIME
        assert received.timeout == pytest.approx(30.5)
        assert stack.metric("krt_gateway_invocations_total", {"code": "200"}) == 1


@pytest.mark.parametrize(
    ("code", "message", "status", "reason"),
    [
        (purerpc.StatusCode.NOT_FOUND, "no function run with this UID", 404, "FunctionNotFound"),
        (purerpc.StatusCode.FAILED_PRECONDITION, "run is recovering", 503, "FunctionUnavailable"),
        (purerpc.StatusCode.UNAVAILABLE, "owner unreachable", 503, "FunctionUnavailable"),
        # dispatched, then cut off: may have run, so no 503 + Retry-After (seed 000)
        (purerpc.StatusCode.CANCELLED, "registration drained", 502, "InvocationInterrupted"),
        (purerpc.StatusCode.ABORTED, "connection broke", 502, "InvocationInterrupted"),
        (purerpc.StatusCode.RESOURCE_EXHAUSTED, "one invocation in flight", 429, "TooManyRequests"),
        (purerpc.StatusCode.DEADLINE_EXCEEDED, "handler timed out", 504, "InvocationTimeout"),
        (purerpc.StatusCode.UNAUTHENTICATED, "token expired", 401, "Unauthorized"),
        (purerpc.StatusCode.PERMISSION_DENIED, "cannot get runs", 403, "Forbidden"),
        (purerpc.StatusCode.INVALID_ARGUMENT, "bad request", 400, "InvalidArgument"),
        (purerpc.StatusCode.UNKNOWN, "ValueError: bad input", 500, "HandlerError"),
        (purerpc.StatusCode.INTERNAL, "adapter crashed", 500, "InternalError"),
        (purerpc.StatusCode.UNIMPLEMENTED, "no FunctionRuntime", 500, "InternalError"),
    ],
)
async def test_grpc_status_maps_to_http_status(
    gateway_stack: StackFactory,
    code: purerpc.StatusCode,
    message: str,
    status: int,
    reason: str,
) -> None:
    async with gateway_stack(retry_after_seconds=2) as stack:
        stack.fake.behaviour = fail_with(code, message)
        response = await stack.invoke(x_kruntime_invocation_id="inv-7")
        assert response.status_code == status
        error = error_body(response)
        assert error["reason"] == reason
        if status == 502:
            assert error["message"] == f"{message}; the invocation may have run and was not retried"
        else:
            assert error["message"] == message
        assert error["invocationId"] == "inv-7"
        assert error["grpcCode"] == code.name
        assert response.headers["x-kruntime-invocation-id"] == "inv-7"
        assert "x-kruntime-outputs" not in response.headers
        if status == 503:
            assert response.headers["retry-after"] == "2"
        else:
            assert "retry-after" not in response.headers
        if code == purerpc.StatusCode.UNKNOWN:
            assert error["errorType"] == "ValueError"
        elif status == 500:
            assert error["errorType"] == code.name
        assert len(stack.fake.received) == 1  # dispatched once, never retried


async def test_unreachable_runtime_service_is_503_with_retry_after(
    gateway_stack: StackFactory,
) -> None:
    from gateway.targets import StaticResolver, Target, service_dns_name

    sock = trio.socket.socket()
    await sock.bind(("127.0.0.1", 0))
    closed_port = sock.getsockname()[1]
    sock.close()
    resolver = StaticResolver(
        {service_dns_name(NAMESPACE, RUNTIME): Target("127.0.0.1", closed_port)}
    )
    async with gateway_stack(resolver=resolver) as stack:
        response = await stack.invoke()
        assert response.status_code == 503
        assert error_body(response)["reason"] == "RuntimeUnreachable"
        assert response.headers["retry-after"] == "1"
        assert stack.metric("krt_gateway_upstream_connects_total", {"result": "error"}) == 1


async def test_a_name_that_does_not_resolve_is_503(gateway_stack: StackFactory) -> None:
    from gateway.targets import Target

    class Unresolvable:
        async def resolve(self, namespace: str, runtime: str) -> Target:
            raise OSError(f"no address for runtime-{runtime}.{namespace}.svc")

    async with gateway_stack(resolver=Unresolvable()) as stack:
        response = await stack.invoke()
        assert response.status_code == 503
        assert "no address for runtime-python.demo.svc" in error_body(response)["message"]
        assert stack.fake.received == []


async def test_client_timeout_header_reaches_runtimed(gateway_stack: StackFactory) -> None:
    async with gateway_stack() as stack:
        response = await stack.invoke(x_kruntime_timeout="1500")
        assert response.status_code == 200
        assert stack.fake.received[0].request.timeout_millis == 1500
        assert stack.fake.received[0].timeout == pytest.approx(2.0)


async def test_output_content_type_and_outputs_header(gateway_stack: StackFactory) -> None:
    async with gateway_stack() as stack:
        stack.fake.behaviour = respond(
            output=b"plain text", content_type="text/plain; charset=utf-8", outputs={"k": "é\n"}
        )
        response = await stack.invoke()
        assert response.status_code == 200
        assert response.content == b"plain text"
        assert response.headers["content-type"] == "text/plain; charset=utf-8"
        assert response.headers["x-kruntime-outputs"] == '{"k":"\\u00e9\\n"}'
        assert json.loads(response.headers["x-kruntime-outputs"]) == {"k": "é\n"}


async def test_outputs_breaking_a_bound_are_a_500(gateway_stack: StackFactory) -> None:
    async with gateway_stack() as stack:
        stack.fake.behaviour = respond(output=b"{}", outputs={"bad key": "v"})
        response = await stack.invoke()
        assert response.status_code == 500
        assert error_body(response)["reason"] == "InvalidOutputs"


async def test_empty_output_content_type_defaults_to_json(gateway_stack: StackFactory) -> None:
    async with gateway_stack() as stack:
        stack.fake.behaviour = respond(output=b"null")
        response = await stack.invoke()
        assert response.status_code == 200
        assert response.headers["content-type"] == "application/json"
        assert "x-kruntime-outputs" not in response.headers


async def test_body_limit_over_https(gateway_stack: StackFactory) -> None:
    limit = 1024 * 1024
    async with gateway_stack() as stack:
        fits = b'"' + b"a" * (limit - 2) + b'"'
        assert (await stack.invoke(fits)).status_code == 200
        assert stack.fake.received[-1].request.input == fits
        too_big = await stack.invoke(fits + b" ")
        assert too_big.status_code == 413
        assert error_body(too_big)["limitBytes"] == limit
        assert len(stack.fake.received) == 1

        async def chunked():
            for _ in range(4):
                yield b" " * (256 * 1024)
            yield b"1"

        response = await stack.client.post(stack.url, content=chunked(), headers=stack.headers())
        assert response.status_code == 413
        assert len(stack.fake.received) == 1


async def test_client_disconnect_cancels_the_grpc_call(gateway_stack: StackFactory) -> None:
    async with gateway_stack() as stack:
        stack.fake.behaviour = delay_then(3600)
        async with trio.open_nursery() as nursery:

            async def invoke_then_hang_up() -> None:
                with trio.CancelScope() as scope:
                    nursery.start_soon(cancel_when_started, scope)
                    await stack.invoke()

            async def cancel_when_started(scope: trio.CancelScope) -> None:
                await stack.fake.started.wait()
                assert stack.metric("krt_gateway_invocations_in_flight") == 1
                scope.cancel()

            nursery.start_soon(invoke_then_hang_up)
        with trio.fail_after(5):  # a safety net only: cancellation arrives in milliseconds
            await stack.fake.cancelled.wait()
        assert stack.fake.received[0].cancelled
        # the gateway records the disconnect before the reset reaches the server
        assert stack.metric("krt_gateway_invocations_total", {"code": "499"}) == 1
        # the slot is free at once: the next invocation succeeds
        stack.fake.behaviour = delay_then(0)
        assert (await stack.invoke()).status_code == 200


async def test_keep_alive_and_one_upstream_connection(gateway_stack: StackFactory) -> None:
    async with gateway_stack() as stack:
        peers = set()
        for _ in range(5):
            response = await stack.invoke()
            assert response.status_code == 200
            assert response.http_version == "HTTP/1.1"
            peers.add(response.extensions["network_stream"].get_extra_info("client_addr"))
        assert len(peers) == 1
        assert stack.metric("krt_gateway_upstream_connects_total", {"result": "ok"}) == 1
        assert stack.metric("krt_gateway_upstream_connections") == 1


async def test_alpn_offers_http1_only(gateway_stack: StackFactory) -> None:
    # hypercorn 0.17.3's HTTP/2 crashes the server on an early response (docs/gateway.md)
    async with gateway_stack(client_http2=True) as stack:
        response = await stack.invoke()
        assert response.http_version == "HTTP/1.1"
        rejected = await stack.invoke(authorization=None)
        assert rejected.status_code == 401
        assert rejected.http_version == "HTTP/1.1"


async def test_metrics_and_healthz_endpoints(gateway_stack: StackFactory) -> None:
    async with gateway_stack() as stack:
        await stack.invoke()
        await stack.invoke(authorization=None)
        metrics = await stack.client.get(stack.addresses.metrics + "/metrics")
        assert metrics.status_code == 200
        text = metrics.text
        assert 'krt_gateway_invocations_total{code="200"} 1.0' in text
        assert 'krt_gateway_invocations_total{code="401"} 1.0' in text
        assert "krt_gateway_invocation_duration_seconds_bucket" in text
        assert "krt_gateway_invocations_in_flight" in text
        assert (await stack.client.get(stack.addresses.metrics + "/healthz")).status_code == 200
        assert (await stack.client.get(stack.addresses.https + "/healthz")).status_code == 200
        assert (await stack.client.get(stack.addresses.metrics + "/nope")).status_code == 404


async def test_logs_carry_invocation_identity_and_never_the_token(
    gateway_stack: StackFactory, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    from krt.logs import EPOCH_LINES, JsonFormatter

    caplog.set_level(logging.INFO, logger="gateway")
    async with gateway_stack() as stack:
        await stack.invoke(x_kruntime_invocation_id="log-1")
        stack.fake.behaviour = fail_with(purerpc.StatusCode.UNKNOWN, "KeyError: 'x'")
        await stack.invoke(x_kruntime_invocation_id="log-2")
        await stack.invoke(b"{", x_kruntime_invocation_id="log-3")
    lines = [r for r in caplog.records if r.name == "gateway.invoke"]
    assert [r.invocation_id for r in lines] == ["log-1", "log-2", "log-3"]  # type: ignore[attr-defined]
    formatter = JsonFormatter(EPOCH_LINES)
    for record in lines:
        entry = json.loads(formatter.format(record))
        assert entry["namespace"] == NAMESPACE
        assert entry["runtime"] == RUNTIME
        assert entry["run_uid"] == UID
    assert TOKEN not in caplog.text
    assert all(TOKEN not in JsonFormatter(EPOCH_LINES).format(r) for r in caplog.records)


async def test_the_published_endpoint_url_is_the_routed_url(gateway_stack: StackFactory) -> None:
    from krt.api.endpoint import function_endpoint_url, parse_function_endpoint_url

    async with gateway_stack() as stack:
        url = function_endpoint_url(stack.addresses.https, NAMESPACE, RUNTIME, UID)
        response = await stack.client.post(url, content=b"{}", headers=stack.headers())
        assert response.status_code == 200
        assert stack.fake.received[0].request.registration.run_uid == UID
        assert parse_function_endpoint_url(url)[1].uid == UID


async def test_tls_to_runtimed_with_a_client_certificate(
    gateway_stack: StackFactory, tls_files: TLSFiles
) -> None:
    import ssl

    import trustme
    from gwfakes import FakeFunctionRuntime, serve_fake

    from gateway.targets import StaticResolver, Target, service_dns_name

    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    # runtimed's certificate names the Service, whatever address the name resolved to
    ca.issue_cert(service_dns_name(NAMESPACE, RUNTIME)).configure_cert(server_context)
    server_context.verify_mode = ssl.CERT_REQUIRED  # mutual TLS
    ca.configure_trust(server_context)
    server_context.set_alpn_protocols(["h2"])
    client_context = ssl.create_default_context()
    ca.configure_trust(client_context)
    ca.issue_cert("runtime-gateway.kruntimes-system.svc").configure_cert(client_context)
    fake = FakeFunctionRuntime()
    async with trio.open_nursery() as nursery:
        port = await nursery.start(functools.partial(serve_fake, fake, ssl_context=server_context))
        resolver = StaticResolver({service_dns_name(NAMESPACE, RUNTIME): Target("127.0.0.1", port)})
        async with gateway_stack(
            resolver=resolver, upstream=UpstreamTLS(client_context, None, None, None)
        ) as stack:
            response = await stack.invoke()
            assert response.status_code == 200
            assert len(fake.received) == 1
            assert stack.fake.received == []
        nursery.cancel_scope.cancel()


async def test_graceful_shutdown_lets_the_invocation_in_flight_finish(
    gateway_stack: StackFactory,
) -> None:
    release = trio.Event()

    async def wait_for_release(request: pb.InvokeFunctionRequest) -> pb.InvokeFunctionResponse:
        await release.wait()
        return pb.InvokeFunctionResponse(output=b'"done"', content_type="application/json")

    async with gateway_stack() as stack:
        stack.fake.behaviour = wait_for_release
        statuses: list[int] = []
        async with trio.open_nursery() as nursery:

            async def invoke() -> None:
                statuses.append((await stack.invoke()).status_code)

            nursery.start_soon(invoke)
            await stack.fake.started.wait()
            stack.shutdown.set()
            await trio.testing.wait_all_tasks_blocked()  # hypercorn has stopped accepting
            release.set()
        assert statuses == [200]
        async with httpx.AsyncClient(verify=stack.tls.client_context()) as fresh:
            with pytest.raises(httpx.ConnectError):
                await fresh.post(stack.url)


async def test_outputs_at_their_bounds_fit_in_the_header(gateway_stack: StackFactory) -> None:
    # 16 KiB in total, all control characters: the worst case for the JSON escaping
    outputs = {f"k{i:02d}": "\x01" * (256 - 3) for i in range(64)}
    async with gateway_stack() as stack:
        stack.fake.behaviour = respond(output=b"{}", outputs=outputs)
        response = await stack.invoke()
        assert response.status_code == 200
        assert json.loads(response.headers["x-kruntime-outputs"]) == outputs
        assert len(response.headers["x-kruntime-outputs"]) > 90_000
