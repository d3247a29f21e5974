"""runtimed's FunctionRuntime proxy (the Service port) under random requests and metadata.

Two runtimed proxies as in ``tests/runtimed/dataplane`` (``dp_harness.start_node``: the
production listener with peer mTLS on 127.0.0.2 and 127.0.0.3, each with a fake Runtime
Server); the Run is Ready and owned by B (attempt 1). Every example is one InvokeFunction
sent either like the gateway (TLS, no client certificate) to A (a remote owner: one hop) or
to B (local), or like a peer runtimed (client certificate) to B with hop metadata.

Property (seed 000 "Runtime Gateway", seed 002 proxy hop; the order of
:mod:`runtimed.dataplane.proxy`): the answer is exactly the status of the first broken rule
(INVALID_ARGUMENT for request fields and malformed hop metadata, NOT_FOUND for another
namespace/Runtime or an unknown Run, UNAUTHENTICATED / PERMISSION_DENIED for tokens,
PERMISSION_DENIED for a hop marker without a peer certificate, FAILED_PRECONDITION or
UNAVAILABLE for hop expectations that do not match the owner); only a request that breaks no
rule reaches the Runtime Server, exactly once; the proxies keep serving, with no invocation
left in flight.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import trio
from dp_harness import UID, Node, TLSFiles, client, start_node, write_peer_tls
from dp_objects import NAMESPACE, RUNTIME, function_run, runtime_pod
from hypothesis import event, example, given
from hypothesis import strategies as st

from krt.grpc.client import GrpcConnection, GrpcStatusError
from krt.proto.executor.v1 import runtime_pb2 as pb
from runtimed.dataplane.proxy import (
    HOP_ATTEMPT_HEADER,
    HOP_HEADER,
    HOP_POD_UID_HEADER,
    HOP_RUN_UID_HEADER,
)

from .fuzzing import fuzz_settings, on_trio, run_property

OK, INVALID_ARGUMENT, NOT_FOUND, PERMISSION_DENIED = 0, 3, 5, 7
FAILED_PRECONDITION, UNAVAILABLE, UNAUTHENTICATED = 9, 14, 16
MIB = 1024 * 1024
NS_HEADER, RT_HEADER = "x-kruntime-namespace", "x-kruntime-runtime"


@dataclass
class World:
    """Nodes A and B, and one long-lived client connection per way in (see :class:`Case`)."""

    a: Node
    b: Node
    tls: TLSFiles
    connections: dict[str, GrpcConnection] = field(default_factory=dict)


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    tls = write_peer_tls(tmp_path / "peer")
    async with trio.open_nursery() as nursery, AsyncExitStack() as stack:
        with trio.fail_after(10):
            a = await start_node(nursery, pod_uid="pod-a", host="127.0.0.2", tls=tls.peer())
            b = await start_node(nursery, pod_uid="pod-b", host="127.0.0.3", tls=tls.peer())
        for node in (a, b):
            for other in (a, b):
                node.pod_event(runtime_pod(other.pod_uid, ip=other.host, port=other.port))
            node.run_event(function_run(UID, pod_uid="pod-b"))
        b.ready(attempt=1, registration_id="reg-b1")
        world = World(a, b, tls)
        for via, node, context in (
            ("gateway-a", a, tls.gateway_context()),
            ("gateway-b", b, tls.gateway_context()),
            ("peer-b", b, tls.peer().client),  # presents the peer certificate
        ):
            world.connections[via] = await stack.enter_async_context(
                client(node.host, node.port, context)
            )
        yield world
        nursery.cancel_scope.cancel()


# --- cases ----------------------------------------------------------------------------------

visible = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=40)
printable = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40)


@dataclass(frozen=True)
class Case:
    via: str  # "gateway-a", "gateway-b" (no client certificate), "peer-b" (peer certificate)
    run_uid: str
    registration_id: str
    invocation_id: str
    input: bytes
    timeout_millis: int
    metadata: list[tuple[str, str]] = field(default_factory=list)
    raw: bytes | None = None  # a payload that replaces the serialized request


#: the parts of a call a case may break (the oracle, :func:`expected`, decides the status).
PARTS = ("run_uid", "registration_id", "invocation_id", "input", "token", "namespace",
         "runtime", "hop", "raw")  # fmt: skip
ASCII_VISIBLE = st.characters(min_codepoint=0x21, max_codepoint=0x7E)


@st.composite
def cases(draw: st.DrawFn, breaking: str | None) -> Case:
    """A call with ``breaking`` broken (None: none; "several": 2-3 parts)."""
    if breaking == "several":
        broken = draw(st.frozensets(st.sampled_from(PARTS), min_size=2, max_size=3))
    else:
        broken = frozenset([breaking] if breaking else [])
    via = draw(st.sampled_from(["gateway-a", "gateway-b", "peer-b"]))
    if "hop" in broken and draw(st.integers(0, 4)):
        via = "peer-b"  # mostly from a verified peer: the expectations are then checked
    run_uid = UID
    if "run_uid" in broken:
        run_uid = draw(st.sampled_from(["", "0f3c2a52-0000-0000-0000-000000000000"]) | visible)
    registration_id = (
        draw(st.sampled_from(["reg-b1", "x", "reg-b2"])) if "registration_id" in broken else ""
    )
    if "invocation_id" in broken:
        invocation_id = draw(
            st.text(ASCII_VISIBLE, min_size=129, max_size=300)
            | st.text(min_size=1, max_size=20).filter(
                lambda s: any(not 0x21 <= ord(c) <= 0x7E for c in s)
            )
        )
    else:
        invocation_id = draw(st.just("") | st.text(ASCII_VISIBLE, max_size=128))
    if "input" in broken:
        body = b"x" * (MIB + draw(st.integers(1, 10)))
    else:  # the proxy passes any bytes through (the Runtime Server checks them)
        body = draw(
            st.sampled_from([b'{"x":1}', b"", b"\xff\xfe", b"\x00", b"x" * MIB])
            | st.binary(max_size=50)
        )
    timeout_millis = draw(st.sampled_from([0, 5000, 5000, 10**12, -1]))
    metadata: list[tuple[str, str]] = []
    if "token" in broken:
        kind = draw(st.sampled_from(["denied", "bad", "none", "twice", "odd"]))
        if kind in ("denied", "bad"):
            metadata.append(("authorization", f"Bearer {kind}-token"))
        elif kind == "twice":
            metadata += [("authorization", "Bearer good-token")] * 2
        elif kind == "odd":
            metadata.append(
                (
                    "authorization",
                    draw(
                        st.sampled_from(
                            [
                                "Bearer",
                                "Bearer  ",
                                "Basic good-token",
                                "good-token",
                                "Bearer good token",
                                "bearer\tgood-token",
                            ]
                        )
                        | printable
                    ),
                )
            )
    else:
        metadata.append(
            (
                "authorization",
                draw(
                    st.sampled_from(
                        ["Bearer good-token", "bearer good-token", "BEARER  good-token "]
                    )
                ),
            )
        )
    for part, name, ours in (("namespace", NS_HEADER, NAMESPACE), ("runtime", RT_HEADER, RUNTIME)):
        if part in broken:
            if draw(st.booleans()):
                metadata.append(
                    (name, draw(printable.filter(lambda v, ours=ours: v.strip() != ours)))
                )
            else:
                metadata += [(name, ours), (name, ours)]
        elif draw(st.integers(0, 3)):  # optional: absent is fine
            metadata.append((name, ours))
    if "hop" in broken:
        metadata += draw(hop_metadata(broken=True))
    elif via == "peer-b" and draw(st.booleans()):
        metadata += draw(hop_metadata(broken=False))
    metadata = draw(st.permutations(metadata))
    raw = None
    if "raw" in broken:
        raw = draw(
            st.sampled_from(
                [b"\xff", b"\x0a\x02\xff\xfe", b"\x12\x01", b"\x0a\x05\x0a\x03\xc3\x28a"]
            )
            | st.binary(min_size=1, max_size=30)
        )
    return Case(via, run_uid, registration_id, invocation_id, body, timeout_millis, metadata, raw)


@st.composite
def hop_metadata(draw: st.DrawFn, *, broken: bool) -> list[tuple[str, str]]:
    """Hop marker and expectations: matching the owner B's view, or broken somehow."""
    values = {
        HOP_HEADER: "1",
        HOP_RUN_UID_HEADER: UID,
        HOP_POD_UID_HEADER: "pod-b",
        HOP_ATTEMPT_HEADER: draw(st.sampled_from(["1", "01", "000000001"])),
    }
    extra: list[tuple[str, str]] = []
    if broken:
        name = draw(st.sampled_from(sorted(values)))
        how = draw(st.sampled_from(["change", "change", "change", "drop", "twice"]))
        if how == "drop":
            del values[name]
        elif how == "twice":
            extra.append((name, values[name]))
        else:
            values[name] = draw(
                {
                    HOP_HEADER: st.sampled_from(["2", "0", "", "yes", "11"]),
                    HOP_RUN_UID_HEADER: st.sampled_from(["", "other-uid"]),
                    HOP_POD_UID_HEADER: st.sampled_from(["", "pod-a", "pod-c"]),
                    HOP_ATTEMPT_HEADER: st.sampled_from(
                        ["0", "2", "", "-1", "x", "1" * 10, "²", "١", "+1"]
                    ),
                }[name]
            )
    return [*values.items(), *extra]


