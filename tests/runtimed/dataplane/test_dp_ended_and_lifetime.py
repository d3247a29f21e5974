"""What runtimed's invoke proxy says about an ended Run (F5) and a lifetime-cut call (F7).

Seed 000, Runtime Gateway: a known Run that is not invocable is a 503; one that has ended
(Failed, Timeout, Cancelled, Succeeded) will never be Ready again, so runtimed says so and
sends ``x-kruntime-retry-after: never`` (the gateway then sends no ``Retry-After``). Seed
002: an invocation's timeout is bounded by the Run's remaining lifetime (``spec.timeout``);
when that bound cuts it short, the DEADLINE_EXCEEDED says so, with the numbers.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import trio
from dp_harness import (
    UID,
    Node,
    client,
    gateway_metadata,
    invoke,
    request,
    start_node,
    write_peer_tls,
)
from dp_objects import function_run, runtime_pod

from krt.grpc.client import GrpcStatusError
from krt.kube.clock import FakeClock

FAILED_PRECONDITION, DEADLINE_EXCEEDED = 9, 4
NEVER = ("x-kruntime-retry-after", "never")


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    tls = write_peer_tls(tmp_path / "peer")
    async with trio.open_nursery() as nursery:
        with trio.fail_after(10):
            b = await start_node(nursery, pod_uid="pod-b", host="127.0.0.3", tls=tls.peer())
        b.pod_event(runtime_pod("pod-b", ip=b.host, port=b.port))
        b.run_event(function_run(UID, pod_uid="pod-b"))
        b.ready(attempt=1, registration_id="reg-b1")
        b.tls = tls  # type: ignore[attr-defined]
        with trio.fail_after(20):
            yield b
        nursery.cancel_scope.cancel()


async def refusal(node: Node, **fields: Any) -> GrpcStatusError:
    async with client(node.host, node.port, node.tls.gateway_context()) as conn:  # type: ignore[attr-defined]
        with pytest.raises(GrpcStatusError) as info:
            await invoke(conn, request(**fields))
    return info.value


def ended(phase: str, reason: str, **meta: Any) -> dict[str, Any]:
    obj = function_run(UID, pod_uid="pod-b", phase=phase, ready="False", **meta)
    obj["status"]["reason"] = reason
    return obj


@pytest.mark.parametrize(
    ("phase", "reason"),
    [("Failed", "RegistrationLost"), ("Timeout", "IdleTimeout"), ("Cancelled", "Cancelled")],
)
async def test_an_ended_run_says_it_has_ended_and_not_to_retry(
    node: Node, phase: str, reason: str
) -> None:
    obj = ended(phase, reason)
    if phase == "Cancelled":
        obj["spec"]["cancelRequested"] = True  # krt cancel: the request stays set
    node.run_event(obj)
    error = await refusal(node)
    assert error.code == FAILED_PRECONDITION  # still a 503: "known Run but not ready"
    assert error.message == (
        f"the Run has ended ({phase}: {reason}); it will not become Ready again "
        "(create it again to invoke it)"
    )
    assert NEVER in error.trailers
    assert node.server.requests == []


async def test_a_deleting_run_is_terminating_and_may_be_retried(node: Node) -> None:
    node.run_event(ended("Failed", "RegistrationLost", deletionTimestamp="2026-01-01T00:00:00Z"))
    error = await refusal(node)
    assert (error.code, error.message) == (FAILED_PRECONDITION, "the Run is terminating")
    assert NEVER not in error.trailers


async def test_a_run_not_ready_says_why_and_may_be_retried(node: Node) -> None:
    obj = function_run(UID, pod_uid="pod-b", ready="False")
    obj["status"]["conditions"][0].update(
        reason="Unavailable", message="the local Runtime Server is not answering"
    )
    node.run_event(obj)
    error = await refusal(node)
    assert error.code == FAILED_PRECONDITION
    assert error.message == (
        "the Run is not Ready (Unavailable: the local Runtime Server is not answering)"
    )
    assert NEVER not in error.trailers


async def test_a_hop_passes_the_owners_never_retry_on(tmp_path: Path) -> None:
    """A forwarding runtimed whose cache still shows the Run Ready relays the owner's answer."""
    tls = write_peer_tls(tmp_path / "peer")
    async with trio.open_nursery() as nursery:
        with trio.fail_after(10):
            a = await start_node(nursery, pod_uid="pod-a", host="127.0.0.2", tls=tls.peer())
            b = await start_node(nursery, pod_uid="pod-b", host="127.0.0.3", tls=tls.peer())
        for each in (a, b):
            for other in (a, b):
                each.pod_event(runtime_pod(other.pod_uid, ip=other.host, port=other.port))
        a.run_event(function_run(UID, pod_uid="pod-b"))  # A's cache lags behind
        b.run_event(ended("Failed", "RegistrationLost"))
        async with client(a.host, a.port, tls.gateway_context()) as conn:
            with pytest.raises(GrpcStatusError) as info:
                await invoke(conn)
        assert info.value.code == FAILED_PRECONDITION
        assert "has ended (Failed: RegistrationLost)" in info.value.message
        assert NEVER in info.value.trailers
        nursery.cancel_scope.cancel()


def lifetime_run(*, started: datetime, timeout: str) -> dict[str, Any]:
    obj = function_run(UID, pod_uid="pod-b")
    obj["spec"]["timeout"] = timeout
    obj["status"]["startTime"] = started.strftime("%Y-%m-%dT%H:%M:%SZ")
    return obj


async def test_a_call_cut_short_by_the_lifetime_names_the_lifetime(node: Node) -> None:
    """F7: 5 s lifetime, 4.8 s gone: the call is bounded to 0.2 s and says why."""
    started = datetime(2026, 1, 1, tzinfo=UTC)
    node.proxy.clock = FakeClock(started + timedelta(seconds=4.8))
    node.run_event(lifetime_run(started=started, timeout="5s"))
    node.server.block = True
    error = await refusal(node, timeout_millis=30_000)
    assert error.code == DEADLINE_EXCEEDED
    assert error.message == (
        "the function's lifetime (spec.timeout 5s) ended 0.2 s into the invocation; "
        "an invocation is bounded by the Run's remaining lifetime (the Run ends with phase "
        "Timeout, LifetimeExceeded)"
    )
    (sent,) = node.server.requests
    assert 0 < sent.timeout_millis <= 200


async def test_the_callers_own_shorter_timeout_keeps_its_own_message(node: Node) -> None:
    started = datetime(2026, 1, 1, tzinfo=UTC)
    node.proxy.clock = FakeClock(started)
    node.run_event(lifetime_run(started=started, timeout="1h"))
    node.server.block = True
    async with client(node.host, node.port, node.tls.gateway_context()) as conn:  # type: ignore[attr-defined]
        with pytest.raises(GrpcStatusError) as info:
            await conn.unary_call(
                "executor.v1.FunctionRuntime",
                "InvokeFunction",
                request(timeout_millis=200).SerializeToString(),
                metadata=gateway_metadata(),
                timeout_seconds=0.2,
            )
    assert info.value.code == DEADLINE_EXCEEDED
    assert "lifetime" not in info.value.message
    assert "grpc-timeout 0.2" in info.value.message
