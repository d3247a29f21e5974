"""runtimed's FunctionRuntime proxy over real sockets (seed 000 Runtime Gateway; seed 002 hop).

Node A (Pod ``pod-a``, 127.0.0.2) and node B (Pod ``pod-b``, 127.0.0.3) each run the
production listener with peer mTLS; the Run is owned by B unless a test says otherwise.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import socket
import struct
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import trio
from dp_harness import (
    UID,
    Node,
    TLSFiles,
    client,
    gateway_metadata,
    invoke,
    request,
    start_node,
    write_peer_tls,
)
from dp_objects import function_run, runtime_pod

from krt.grpc.client import ConnectionLostError, GrpcStatusError
from runtimed.dataplane.proxy import (
    HOP_ATTEMPT_HEADER,
    HOP_HEADER,
    HOP_POD_UID_HEADER,
    HOP_RUN_UID_HEADER,
)

OK, CANCELLED, UNKNOWN, INVALID_ARGUMENT = 0, 1, 2, 3
NOT_FOUND, PERMISSION_DENIED, RESOURCE_EXHAUSTED, FAILED_PRECONDITION = 5, 7, 8, 9
UNIMPLEMENTED, UNAVAILABLE, UNAUTHENTICATED = 12, 14, 16


class Cluster:
    """Two nodes sharing one view of the world (each cache fed the same events)."""

    def __init__(self, a: Node, b: Node, tls: TLSFiles) -> None:
        self.a, self.b, self.tls = a, b, tls
        for node in (a, b):
            for other in (a, b):
                node.pod_event(runtime_pod(other.pod_uid, ip=other.host, port=other.port))

    def run_event(self, **kwargs: object) -> None:
        for node in (self.a, self.b):
            node.run_event(function_run(UID, **kwargs))  # type: ignore[arg-type]

    def gateway(self, node: Node) -> object:
        return client(node.host, node.port, self.tls.gateway_context())


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    tls = write_peer_tls(tmp_path / "peer")
    async with trio.open_nursery() as nursery:
        with trio.fail_after(10):
            a = await start_node(nursery, pod_uid="pod-a", host="127.0.0.2", tls=tls.peer())
            b = await start_node(nursery, pod_uid="pod-b", host="127.0.0.3", tls=tls.peer())
        world = Cluster(a, b, tls)
        world.run_event(pod_uid="pod-b")
        b.ready(attempt=1, registration_id="reg-b1")
        with trio.fail_after(20):
            yield world
        nursery.cancel_scope.cancel()


def counter(node: Node, name: str, **labels: str) -> float:
    value = node.metrics.registry.get_sample_value(name, labels)
    return value or 0.0


async def status_of(node: Node, tls: TLSFiles, **kwargs: object) -> int:
    async with client(node.host, node.port, tls.gateway_context()) as conn:
        with pytest.raises(GrpcStatusError) as info:
            await invoke(conn, **kwargs)  # type: ignore[arg-type]
    return info.value.code


async def test_local_owner_fills_registration_and_hides_it(cluster: Cluster) -> None:
    async with cluster.gateway(cluster.b) as conn:  # type: ignore[attr-defined]
        response = await invoke(conn)
    assert response.output == b'{"echo":{"x":1}}'
    assert response.invocation_id == "inv-1"
    assert dict(response.outputs) == {"answer": "42"}
    assert response.registration.registration_id == ""  # the gateway never sees it
    (sent,) = cluster.b.server.requests
    assert sent.registration.registration_id == "reg-b1"
    assert sent.registration.run_uid == UID
    assert 0 < sent.timeout_millis <= 5000
    assert counter(cluster.b, "runtimed_invocations_total", code="OK", route="local") == 1


async def test_zero_timeout_becomes_the_callers_deadline(cluster: Cluster) -> None:
    async with cluster.gateway(cluster.b) as conn:  # type: ignore[attr-defined]
        await invoke(conn, request(timeout_millis=0))  # grpc-timeout 10 s (harness)
    (sent,) = cluster.b.server.requests
    assert 9_000 < sent.timeout_millis <= 10_000  # never 0 (unbounded) once a deadline exists


async def test_remote_owner_is_reached_by_exactly_one_hop(cluster: Cluster) -> None:
    async with cluster.gateway(cluster.a) as conn:  # type: ignore[attr-defined]
        response = await invoke(conn)
    assert response.output == b'{"echo":{"x":1}}'
    assert response.registration.registration_id == ""
    assert cluster.a.server.requests == []
    assert len(cluster.b.server.requests) == 1
    assert counter(cluster.a, "runtimed_proxied_hops_total", direction="out") == 1
    assert counter(cluster.b, "runtimed_proxied_hops_total", direction="in") == 1
    assert counter(cluster.a, "runtimed_invocations_total", code="OK", route="remote") == 1
    # the owner authorized the forwarded token itself
    assert cluster.a.reviewer.reviews == 1
    assert cluster.b.reviewer.reviews == 1


async def test_owner_rejects_a_stale_sender(cluster: Cluster) -> None:
    # recovery re-registered the Run on B as attempt 2; A's cache still shows attempt 1
    cluster.b.run_event(function_run(UID, pod_uid="pod-b", attempt=2))
    cluster.b.ready(attempt=2, registration_id="reg-b2")
    assert await status_of(cluster.a, cluster.tls) == FAILED_PRECONDITION
    assert cluster.b.server.requests == []


async def test_owner_whose_cache_lags_answers_unavailable(cluster: Cluster) -> None:
    cluster.a.run_event(function_run(UID, pod_uid="pod-b", attempt=2))
    assert await status_of(cluster.a, cluster.tls) == UNAVAILABLE
    assert cluster.b.server.requests == []


async def test_second_hop_is_refused(cluster: Cluster) -> None:
    # A believes B owns the Run; B believes A does: no ping-pong, one hop then 503
    cluster.b.run_event(function_run(UID, pod_uid="pod-a"))
    cluster.a.ready(attempt=1, registration_id="reg-a1")
    assert await status_of(cluster.a, cluster.tls) == FAILED_PRECONDITION
    assert cluster.a.server.requests == []
    assert cluster.b.server.requests == []
    assert counter(cluster.a, "runtimed_proxied_hops_total", direction="out") == 1
    assert counter(cluster.b, "runtimed_proxied_hops_total", direction="out") == 0


async def test_hop_marker_needs_a_verified_peer_certificate(cluster: Cluster) -> None:
    forged = [
        *gateway_metadata(),
        (HOP_HEADER, "1"),
        (HOP_RUN_UID_HEADER, UID),
        (HOP_ATTEMPT_HEADER, "1"),
        (HOP_POD_UID_HEADER, "pod-b"),
    ]
    assert await status_of(cluster.b, cluster.tls, metadata=forged) == PERMISSION_DENIED
    assert cluster.b.server.requests == []


async def test_peer_with_a_foreign_ca_cannot_connect(cluster: Cluster, tmp_path: Path) -> None:
    foreign = write_peer_tls(tmp_path / "foreign")
    context = foreign.peer().client
    context.load_verify_locations(cadata=cluster.tls.ca.cert_pem.bytes().decode())
    # the server refuses the handshake: the call fails on a broken connection, never served
    with pytest.RaisesGroup(ConnectionLostError):
        async with client(cluster.b.host, cluster.b.port, context) as conn:
            await invoke(conn)
    assert cluster.b.server.requests == []


async def test_overlapping_invokes_get_429_at_once(cluster: Cluster) -> None:
    cluster.b.server.block = True
    async with trio.open_nursery() as nursery, cluster.gateway(cluster.b) as conn:  # type: ignore[attr-defined]
        nursery.start_soon(invoke, conn)
        await cluster.b.server.entered.wait()
        for entry in (cluster.b, cluster.a):  # directly and through the peer hop
            started = trio.current_time()
            assert await status_of(entry, cluster.tls) == RESOURCE_EXHAUSTED
            assert trio.current_time() - started < 1.0  # no queueing
        nursery.cancel_scope.cancel()
    assert len(cluster.b.server.requests) == 1


async def test_cancellation_reaches_the_server_and_frees_the_slot(cluster: Cluster) -> None:
    cluster.b.server.block = True
    async with cluster.gateway(cluster.a) as conn:  # type: ignore[attr-defined]  # via the hop
        async with trio.open_nursery() as nursery:
            nursery.start_soon(invoke, conn)
            await cluster.b.server.entered.wait()
            assert UID in cluster.b.proxy.slots
            nursery.cancel_scope.cancel()  # the gateway's client went away
        with trio.fail_after(2):
            await cluster.b.server.cancelled.wait()  # the handler was cancelled
        with trio.fail_after(2):
            while UID in cluster.b.proxy.slots:  # noqa: ASYNC110 - freed by unwinding
                await trio.sleep(0.005)
        cluster.b.server.block = False
        response = await invoke(conn)  # the next invoke succeeds at once
    assert response.output.startswith(b'{"echo"')


@pytest.mark.parametrize("method", ["RegisterFunction", "FunctionStatus", "UnregisterFunction"])
async def test_pod_local_operations_are_not_public(cluster: Cluster, method: str) -> None:
    assert await status_of(cluster.b, cluster.tls, method=method) == PERMISSION_DENIED


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"metadata": gateway_metadata(None)}, UNAUTHENTICATED),
        ({"metadata": gateway_metadata("bad-token")}, UNAUTHENTICATED),
        ({"metadata": gateway_metadata("denied-token")}, PERMISSION_DENIED),
        ({"message": request("9b1b5e0a-0000-4000-8000-000000000000")}, NOT_FOUND),
        ({"message": request(reg="reg-guess")}, INVALID_ARGUMENT),
        ({"message": request(invocation_id="x" * 129)}, INVALID_ARGUMENT),
        ({"message": request(body=b"1" * (1024 * 1024 + 1))}, INVALID_ARGUMENT),
        (
            {"metadata": [("x-kruntime-namespace", "elsewhere"), *gateway_metadata()[1:]]},
            NOT_FOUND,
        ),
    ],
    ids=[
        "no-token",
        "bad-token",
        "denied",
        "unknown-uid",
        "registration-id",
        "long-id",
        "big-input",
        "namespace",
    ],
)
async def test_refusals(cluster: Cluster, kwargs: dict[str, object], code: int) -> None:
    assert await status_of(cluster.b, cluster.tls, **kwargs) == code
    assert cluster.b.server.requests == []


async def test_not_ready_and_terminating_are_503(cluster: Cluster) -> None:
    cluster.run_event(pod_uid="pod-b", ready="False", phase="Running")
    assert await status_of(cluster.b, cluster.tls) == FAILED_PRECONDITION
    assert await status_of(cluster.a, cluster.tls) == FAILED_PRECONDITION
    cluster.run_event(pod_uid="pod-b", deletionTimestamp="2026-01-01T00:00:00Z")
    assert await status_of(cluster.b, cluster.tls) == FAILED_PRECONDITION
    assert cluster.b.server.requests == []


async def test_lost_registration_on_the_server_is_503_not_404(cluster: Cluster) -> None:
    cluster.b.server.answer_not_found = True
    assert await status_of(cluster.b, cluster.tls) == FAILED_PRECONDITION


async def test_an_unhealthy_local_server_is_refused_at_once(cluster: Cluster) -> None:
    # runtimed's readiness loop saw Health fail: invokes are UNAVAILABLE (gateway 503) at
    # once instead of each waiting its deadline on a hung server; they pass again once
    # Health does
    cluster.b.proxy.server_down = "RuntimeServerUnreachable: Health timed out"
    async with client(cluster.b.host, cluster.b.port, cluster.tls.gateway_context()) as conn:
        with pytest.raises(GrpcStatusError) as info:
            await invoke(conn)
    assert info.value.code == UNAVAILABLE
    assert "not answering its health checks" in info.value.message
    assert "Health timed out" in info.value.message
    assert cluster.b.server.requests == []
    cluster.b.proxy.server_down = None
    async with cluster.gateway(cluster.b) as conn:  # type: ignore[attr-defined]
        assert (await invoke(conn)).output == b'{"echo":{"x":1}}'


async def test_unreachable_owner_is_unavailable(cluster: Cluster) -> None:
    listener = trio.socket.socket()
    await listener.bind(("127.0.0.3", 0))
    dead_port = listener.getsockname()[1]
    listener.close()  # nothing listens there
    cluster.a.pod_event(runtime_pod("pod-b", ip="127.0.0.3", port=dead_port))
    async with client(cluster.a.host, cluster.a.port, cluster.tls.gateway_context()) as conn:
        with pytest.raises(GrpcStatusError) as info:
            await invoke(conn)
    assert info.value.code == UNAVAILABLE
    assert info.value.message == (
        f"the owner runtimed is unreachable: cannot connect to 127.0.0.3:{dead_port}: "
        "connection refused"
    )


async def test_logs_carry_ids_and_never_the_token(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    # runtimed.__main__ (krt.logs.configure) keeps hpack (which logs raw headers at DEBUG) at WARNING
    caplog.set_level(logging.INFO)
    caplog.set_level(logging.DEBUG, logger="runtimed")
    async with cluster.gateway(cluster.a) as conn:  # type: ignore[attr-defined]
        await invoke(conn)
    await status_of(cluster.a, cluster.tls, metadata=gateway_metadata("denied-token"))
    records = [r for r in caplog.records if r.name == "runtimed.dataplane.proxy"]
    assert len(records) >= 3  # A and B for the hop, A for the refusal
    for record in records:
        assert vars(record)["runtime"] == "python"
        assert vars(record)["run_uid"] == UID
        assert vars(record)["invocation_id"] == "inv-1"
    for token in ("good-token", "denied-token"):
        assert token not in caplog.text


async def test_timeout_is_bounded_by_the_run_lifetime(cluster: Cluster) -> None:
    start = datetime.now(UTC) - timedelta(seconds=58)
    stamp = start.strftime("%Y-%m-%dT%H:%M:%SZ")
    obj = function_run(UID, pod_uid="pod-b")
    obj["spec"]["timeout"] = "60s"
    obj["status"]["startTime"] = stamp
    cluster.b.run_event(obj)
    async with cluster.gateway(cluster.b) as conn:  # type: ignore[attr-defined]
        await invoke(conn, request(timeout_millis=30_000))
    (sent,) = cluster.b.server.requests
    assert 0 < sent.timeout_millis <= 3_000  # about 2 s of lifetime left, not 30 s
    obj["spec"]["timeout"] = "50s"  # the lifetime has ended
    cluster.b.run_event(obj)
    assert await status_of(cluster.b, cluster.tls) == FAILED_PRECONDITION
    assert len(cluster.b.server.requests) == 1


async def test_closed_caller_connection_cancels_too(cluster: Cluster) -> None:
    cluster.b.server.block = True
    async with cluster.gateway(cluster.b) as conn:  # type: ignore[attr-defined]
        async with trio.open_nursery() as nursery:

            async def doomed() -> None:
                with pytest.raises(ConnectionLostError):
                    await invoke(conn)

            nursery.start_soon(doomed)
            await cluster.b.server.entered.wait()
            conn.close()  # the whole connection goes away, not just the stream
    with trio.fail_after(2):
        await cluster.b.server.cancelled.wait()
    with trio.fail_after(2):
        while UID in cluster.b.proxy.slots:  # noqa: ASYNC110 - freed by unwinding
            await trio.sleep(0.005)
    cluster.b.server.block = False
    async with cluster.gateway(cluster.b) as conn:  # type: ignore[attr-defined]
        assert (await invoke(conn)).output.startswith(b'{"echo"')


ABORTED = 10


async def reset_after_the_request(stream: trio.SocketStream) -> None:
    """Read the request, then reset the connection (RST, as a crashed Runtime Server)."""
    await stream.receive_some(65536)
    await trio.sleep(0.05)  # let the whole request arrive before the reset
    stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    stream.socket.close()


async def test_a_server_connection_broken_after_dispatch_is_aborted_not_unavailable(
    cluster: Cluster,
) -> None:
    # seed 000: "a connection failure may have an unknown execution outcome"; UNAVAILABLE
    # (gateway 503 + Retry-After, "retry later") would invite a blind retry of an
    # invocation that may have run: ABORTED (gateway 502 InvocationInterrupted) instead
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            functools.partial(trio.serve_tcp, reset_after_the_request, 0, host="127.0.0.3")
        )
        crashing = listeners[0].socket.getsockname()[1]
        proxy = cluster.b.proxy
        proxy.identity = dataclasses.replace(proxy.identity, server_port=crashing)
        async with cluster.gateway(cluster.a) as conn:  # type: ignore[attr-defined]  # via the hop
            with pytest.raises(GrpcStatusError) as info:
                await invoke(conn)
        nursery.cancel_scope.cancel()
    assert info.value.code == ABORTED
    assert info.value.message == (
        "the connection to the local Runtime Server broke during the invocation "
        "(the server reset the connection)"
    )
    assert UID not in proxy.slots


class LostUpstream:
    """An upstream whose connection fails (``dispatched`` as given) during the call."""

    def __init__(self, *, dispatched: bool) -> None:
        self.dispatched = dispatched

    async def unary_call(
        self, host: str, port: int, method: str, payload: bytes, **_: object
    ) -> bytes:
        await trio.lowlevel.checkpoint()
        raise ConnectionLostError("peer closed the connection", dispatched=self.dispatched)


@pytest.mark.parametrize(
    ("dispatched", "code", "text"),
    [
        (True, ABORTED, "broke during the invocation (peer closed the connection)"),
        (False, UNAVAILABLE, "failed before the invocation was sent: peer closed the connection"),
    ],
)
async def test_a_lost_owner_connection_says_whether_the_invocation_was_sent(
    cluster: Cluster, dispatched: bool, code: int, text: str
) -> None:
    cluster.a.proxy.peers = LostUpstream(dispatched=dispatched)
    cluster.b.proxy.server = LostUpstream(dispatched=dispatched)
    for entry, upstream in (
        (cluster.a, "the owner runtimed"),
        (cluster.b, "the local Runtime Server"),
    ):
        async with client(entry.host, entry.port, cluster.tls.gateway_context()) as conn:
            with pytest.raises(GrpcStatusError) as info:
                await invoke(conn)
        assert info.value.code == code
        assert info.value.message == f"the connection to {upstream} {text}"