def _values(metadata: list[tuple[str, str]], name: str) -> list[str]:
    return [value for key, value in metadata if key == name]


def expected(case: Case) -> set[int]:
    """The status the documented order gives ``case`` (a set where the spec allows two)."""
    if case.raw is not None:
        try:
            message = pb.InvokeFunctionRequest.FromString(case.raw)
        except Exception:  # noqa: BLE001 - any decode failure is INVALID_ARGUMENT
            return {INVALID_ARGUMENT}
        case = Case(case.via, message.registration.run_uid, message.registration.registration_id,
                    message.invocation_id, message.input, message.timeout_millis, case.metadata)  # fmt: skip
    # 1. request fields
    iid = case.invocation_id
    if (
        not case.run_uid
        or case.registration_id
        or len(iid.encode()) > 128
        or any(not 0x21 <= ord(c) <= 0x7E for c in iid)
        or len(case.input) > MIB
    ):
        return {INVALID_ARGUMENT}
    for name, ours in ((NS_HEADER, NAMESPACE), (RT_HEADER, RUNTIME)):
        sent = _values(case.metadata, name)
        if len(sent) > 1:
            return {INVALID_ARGUMENT}
        if sent and sent[0] != ours:
            return {NOT_FOUND}
    # 2. the bearer token
    auth = _values(case.metadata, "authorization")
    token = ""
    if len(auth) == 1 and auth[0][:7].lower() == "bearer ":
        token = auth[0][7:].strip()
    if not token or any(not 0x21 <= ord(c) <= 0x7E for c in token):
        return {UNAUTHENTICATED}
    # 3. hop marker and expectations
    hop = None
    markers = _values(case.metadata, HOP_HEADER)
    if len(markers) > 1:
        return {INVALID_ARGUMENT}
    if markers:
        if case.via != "peer-b":
            return {PERMISSION_DENIED}
        if markers[0] != "1":
            return {FAILED_PRECONDITION}
        fields = {}
        for name in (HOP_RUN_UID_HEADER, HOP_POD_UID_HEADER, HOP_ATTEMPT_HEADER):
            sent = _values(case.metadata, name)
            if len(sent) > 1:
                return {INVALID_ARGUMENT}
            fields[name] = sent[0] if sent else ""
        attempt = fields[HOP_ATTEMPT_HEADER]
        if (
            not fields[HOP_RUN_UID_HEADER]
            or not fields[HOP_POD_UID_HEADER]
            or not (attempt.isascii() and attempt.isdigit())
            or len(attempt) > 9
        ):
            return {INVALID_ARGUMENT}
        hop = (fields[HOP_RUN_UID_HEADER], fields[HOP_POD_UID_HEADER], int(attempt))
    # 4. the ownership cache
    if case.run_uid != UID:
        return {UNAVAILABLE} if hop else {NOT_FOUND}
    # 5. authorization of the exact Run
    if token == "denied-token":
        return {PERMISSION_DENIED}
    if token != "good-token":
        return {UNAUTHENTICATED}
    # 6. routing: the owner checks a hop's expectations against its own view
    if hop is not None:
        run_uid, pod_uid, attempt = hop
        if run_uid != UID or pod_uid != "pod-b" or attempt < 1:
            return {FAILED_PRECONDITION}
        if attempt > 1:
            return {UNAVAILABLE}
    if case.timeout_millis < 0:
        return {OK, INVALID_ARGUMENT}
    return {OK}


# --- the property ---------------------------------------------------------------------------


async def call(world: World, case: Case) -> tuple[int, str, bytes]:
    """Send ``case`` on the long-lived connection of its way in (it must stay usable)."""
    payload = case.raw
    if payload is None:
        payload = pb.InvokeFunctionRequest(
            registration=pb.FunctionRegistration(
                run_uid=case.run_uid, registration_id=case.registration_id
            ),
            invocation_id=case.invocation_id,
            input=case.input,
            content_type="application/json",
            timeout_millis=case.timeout_millis,
        ).SerializeToString()
    conn = world.connections[case.via]
    try:
        reply = await conn.unary_call(
            "executor.v1.FunctionRuntime",
            "InvokeFunction",
            payload,
            metadata=case.metadata,
            timeout_seconds=10,
        )
    except GrpcStatusError as exc:
        return exc.code, exc.message, b""
    finally:
        assert conn.usable, f"the proxy dropped the {case.via} connection: {conn.close_reason}"
    return OK, "", reply


def in_flight(node: Node) -> float:
    return node.metrics.registry.get_sample_value("runtimed_invocations_in_flight") or 0.0


async def check(world: World, case: Case) -> str:
    before = len(world.b.server.requests) + len(world.a.server.requests)
    code, message, reply = await call(world, case)
    allowed = expected(case)
    assert code in allowed, (code, message, allowed)
    assert message or code == OK
    dispatched = len(world.b.server.requests) + len(world.a.server.requests) - before
    if code == OK:
        assert dispatched == 1, "an accepted invoke did not reach the Runtime Server once"
        assert world.a.server.requests == [], "the non-owner's Runtime Server was called"
        response = pb.InvokeFunctionResponse.FromString(reply)
        assert response.registration.registration_id == ""  # the private ID never leaks
        sent = world.b.server.requests[-1]
        assert sent.registration.registration_id == "reg-b1"
        assert sent.input == (case.input if case.raw is None else sent.input)
    else:
        assert dispatched == 0, "a refused invoke reached a Runtime Server"
    assert in_flight(world.a) == 0
    assert in_flight(world.b) == 0
    # still serving: a clean gateway invoke through the non-owner works
    healthy = Case("gateway-a", UID, "", "probe", b"{}", 5000,
                   [("authorization", "Bearer good-token"), (NS_HEADER, NAMESPACE)])  # fmt: skip
    probe, probe_message, _ = await call(world, healthy)
    assert probe == OK, probe_message
    return f"{case.via}: {code}"


GOOD = [("authorization", "Bearer good-token"), (NS_HEADER, NAMESPACE), (RT_HEADER, RUNTIME)]
HOP = [(HOP_HEADER, "1"), (HOP_RUN_UID_HEADER, UID), (HOP_POD_UID_HEADER, "pod-b")]


@pytest.mark.parametrize("breaking", [None, *PARTS, "several"])
async def test_random_invokes_get_the_first_broken_rules_status(
    world: World, breaking: str | None
) -> None:
    @fuzz_settings(max_examples={None: 30, "several": 30, "hop": 50}.get(breaking, 12))
    @given(case=cases(breaking))
    # a hop attempt of Unicode digits ("²".isdigit() is True, int("²") fails)
    @example(
        case=Case("peer-b", UID, "", "i", b"{}", 5000, [*GOOD, *HOP, (HOP_ATTEMPT_HEADER, "²")])
    )
    @example(
        case=Case("peer-b", UID, "", "i", b"{}", 5000, [*GOOD, *HOP, (HOP_ATTEMPT_HEADER, "1")])
    )
    @example(
        case=Case("gateway-b", UID, "", "i", b"{}", 5000, [*GOOD, *HOP, (HOP_ATTEMPT_HEADER, "1")])
    )
    def prop(case: Case) -> None:
        event(on_trio(check, world, case))

    await run_property(prop)


REQUEST_TYPES = {
    "RegisterFunction": pb.RegisterFunctionRequest,
    "FunctionStatus": pb.FunctionStatusRequest,
    "UnregisterFunction": pb.UnregisterFunctionRequest,
}


async def check_private_method(world: World, via: str, method: str, payload: bytes) -> str:
    before = len(world.b.server.requests) + len(world.a.server.requests)
    conn = world.connections[via]
    try:
        await conn.unary_call(
            "executor.v1.FunctionRuntime", method, payload, metadata=GOOD, timeout_seconds=10
        )
        code = OK
    except GrpcStatusError as exc:
        code = exc.code
    assert conn.usable, conn.close_reason
    try:
        REQUEST_TYPES[method].FromString(payload)
        decodes = True
    except Exception:  # noqa: BLE001 - any decode failure
        decodes = False
    # only the gateway's InvokeFunction is public on the Service port (seed 002)
    assert code == (PERMISSION_DENIED if decodes else INVALID_ARGUMENT), code
    assert len(world.b.server.requests) + len(world.a.server.requests) == before
    return f"{method}: {code}"


async def test_registration_methods_are_refused_on_the_service_port(world: World) -> None:
    @fuzz_settings(max_examples=40)
    @given(
        via=st.sampled_from(["gateway-a", "gateway-b", "peer-b"]),
        method=st.sampled_from(sorted(REQUEST_TYPES)),
        payload=st.binary(max_size=80)
        | st.builds(
            lambda uid, reg: pb.UnregisterFunctionRequest(
                registration=pb.FunctionRegistration(run_uid=uid, registration_id=reg)
            ).SerializeToString(),
            st.sampled_from([UID, "", "x"]),
            st.sampled_from(["reg-b1", "", "x"]),
        ),
    )
    def prop(via: str, method: str, payload: bytes) -> None:
        event(on_trio(check_private_method, world, via, method, payload))

    await run_property(prop)
    entry = world.b.registry.accepting(UID)  # the registration is untouched
    assert entry is not None
    assert entry.registration_id == "reg-b1"
